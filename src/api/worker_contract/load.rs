//! Load for routers: `GET /get_load` (SGLang's and vllm-router's shape: an integer `load`,
//! which `power_of_two` compares) and `GET /v1/loads` (SGLang's per-rank load, which smg reads
//! for SGLang workers). Each rank's entry adds its engine's `status` (`ready`, `restarting`,
//! `dead`...), which the routers' parsers ignore and an operator reads.

use actix_web::{HttpResponse, web};
use serde_json::json;

use super::WorkerInfo;
use crate::api::AppState;
use crate::api::engine_handle::total_load;
use crate::api::errors::ApiError;
use crate::stats::data::SchedulerStats;

async fn engine_loads(state: &AppState) -> Result<Vec<SchedulerStats>, ApiError> {
    state
        .engine
        .loads()
        .await
        .ok_or_else(|| ApiError::Unavailable("an engine is not running".into()))
}

/// Requests in the engines (running, waiting and swapped): the number the routers'
/// load-based policies compare, over every engine. Each rank's figures in `dp_ranks`, and
/// rank 0's alongside the total as before (SGLang lists its ranks).
pub async fn get_load(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let loads = engine_loads(&state).await?;
    let rank = |i: usize, s: &SchedulerStats| {
        json!({
            "dp_rank": i,
            "status": state.engine.state(i).name(),
            "load": s.num_running + s.num_waiting + s.num_swapped,
            "num_reqs": s.num_running + s.num_swapped,
            "num_waiting_reqs": s.num_waiting,
            "num_tokens": s.tokens.running + s.tokens.waiting,
        })
    };
    let s = total_load(&loads);
    Ok(HttpResponse::Ok().json(json!({
        "load": s.num_running + s.num_waiting + s.num_swapped,
        "dp_rank": 0,
        "num_reqs": s.num_running + s.num_swapped,
        "num_waiting_reqs": s.num_waiting,
        "num_tokens": s.tokens.running + s.tokens.waiting,
        "dp_ranks": loads.iter().enumerate().map(|(i, s)| rank(i, s)).collect::<Vec<_>>(),
    })))
}

/// SGLang's `GET /v1/loads`: one entry per data-parallel rank and their total.
pub async fn loads(state: web::Data<AppState>, info: web::Data<WorkerInfo>) -> Result<HttpResponse, ApiError> {
    let loads = engine_loads(&state).await?;
    let utilization = |s: &SchedulerStats| {
        if info.max_num_seqs == 0 {
            0.0
        } else {
            s.num_running as f64 / info.max_num_seqs as f64
        }
    };
    let ranks: Vec<_> = loads
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let running = s.num_running + s.num_swapped;
            json!({
                "dp_rank": i,
                "status": state.engine.state(i).name(),
                "num_running_reqs": running,
                "num_waiting_reqs": s.num_waiting,
                "num_total_reqs": running + s.num_waiting,
                "num_used_tokens": s.tokens.running,
                "max_total_num_tokens": s.tokens.capacity,
                "max_running_requests": info.max_num_seqs,
                "token_usage": s.kv_cache_usage,
                "gen_throughput": 0.0,
                "cache_hit_rate": 0.0,
                "utilization": utilization(s),
            })
        })
        .collect();
    let s = total_load(&loads);
    let running = s.num_running + s.num_swapped;
    let n = loads.len().max(1) as f64;
    Ok(HttpResponse::Ok().json(json!({
        "timestamp": unix_seconds(),
        "version": env!("CARGO_PKG_VERSION"),
        "dp_rank_count": loads.len(),
        "loads": ranks,
        "aggregate": {
            "total_running_reqs": running,
            "total_waiting_reqs": s.num_waiting,
            "total_reqs": running + s.num_waiting,
            "avg_token_usage": s.kv_cache_usage,
            "avg_throughput": 0.0,
            "avg_utilization": loads.iter().map(utilization).sum::<f64>() / n,
        },
    })))
}

/// When the report was made: Unix seconds as text (SGLang writes a date; smg keeps it as text).
fn unix_seconds() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    format!("{:.3}", now.map_or(0.0, |d| d.as_secs_f64()))
}
