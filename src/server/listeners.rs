//! The sockets kiln listens on: the public one (bound before the model loads) and the
//! optional private `/metrics` one.

use std::net::{SocketAddr, TcpListener};

use actix_web::{App, HttpServer, web};
use anyhow::Context as _;

use crate::config::Config;
use crate::stats::exporter::{METRICS_CONTENT_TYPE, render_metrics};

/// Connections the kernel queues before kiln accepts them (actix's default).
const BACKLOG: i32 = 1024;

/// Binds `server.host:server.port` as actix would (address reuse, non-blocking, a deep
/// backlog), but before the model loads.
pub fn bind_public(config: &Config) -> anyhow::Result<TcpListener> {
    let (host, port) = (config.server.host.as_str(), config.server.port);
    bind(host, port).with_context(|| format!("binding {host}:{port}"))
}

fn bind(host: &str, port: u16) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let addr = std::net::ToSocketAddrs::to_socket_addrs(&(host, port))?
        .next()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::AddrNotAvailable, "no address"))?;
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// Sets each accepted connection's kernel send buffer, when configured.
pub fn send_buffer_setter(bytes: usize) -> impl Fn(&dyn std::any::Any, &mut actix_web::dev::Extensions) + Send + Clone {
    move |connection, _| {
        if bytes == 0 {
            return;
        }
        if let Some(stream) = connection.downcast_ref::<actix_web::rt::net::TcpStream>()
            && let Err(e) = socket2::SockRef::from(stream).set_send_buffer_size(bytes)
        {
            tracing::warn!(error = %e, "could not set a connection's send buffer");
        }
    }
}

/// A second listener that serves only `GET /metrics`, so scraping can stay off the public port.
pub fn start_metrics_listener(listen: &str, registry: prometheus::Registry) -> anyhow::Result<SocketAddr> {
    let server = HttpServer::new(move || {
        let registry = registry.clone();
        App::new()
            .route(
                "/metrics",
                web::get().to(move || {
                    let registry = registry.clone();
                    async move {
                        match render_metrics(&registry) {
                            Ok(text) => actix_web::HttpResponse::Ok()
                                .content_type(METRICS_CONTENT_TYPE)
                                .body(text),
                            Err(e) => actix_web::HttpResponse::InternalServerError().body(e.to_string()),
                        }
                    }
                }),
            )
            .wrap(actix_web::middleware::Compress::default())
    })
    .workers(1)
    .disable_signals()
    .bind(listen)
    .with_context(|| format!("binding telemetry.metrics_listen {listen}"))?;
    let addr = server.addrs().first().copied().context("no bound metrics address")?;
    actix_web::rt::spawn(server.run());
    tracing::info!("metrics on http://{addr}/metrics");
    Ok(addr)
}
