//! Emptying the prefix cache: vLLM's `POST /reset_prefix_cache` and SGLang's
//! `POST /flush_cache`, which both routers fan out to every worker. The scheduler refuses
//! while a request holds blocks, as vLLM's and SGLang's do; the answer then says so with 400
//! (SGLang's status for a flush it did not do), and the caller retries once the engine is idle.

use actix_web::{HttpResponse, web};

use crate::api::AppState;
use crate::api::errors::ApiError;

async fn reset(state: &AppState) -> Result<bool, ApiError> {
    state
        .engine
        .reset_prefix_cache()
        .await
        .ok_or_else(|| ApiError::Unavailable("the engine is not running".into()))
}

fn refused() -> ApiError {
    ApiError::invalid(
        "prefix_cache",
        "the prefix cache was not reset: requests are running; retry when the engine is idle",
    )
}

/// vLLM: 200 with an empty body once reset.
pub async fn reset_prefix_cache(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    if reset(&state).await? {
        Ok(HttpResponse::Ok().finish())
    } else {
        Err(refused())
    }
}

/// SGLang: 200 with a line of text once flushed.
pub async fn flush_cache(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    if reset(&state).await? {
        Ok(HttpResponse::Ok().content_type("text/plain").body("Cache flushed.\n"))
    } else {
        Err(refused())
    }
}
