//! One request pipeline for every generation endpoint: validate (one step, see
//! [`super::validation`]), fan the valid request out into engine requests, submit, then
//! stream or collect. What differs between endpoints is the body's rules (behind
//! [`Body`]) and the wording of chunks and responses (behind [`Endpoint`] and
//! [`ResponseFormat`]), as in vLLM's serving layer and TGI's router.

use std::sync::Arc;
use std::time::Instant;

use actix_web::http::header::ContentType;
use actix_web::{HttpRequest, HttpResponse, web};

use super::AppState;
use super::errors::ApiError;
use super::fan_out::{FanOut, plan_choices, submit_choices};
use super::generation::ChoiceRequest;
use super::generation::{ChoiceDelta, cached_prompt_tokens, collect_all};
use super::json_body::{JsonBody, RequestBody};
use super::openai_types::{RequestMetrics, Usage};
use super::request_log::{RequestLog, RequestRecord};
use super::sse::{ChunkFormat, PromptUsage, sse_response};
use super::unix_now;
use super::validation::{Body, Delivery, validate};
use super::worker_contract::dp_rank;
use crate::engine::types::Operation;
use crate::traces::span::{EngineRequestSpan, RequestSpans, SpanParams, SpanPlan};
use crate::traces::{Tracer, engine_trace};

/// The fields every response and chunk of one request repeats.
#[derive(Debug, Clone)]
pub struct ResponseHead {
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    pub model: String,
    /// Add each choice's `metrics` (`--enable-per-request-metrics`).
    pub per_request_metrics: bool,
}

impl ResponseHead {
    /// A fresh id with the endpoint's prefix (`cmpl`, `chatcmpl`).
    fn new(prefix: &str, model: &str, per_request_metrics: bool) -> Self {
        Self {
            id: format!("{prefix}-{}", uuid::Uuid::new_v4().simple()),
            created: unix_now(),
            model: model.to_owned(),
            per_request_metrics,
        }
    }

    /// A finished choice's `metrics`, when they were asked for.
    pub fn metrics(&self, delta: &ChoiceDelta) -> Option<RequestMetrics> {
        delta
            .end
            .filter(|_| self.per_request_metrics)
            .map(|e| e.request_metrics())
    }
}

/// How one endpoint words its output: stream chunks, and the whole body when not streaming.
pub trait ResponseFormat: ChunkFormat + Send {
    /// The JSON body of a request that did not stream; `choices` are in index order. Runs
    /// off the HTTP workers: a body with every prompt token's logprobs can be large.
    fn response(self, choices: Vec<(u32, ChoiceDelta)>, usage: Usage) -> serde_json::Result<Vec<u8>>;
}

/// The per-endpoint parts of serving a generation request.
pub trait Endpoint {
    /// The parsed body; its rules are validation's.
    type Request: Body + RequestBody + 'static;
    type Format: ResponseFormat;
    /// Prefix of the response id.
    const ID_PREFIX: &'static str;
    /// The operation the engine's metrics and spans record.
    const OPERATION: Operation;

    /// The wording of the answer, from what validation kept of the body.
    fn format(output: <Self::Request as Body>::Output, head: ResponseHead) -> Self::Format;
}

/// The handler of every generation endpoint: serves one request from its parsed body to the
/// response.
pub async fn serve<E: Endpoint>(
    req: HttpRequest,
    state: web::Data<AppState>,
    JsonBody(request): JsonBody<E::Request>,
) -> Result<HttpResponse, ApiError> {
    let arrival = Instant::now();
    let log = RequestLog::of(&req);
    let rank = dp_rank::pinned_rank(&req, request.common().data_parallel_rank, state.engine.size())?;
    if let Some(rank) = rank {
        dp_rank::check_serving(&state.engine, rank)?;
    }
    let valid = validate(&state, request).await?;
    let head = ResponseHead::new(E::ID_PREFIX, &valid.model, state.per_request_metrics);
    let id = head.id.clone();
    let format = E::format(valid.output, head);
    let params = &valid.params;
    let choices_per_prompt = params.n.max(1);
    let span_params = SpanParams {
        max_tokens: params.max_tokens,
        temperature: params.temperature,
        top_p: params.top_p,
        top_k: params.top_k,
        n: params.n,
    };
    let prompt_tokens = valid.prompts.iter().map(|p| p.token_ids.len()).sum();
    let fan_out = FanOut {
        id: &id,
        operation: E::OPERATION,
        arrival,
        lora: valid.lora,
    };
    let mut choices = plan_choices(&fan_out, valid.prompts);
    // A request through an adapter names it as its model.
    let lora_name = valid.lora.map(|_| valid.model.clone());
    let request_id = log.request_id_or(&id);
    let traced = state.tracer.as_ref().and_then(|tracer| {
        let plan = tracer.sample(&log.parent, arrival)?;
        let spans = trace_choices(tracer, &plan, &mut choices);
        let spans = RequestSpans {
            plan,
            request_id,
            model: valid.model.clone(),
            lora_name: lora_name.clone(),
            operation: E::OPERATION.as_str(),
            params: span_params,
            prompt_tokens,
            engine_requests: spans,
            ended: arrival,
        };
        Some((Arc::clone(tracer), spans))
    });
    let record =
        RequestRecord::new(log, traced, valid.model.clone(), prompt_tokens, choices.len()).with_lora(lora_name);
    let engine = state.engine.pinned(rank);
    let choices = submit_choices(&engine, &state.model.tokenizer, choices, Some(Arc::new(record))).await?;
    match valid.delivery {
        Delivery::Stream(usage) => Ok(sse_response(
            choices,
            PromptUsage {
                tokens: prompt_tokens,
                choices_per_prompt,
            },
            usage,
            state.stream_stall_timeout,
            format,
        )),
        Delivery::Whole => {
            let (results, completion_tokens) = collect_all(choices).await?;
            let ends = results
                .iter()
                .map(|(index, delta)| (*index, delta.end.map_or(0, |e| e.usage.cached_prompt_tokens)));
            let cached = cached_prompt_tokens(ends, choices_per_prompt);
            let usage = Usage::new(prompt_tokens as u32, completion_tokens as u32).with_cached(cached as u32);
            let body = web::block(move || format.response(results, usage))
                .await
                .map_err(|e| ApiError::EngineError(format!("writing the response failed: {e}")))?
                .map_err(|e| ApiError::EngineError(format!("writing the response failed: {e}")))?;
            Ok(HttpResponse::Ok().content_type(ContentType::json()).body(body))
        }
    }
}

/// Gives each engine request its span: the SERVER span itself when the body has one, a child
/// span each when it fans out.
fn trace_choices(tracer: &Tracer, plan: &SpanPlan, choices: &mut [ChoiceRequest]) -> Vec<EngineRequestSpan> {
    let fans_out = choices.len() > 1;
    choices
        .iter_mut()
        .map(|choice| {
            let context = fans_out.then(|| plan.child(tracer.new_span_id()));
            choice.request.trace = Some(engine_trace(context.as_ref().unwrap_or(&plan.context)));
            EngineRequestSpan {
                context,
                engine_request_id: choice.request.id.clone(),
                end: None,
            }
        })
        .collect()
}
