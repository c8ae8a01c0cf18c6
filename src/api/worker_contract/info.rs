//! What a router asks a worker about itself: `GET /get_server_info` (SGLang's; vllm-router
//! reads `dp_size` to address ranks and `block_size` for its KV index), `GET /server_info`
//! (vLLM's development endpoint; smg takes a worker that answers it but not `/version` for
//! SGLang, and kiln answers `/version`, so smg sees vLLM), and `GET /get_model_info`
//! (SGLang's: the model path and whether it generates).

use actix_web::{HttpResponse, web};
use serde_json::{Value, json};

use super::WorkerInfo;
use crate::api::AppState;
use crate::executor::placement::cpulist;

/// The server's settings as SGLang names them, with vLLM's where a router reads those.
fn settings(state: &AppState, info: &WorkerInfo) -> Value {
    let m = &state.model;
    json!({
        "model_path": m.name,
        "served_model_name": m.name,
        "tokenizer_path": m.name,
        "version": env!("CARGO_PKG_VERSION"),
        "engine": "kiln",
        "dp_size": state.engine.size(),
        "tp_size": 1,
        "pp_size": 1,
        "data_parallel_size": state.engine.size(),
        // Each rank's engine state now (`ready`, `restarting`, `dead`...), and the NUMA node
        // and CPUs its threads are pinned to (null when unpinned).
        "dp_ranks": (0..state.engine.size())
            .map(|i| {
                let share = info.engine_cpus.get(i).and_then(Option::as_ref);
                json!({
                    "dp_rank": i,
                    "status": state.engine.state(i).name(),
                    "numa_node": share.map(|s| s.node),
                    "cpus": share.map(|s| cpulist::format(&s.cpus)),
                })
            })
            .collect::<Vec<_>>(),
        "context_length": m.max_model_len,
        "max_model_len": m.max_model_len,
        "block_size": info.block_size,
        "page_size": info.block_size,
        "num_gpu_blocks": info.num_gpu_blocks,
        "max_total_num_tokens": info.num_gpu_blocks * info.block_size * state.engine.size(),
        "max_running_requests": info.max_num_seqs,
        "max_num_seqs": info.max_num_seqs,
        "max_num_batched_tokens": info.max_num_batched_tokens,
        "max_queued_requests": info.max_waiting,
        "enable_prefix_caching": info.enable_prefix_caching,
        "disable_radix_cache": !info.enable_prefix_caching,
        "prefix_caching_hash_algo": info.prefix_caching_hash_algo,
        "kv_cache_dtype": info.kv_cache_dtype,
        "kv_events_endpoint": info.kv_events_endpoint,
        "vocab_size": m.token_id_bound,
    })
}

pub async fn get_server_info(state: web::Data<AppState>, info: web::Data<WorkerInfo>) -> HttpResponse {
    HttpResponse::Ok().json(settings(&state, &info))
}

/// vLLM's `/server_info` wraps its configuration in `vllm_config`.
pub async fn server_info(state: web::Data<AppState>, info: web::Data<WorkerInfo>) -> HttpResponse {
    HttpResponse::Ok().json(json!({ "vllm_config": settings(&state, &info) }))
}

pub async fn get_model_info(state: web::Data<AppState>) -> HttpResponse {
    let m = &state.model;
    HttpResponse::Ok().json(json!({
        "model_path": m.name,
        "tokenizer_path": m.name,
        "is_generation": true,
        "preferred_sampling_params": Value::Null,
        "weight_version": "default",
        "has_image_understanding": false,
        "has_audio_understanding": false,
        "model_type": Value::Null,
        "architectures": Value::Null,
    }))
}
