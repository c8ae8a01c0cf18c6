//! The endpoints the routers in front of vLLM and SGLang replicas call on a worker, in the
//! shapes they parse: vllm-router and SGLang's model gateway (smg) read load, server info and
//! model info, fan cache flushes out, probe with a generation, and ask for the prompt's token
//! ids (`/v1/*/render`, which llm-d's endpoint picker calls too). Per-rank answers list each
//! engine of a data-parallel server (`dp_size` = `--data-parallel-size`); a request pinned to
//! a rank runs there, and one pinned to a rank the server lacks is refused ([`dp_rank`]).

pub mod cache;
pub mod dp_rank;
pub mod health_generate;
pub mod info;
pub mod load;
pub mod render;

use actix_web::http::Method;
use actix_web::{HttpRequest, HttpResponse, web};

use super::errors::ApiError;
use super::openapi::allowed_methods;
use crate::executor::placement::CpuShare;

/// What the worker endpoints say about the engine beyond the served model.
#[derive(Debug, Clone)]
pub struct WorkerInfo {
    pub block_size: usize,
    /// Each engine's.
    pub num_gpu_blocks: usize,
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
    pub max_waiting: usize,
    pub enable_prefix_caching: bool,
    /// `--prefix-caching-hash-algo` as resolved (vLLM's spelling).
    pub prefix_caching_hash_algo: &'static str,
    /// How the KV cache stores K and V, `auto` resolved (vLLM's spelling).
    pub kv_cache_dtype: &'static str,
    /// The KV-event publisher's endpoint, when events are on.
    pub kv_events_endpoint: Option<String>,
    /// Each engine's CPUs where its threads are pinned (`--cpu-affinity`).
    pub engine_cpus: Vec<Option<CpuShare>>,
}

/// Registers every worker endpoint (GET or POST, as the routers call them); another method
/// is a 405 naming the allowed ones, as on every route.
pub fn routes(cfg: &mut web::ServiceConfig) {
    macro_rules! resource {
        ($path:expr, $method:expr, $handler:expr) => {
            web::resource($path)
                .route(web::route().method($method).to($handler))
                .default_service(web::to(method_not_allowed))
        };
    }
    cfg.service(resource!("/get_load", Method::GET, load::get_load))
        .service(resource!("/v1/loads", Method::GET, load::loads))
        .service(resource!("/get_server_info", Method::GET, info::get_server_info))
        .service(resource!("/server_info", Method::GET, info::server_info))
        .service(resource!("/get_model_info", Method::GET, info::get_model_info))
        .service(resource!(
            "/health_generate",
            Method::GET,
            health_generate::health_generate
        ))
        .service(resource!("/flush_cache", Method::POST, cache::flush_cache))
        .service(resource!(
            "/reset_prefix_cache",
            Method::POST,
            cache::reset_prefix_cache
        ))
        .service(resource!(
            "/v1/completions/render",
            Method::POST,
            render::render_completion
        ))
        .service(resource!(
            "/v1/chat/completions/render",
            Method::POST,
            render::render_chat
        ));
}

async fn method_not_allowed(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::MethodNotAllowed {
        method: req.method().to_string(),
        path: req.path().to_string(),
        allowed: allowed_methods(req.path()),
    })
}
