//! Load for routers: `GET /get_load` (SGLang's and vllm-router's shape: an integer `load`,
//! which `power_of_two` compares) and `GET /v1/loads` (SGLang's per-rank load, which smg reads
//! for SGLang workers).

use actix_web::{HttpResponse, web};
use serde_json::json;

use super::WorkerInfo;
use crate::api::AppState;
use crate::api::errors::ApiError;
use crate::stats::data::SchedulerStats;

async fn engine_load(state: &AppState) -> Result<SchedulerStats, ApiError> {
    state
        .engine
        .load()
        .await
        .ok_or_else(|| ApiError::Unavailable("the engine is not running".into()))
}

/// Requests in the engine (running, waiting and swapped): the number the routers' load-based
/// policies compare. Rank 0's figures alongside, as SGLang lists its ranks.
pub async fn get_load(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let s = engine_load(&state).await?;
    let load = s.num_running + s.num_waiting + s.num_swapped;
    Ok(HttpResponse::Ok().json(json!({
        "load": load,
        "dp_rank": 0,
        "num_reqs": s.num_running + s.num_swapped,
        "num_waiting_reqs": s.num_waiting,
        "num_tokens": s.tokens.running + s.tokens.waiting,
    })))
}

/// SGLang's `GET /v1/loads`: one entry per data-parallel rank (one here) and their total.
pub async fn loads(state: web::Data<AppState>, info: web::Data<WorkerInfo>) -> Result<HttpResponse, ApiError> {
    let s = engine_load(&state).await?;
    let running = s.num_running + s.num_swapped;
    let total = running + s.num_waiting;
    let used_tokens = s.tokens.running;
    let capacity = s.tokens.capacity;
    let usage = s.kv_cache_usage;
    let utilization = if info.max_num_seqs == 0 {
        0.0
    } else {
        s.num_running as f64 / info.max_num_seqs as f64
    };
    let rank = json!({
        "dp_rank": 0,
        "num_running_reqs": running,
        "num_waiting_reqs": s.num_waiting,
        "num_total_reqs": total,
        "num_used_tokens": used_tokens,
        "max_total_num_tokens": capacity,
        "max_running_requests": info.max_num_seqs,
        "token_usage": usage,
        "gen_throughput": 0.0,
        "cache_hit_rate": 0.0,
        "utilization": utilization,
    });
    Ok(HttpResponse::Ok().json(json!({
        "timestamp": unix_seconds(),
        "version": env!("CARGO_PKG_VERSION"),
        "dp_rank_count": 1,
        "loads": [rank],
        "aggregate": {
            "total_running_reqs": running,
            "total_waiting_reqs": s.num_waiting,
            "total_reqs": total,
            "avg_token_usage": usage,
            "avg_throughput": 0.0,
            "avg_utilization": utilization,
        },
    })))
}

/// When the report was made: Unix seconds as text (SGLang writes a date; smg keeps it as text).
fn unix_seconds() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    format!("{:.3}", now.map_or(0.0, |d| d.as_secs_f64()))
}
