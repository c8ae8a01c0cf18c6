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
use crate::api::prompt::{ParamNames, check_prompt, fit_to_context};

/// The body's prompts as token ids, each with its fitted `max_tokens`.
async fn render<E: Endpoint>(state: &AppState, request: E::Request) -> Result<Vec<Value>, ApiError> {
    state.check_model(E::requested_model(&request))?;
    let params = E::sampling_params(&request)?;
    E::check_served(&request, &state.model)?;
    let names = ParamNames {
        prompt: E::PROMPT_PARAM,
        max_tokens: E::max_tokens_param(&request),
    };
    let prompts = E::prompts(request, &state.model).await?;
    let model = &state.model;
    let id = uuid::Uuid::new_v4().simple().to_string();
    prompts
        .into_iter()
        .enumerate()
        .map(|(i, ids)| {
            check_prompt(&ids, model.token_id_bound, E::PROMPT_PARAM)?;
            let mut fitted = params.clone();
            fit_to_context(ids.len(), &mut fitted, model.max_model_len, names)?;
            Ok(json!({
                "request_id": format!("{}-{id}-{i}", E::ID_PREFIX),
                "model": model.name,
                "token_ids": ids,
                "sampling_params": { "max_tokens": fitted.max_tokens, "n": fitted.n },
                "stream": false,
                "features": Value::Null,
                "cache_salt": Value::Null,
            }))
        })
        .collect()
}

pub async fn render_completion(
    req: HttpRequest,
    state: web::Data<AppState>,
    JsonBody(body): JsonBody<CompletionRequest>,
) -> Result<HttpResponse, ApiError> {
    dp_rank::check(&req, body.data_parallel_rank)?;
    Ok(HttpResponse::Ok().json(render::<Completions>(&state, body).await?))
}

pub async fn render_chat(
    req: HttpRequest,
    state: web::Data<AppState>,
    JsonBody(body): JsonBody<ChatCompletionRequest>,
) -> Result<HttpResponse, ApiError> {
    dp_rank::check(&req, body.data_parallel_rank)?;
    let mut rendered = render::<Chat>(&state, body).await?;
    Ok(HttpResponse::Ok().json(rendered.pop().unwrap_or(Value::Null)))
}
