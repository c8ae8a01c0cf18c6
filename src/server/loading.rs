//! What the public port answers while the model loads: liveness (`/live`) 200, health and
//! readiness 503 "loading" (a router checking `/health`, as vllm-router and smg do, sends no
//! traffic here yet: vLLM's `/health` is not up until it can serve either), and an
//! OpenAI-style 503 for everything else, so a load balancer or an orchestrator sees a live
//! process that is not ready yet instead of a refused connection.

use std::net::TcpListener;
use std::sync::Arc;

use actix_web::dev::ServerHandle;
use actix_web::http::header::RETRY_AFTER;
use actix_web::{App, HttpResponse, HttpServer, ResponseError, web};

use super::access::Access;
use super::listeners::listen;
use crate::api::auth::require_api_key;
use crate::api::errors::ApiError;
use crate::engine::server_health::ServerHealth;

/// Serves probes on a clone of the public listener until the returned handle stops it;
/// the listener itself stays open for the engine's server.
pub fn serve_while_loading(
    listener: TcpListener,
    health: Arc<ServerHealth>,
    access: &Access,
) -> anyhow::Result<ServerHandle> {
    let health = web::Data::from(health);
    let keys = access.keys.clone();
    let server = HttpServer::new(move || {
        App::new()
            .app_data(health.clone())
            .app_data(keys.clone())
            .wrap(actix_web::middleware::from_fn(require_api_key))
            .route("/health", web::get().to(readiness))
            .route("/live", web::get().to(HttpResponse::Ok))
            .route("/ready", web::get().to(readiness))
            .default_service(web::to(not_yet))
    })
    .workers(1)
    .disable_signals()
    // Each answer closes its connection, so stopping this server waits for nobody.
    .keep_alive(actix_web::http::KeepAlive::Disabled)
    .shutdown_timeout(1);
    let server = listen(server, listener, &access.tls)?.run();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    Ok(handle)
}

async fn readiness(health: web::Data<ServerHealth>) -> HttpResponse {
    HttpResponse::ServiceUnavailable().json(crate::api::service_types::Readiness::of(&health))
}

async fn not_yet() -> HttpResponse {
    let mut response = ApiError::Unavailable("The model is loading; retry shortly.".into()).error_response();
    response
        .headers_mut()
        .insert(RETRY_AFTER, actix_web::http::header::HeaderValue::from_static("1"));
    response
}
