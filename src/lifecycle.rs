//! The process's life around the engine: draining on SIGTERM/SIGINT, and the watchdog that
//! declares a hung step fatal. `server.rs` wires them; the health they write is read by
//! `/health` and `/ready`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Addr;
use actix_web::dev::ServerHandle;

use crate::engine::health::EngineHealth;
use crate::engine::server_health::ServerHealth;
use crate::scheduler::actor::{AbortAll, SchedulerActor};

/// What draining needs.
pub struct Drain {
    pub server: ServerHandle,
    /// Every engine's health, turned draining.
    pub health: Arc<ServerHealth>,
    /// Every engine's scheduler.
    pub schedulers: Vec<Addr<SchedulerActor>>,
    /// How long running requests get to finish before they are aborted.
    pub grace: Duration,
}

/// Time given, after the grace period, for the aborted requests' error events to reach their
/// clients before the HTTP server closes what is left.
pub const ABORT_FLUSH: Duration = Duration::from_secs(3);

/// Waits for SIGTERM or SIGINT, then drains: readiness turns 503, the listener stops
/// accepting, running requests get `grace` to finish, and the rest end with an error. The
/// server's future then completes and the process exits 0. Never returns without a signal.
pub async fn drain_on_signal(drain: Drain) {
    let signal = shutdown_signal().await;
    tracing::info!(
        signal,
        grace_s = drain.grace.as_secs_f64(),
        "shutting down: no new connections; running requests get the grace period"
    );
    drain.health.draining();
    let schedulers = drain.schedulers.clone();
    let grace = drain.grace;
    actix_web::rt::spawn(async move {
        actix_web::rt::time::sleep(grace).await;
        for scheduler in schedulers {
            let _ = scheduler.send(AbortAll).await;
        }
    });
    drain.server.stop(true).await;
}

/// The name of the first termination signal received.
async fn shutdown_signal() -> &'static str {
    use actix_web::rt::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::warn!("cannot listen for SIGTERM/SIGINT; shutdown will not drain");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

/// Checks engine `engine`'s running step every so often; one past `timeout` marks that engine
/// dead (a hung step never returns, so no restart can help); the other engines of a
/// data-parallel server serve on. `timeout` zero: no watchdog.
pub fn spawn_step_watchdog(engine: usize, health: Arc<EngineHealth>, timeout: Duration) {
    if timeout.is_zero() {
        return;
    }
    let period = (timeout / 10).clamp(Duration::from_millis(50), Duration::from_secs(1));
    actix_web::rt::spawn(async move {
        let mut tick = actix_web::rt::time::interval(period);
        while health.is_alive() {
            tick.tick().await;
            if let Some(running) = health.step_running_for(Instant::now())
                && running > timeout
            {
                let reason = format!(
                    "an engine step has run for {:.1} s, past engine.step_timeout_s ({:.1} s)",
                    running.as_secs_f64(),
                    timeout.as_secs_f64()
                );
                tracing::error!(engine, %reason, "the engine is hung");
                health.dead(reason);
            }
        }
    });
}
