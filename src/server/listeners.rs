//! The sockets kiln listens on: the public one (bound before the model loads) and the
//! optional private `/metrics` one; both serve plain HTTP or HTTPS alike.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use actix_http::Request;
use actix_service::IntoServiceFactory;
use actix_web::body::MessageBody;
use actix_web::dev::{AppConfig, Response, Service, ServiceFactory};
use actix_web::{App, HttpServer, web};
use anyhow::Context as _;

use crate::api::auth::{ApiKeys, require_api_key};
use crate::config::Config;
use crate::stats::histogram_store::HistogramStore;
use crate::stats::metrics_endpoint::metrics_response;

/// Connections the kernel queues before kiln accepts them (actix's default).
const BACKLOG: i32 = 1024;

/// TLS settings shared by every listener; `None` serves plain HTTP.
pub type Tls = Option<Arc<rustls::ServerConfig>>;

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

/// Serves `server` on `listener`, over TLS when configured.
pub fn listen<F, I, S, B>(
    server: HttpServer<F, I, S, B>,
    listener: TcpListener,
    tls: &Tls,
) -> std::io::Result<HttpServer<F, I, S, B>>
where
    F: Fn() -> I + Send + Clone + 'static,
    I: IntoServiceFactory<S, Request>,
    S: ServiceFactory<Request, Config = AppConfig> + 'static,
    S::Error: Into<actix_web::Error> + 'static,
    S::InitError: std::fmt::Debug,
    S::Response: Into<Response<B>> + 'static,
    <S::Service as Service<Request>>::Future: 'static,
    S::Service: 'static,
    B: MessageBody + 'static,
{
    match tls {
        Some(config) => server.listen_rustls_0_23(listener, (**config).clone()),
        None => server.listen(listener),
    }
}

/// The URL scheme clients use.
pub fn scheme(tls: &Tls) -> &'static str {
    if tls.is_some() { "https" } else { "http" }
}

/// Sets each accepted connection's kernel send buffer, when configured.
pub fn send_buffer_setter(bytes: usize) -> impl Fn(&dyn std::any::Any, &mut actix_web::dev::Extensions) + Send + Clone {
    move |connection, _| {
        if bytes == 0 {
            return;
        }
        // Under TLS the connection is the TLS stream; its TCP socket is the first half.
        let stream = connection.downcast_ref::<actix_web::rt::net::TcpStream>().or_else(|| {
            connection
                .downcast_ref::<tokio_rustls::server::TlsStream<actix_web::rt::net::TcpStream>>()
                .map(|tls| tls.get_ref().0)
        });
        if let Some(stream) = stream
            && let Err(e) = socket2::SockRef::from(stream).set_send_buffer_size(bytes)
        {
            tracing::warn!(error = %e, "could not set a connection's send buffer");
        }
    }
}

/// A second listener that serves only `GET /metrics`, so scraping can stay off the public
/// port; the same TLS and key checks apply (`/metrics` itself needs no key).
pub fn start_metrics_listener(
    listen_on: &str,
    registry: prometheus::Registry,
    exemplars: Arc<HistogramStore>,
    keys: web::Data<ApiKeys>,
    tls: &Tls,
) -> anyhow::Result<SocketAddr> {
    let server = HttpServer::new(move || {
        let registry = registry.clone();
        let exemplars = exemplars.clone();
        App::new()
            .app_data(keys.clone())
            .service(
                web::resource(crate::api::routes::METRICS_PATHS)
                    .guard(actix_web::guard::Any(actix_web::guard::Get()).or(actix_web::guard::Head()))
                    .to(move |req: actix_web::HttpRequest| {
                        let response = metrics_response(&req, &registry, &exemplars);
                        async move { response }
                    }),
            )
            .wrap(actix_web::middleware::from_fn(require_api_key))
            .wrap(actix_web::middleware::Compress::default())
    })
    .workers(1)
    .disable_signals();
    let listener =
        TcpListener::bind(listen_on).with_context(|| format!("binding telemetry.metrics_listen {listen_on}"))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    actix_web::rt::spawn(listen(server, listener, tls)?.run());
    tracing::info!("metrics on {}://{addr}/metrics", scheme(tls));
    Ok(addr)
}
