//! A real kiln server on a free loopback port, on its own thread with its own actix system,
//! for tests and benchmarks that talk HTTP to it.

use std::net::SocketAddr;
use std::sync::mpsc;
use std::thread::JoinHandle;

use actix::Addr;

use crate::config::Config;
use crate::executor::Executor;
use crate::scheduler::actor::SchedulerActor;
use crate::server::{PreparedEngine, start};

/// A server on a free loopback port, on its own thread with its own actix system; stopped
/// when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    pub scheduler: Addr<SchedulerActor>,
    registry: prometheus::Registry,
    handle: actix_web::dev::ServerHandle,
    thread: Option<JoinHandle<()>>,
}

impl TestServer {
    /// Serves `prepared` with `config` (its port is replaced by a free one).
    pub fn start<E: Executor>(mut config: Config, prepared: PreparedEngine<E>) -> anyhow::Result<Self> {
        config.server.host = "127.0.0.1".into();
        config.server.port = 0;
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                match start(&config, prepared).await {
                    Ok(running) => {
                        let handle = running.server.handle();
                        let registry = running.telemetry.registry.clone();
                        let _ = tx.send(Ok((running.addr, running.scheduler.clone(), registry, handle)));
                        let _ = running.server.await;
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            });
        });
        let (addr, scheduler, registry, handle) = rx.recv()??;
        Ok(Self {
            addr,
            scheduler,
            registry,
            handle,
            thread: Some(thread),
        })
    }

    /// The registry `/metrics` renders (benchmarks time the render without HTTP).
    pub fn registry(&self) -> &prometheus::Registry {
        &self.registry
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let stop = self.handle.stop(false);
        actix_web::rt::System::new().block_on(stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
