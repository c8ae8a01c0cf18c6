//! The route table and the small endpoints: models, health, readiness, version, load, metrics,
//! the OpenAPI document.

use actix_web::http::Method;
use actix_web::{HttpRequest, HttpResponse, web};

use super::AppState;
use super::auth::ApiKeys;
use super::chat::Chat;
use super::completions::Completions;
use super::engine_handle::total_load;
use super::errors::ApiError;
use super::openai_types::{ModelCard, ModelList};
use super::openapi::{Serving, allowed_methods, served_document};
use super::pipeline::serve;
use super::responses::Responses;
use super::service_types::{EngineLoad, Load, Readiness, VersionInfo};
use super::tokenize::{detokenize, tokenize};
use super::tokenizer_info::tokenizer_info as tokenizer_info_handler;
use crate::engine::server_health::ServerHealth;

/// Where `/metrics` answers, on the API port or a listener of its own.
pub const METRICS_PATHS: [&str; 2] = ["/metrics", "/metrics/"];

/// Every route (`/metrics` only when it is not on a listener of its own, `/tokenizer_info`
/// only when enabled); unknown paths get an OpenAI-style 404, known paths with the wrong
/// method a 405.
pub fn routes(metrics_on_this_port: bool, tokenizer_info: bool) -> impl Fn(&mut web::ServiceConfig) {
    move |cfg| all_routes(cfg, metrics_on_this_port, tokenizer_info)
}

fn all_routes(cfg: &mut web::ServiceConfig, metrics_on_this_port: bool, tokenizer_info: bool) {
    macro_rules! resource {
        ($path:expr, $method:expr, $handler:expr) => {
            web::resource($path)
                .route(web::route().method($method).to($handler))
                .default_service(web::to(method_not_allowed))
        };
    }
    cfg.service(resource!("/v1/models", Method::GET, list_models))
        .service(resource!("/v1/completions", Method::POST, serve::<Completions>))
        .service(resource!("/v1/chat/completions", Method::POST, serve::<Chat>))
        .service(resource!("/v1/responses", Method::POST, serve::<Responses>))
        .service(resource!("/tokenize", Method::POST, tokenize))
        .service(resource!("/detokenize", Method::POST, detokenize))
        .service(resource!("/health", Method::GET, health))
        .service(resource!("/ready", Method::GET, ready))
        .service(resource!("/live", Method::GET, live))
        .service(resource!("/version", Method::GET, version))
        .service(resource!("/load", Method::GET, load))
        .service(resource!("/openapi.json", Method::GET, openapi_json))
        .configure(super::worker_contract::routes);
    if metrics_on_this_port {
        // As vLLM's mounted app answers: HEAD too (the headers, no body), and `/metrics/`.
        let head = || web::route().method(Method::HEAD).to(metrics);
        cfg.service(resource!("/metrics", Method::GET, metrics).route(head()));
        cfg.service(
            web::resource(METRICS_PATHS[1])
                .route(web::route().method(Method::GET).to(metrics))
                .route(head())
                .default_service(web::to(method_not_allowed)),
        );
    }
    if tokenizer_info {
        cfg.service(resource!("/tokenizer_info", Method::GET, tokenizer_info_handler));
    }
    cfg.default_service(web::to(not_found));
}

async fn not_found(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::route_not_found(&req))
}

pub(super) async fn method_not_allowed(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::MethodNotAllowed {
        method: req.method().to_string(),
        path: req.path().to_string(),
        allowed: allowed_methods(req.path()),
    })
}

async fn list_models(state: web::Data<AppState>) -> HttpResponse {
    let m = &state.model;
    let base = ModelCard::new(m.name.clone(), m.created, m.max_model_len as u32);
    let adapters = m.adapters.list().into_iter().map(|a| ModelCard {
        root: a.path,
        parent: Some(m.name.clone()),
        ..ModelCard::new(a.name, m.created, m.max_model_len as u32)
    });
    HttpResponse::Ok().json(ModelList::new(std::iter::once(base).chain(adapters).collect()))
}

/// Health, as vLLM's: 200 once the model is loaded while an engine can serve now or after a
/// restart (the body names each engine's state); 503 while it loads (see `server::loading`),
/// once every engine is dead for good (restarts exhausted, a step hung), or when an engine's
/// actor does not answer.
async fn health(state: web::Data<AppState>, engines: web::Data<ServerHealth>) -> Result<HttpResponse, ApiError> {
    if !engines.is_alive() {
        return Err(ApiError::Unavailable("every engine has stopped for good".into()));
    }
    state
        .engine
        .load()
        .await
        .ok_or_else(|| ApiError::Unavailable("the engine is not running".into()))?;
    Ok(HttpResponse::Ok().json(Readiness::of(&engines)))
}

/// Liveness for orchestrators: 200 while the process runs, loading included (`/health` is
/// 503 until the model is loaded, so routers never send traffic to a loading replica).
async fn live() -> HttpResponse {
    HttpResponse::Ok().finish()
}

/// Readiness: 200 when new requests are served now by at least one engine; 503 while loading,
/// restarting every executor, draining for shutdown, or dead. The body names the server's
/// state and each engine's.
async fn ready(engines: web::Data<ServerHealth>) -> HttpResponse {
    let body = Readiness::of(&engines);
    if engines.is_ready() {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

async fn version() -> HttpResponse {
    HttpResponse::Ok().json(VersionInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
    })
}

/// The engines' load for routers and load balancers: the total, and each engine's with its
/// state.
async fn load(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let loads = state
        .engine
        .loads()
        .await
        .ok_or_else(|| ApiError::Unavailable("the engine is not running".into()))?;
    let engines = loads
        .iter()
        .enumerate()
        .map(|(engine, s)| EngineLoad {
            engine,
            status: state.engine.state(engine).name().to_owned(),
            load: s.into(),
        })
        .collect();
    Ok(HttpResponse::Ok().json(Load {
        total: (&total_load(&loads)).into(),
        engines,
    }))
}

/// Prometheus text, or OpenMetrics with exemplars when asked (gzip through the Compress
/// middleware when asked).
async fn metrics(req: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    crate::stats::metrics_endpoint::metrics_response(&req, &state.registry, &state.exemplars)
}

/// This listener's OpenAPI document: its routes, its model's bounds, its limits, its keys.
async fn openapi_json(req: HttpRequest, state: web::Data<AppState>, keys: Option<web::Data<ApiKeys>>) -> HttpResponse {
    let routes = |path: &str| req.resource_map().has_resource(path);
    HttpResponse::Ok().json(served_document(&Serving {
        model: &state.model,
        limits: &state.limits,
        api_keys: keys.is_some_and(|k| k.is_enabled()),
        routes: &routes,
    }))
}
