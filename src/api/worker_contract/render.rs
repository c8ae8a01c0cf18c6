//! vLLM's render endpoints, `POST /v1/completions/render` and `POST
//! /v1/chat/completions/render`: the generation request as the engine would get it, without
//! generating: the prompt's token ids exactly as the server computes them (chat template, BOS,
//! fill-in-the-middle), and the sampling parameters with `max_tokens` fitted to the context.
//! vllm-router's `cache_aware` and `kv_aware` and llm-d's endpoint picker call them to hash
//! the prompt as the engine will. A completions body renders to a list (one per prompt), a
//! chat body to one object, as vLLM answers.

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};

use super::dp_rank;
use crate::api::AppState;
use crate::api::chat::Chat;
use crate::api::completions::Completions;
use crate::api::errors::ApiError;
use crate::api::json_body::JsonBody;
use crate::api::openai_types::{ChatCompletionRequest, CompletionRequest};
use crate::api::pipeline::Endpoint;
use crate::api::validation::{Body, validate};

/// The body's prompts as token ids, each with its fitted `max_tokens`: the request goes
/// through the same validation step as a generation request, so what renders is what runs.
async fn render<E: Endpoint>(req: &HttpRequest, state: &AppState, request: E::Request) -> Result<Vec<Value>, ApiError> {
    dp_rank::check(req, request.common().data_parallel_rank, state.engine.size())?;
    let valid = validate(state, request).await?;
    let id = uuid::Uuid::new_v4().simple().to_string();
    let rendered = valid.prompts.into_iter().enumerate().map(|(i, prompt)| {
        json!({
            "request_id": format!("{}-{id}-{i}", E::ID_PREFIX),
            "model": valid.model,
            "token_ids": prompt.token_ids,
            "sampling_params": { "max_tokens": prompt.params.max_tokens, "n": prompt.params.n },
            "stream": false,
            "features": Value::Null,
            "cache_salt": Value::Null,
        })
    });
    Ok(rendered.collect())
}

pub async fn render_completion(
    req: HttpRequest,
    state: web::Data<AppState>,
    JsonBody(body): JsonBody<CompletionRequest>,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(render::<Completions>(&req, &state, body).await?))
}

pub async fn render_chat(
    req: HttpRequest,
    state: web::Data<AppState>,
    JsonBody(body): JsonBody<ChatCompletionRequest>,
) -> Result<HttpResponse, ApiError> {
    let mut rendered = render::<Chat>(&req, &state, body).await?;
    Ok(HttpResponse::Ok().json(rendered.pop().unwrap_or(Value::Null)))
}
