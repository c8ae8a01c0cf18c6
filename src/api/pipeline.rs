//! One request pipeline for every generation endpoint: check the model, validate, build the
//! prompts, fan out into choices, submit, then stream or collect. What differs between
//! endpoints (prompt building, chunk and response wording) is behind [`Endpoint`] and
//! [`ResponseFormat`], as in vLLM's serving layer and TGI's router.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use actix_web::http::header::ContentType;
use actix_web::{HttpResponse, web};

use super::errors::ApiError;
use super::fan_out::{FanOut, plan_choices, submit_choices};
use super::generation::ChoiceRequest;
use super::generation::{ChoiceDelta, cached_prompt_tokens, collect_all};
use super::limits::{PromptSize, check_limits, check_prompt_logprob_work};
use super::openai_types::{RequestMetrics, StreamOptions, Usage};
use super::prompt::{ParamNames, check_prompt};
use super::request_log::{RequestLog, RequestRecord};
use super::sse::{ChunkFormat, PromptUsage, UsageChunks, sse_response};
use super::structured_output::{ConstraintFields, apply_constraint_fields, compile_constraint};
use super::validation::check_logit_bias_ids;
use super::{AppState, ServedModel, unix_now};
use crate::engine::sampling_params::SamplingParams;
use crate::engine::types::Operation;
use crate::traces::span::{EngineRequestSpan, RequestSpans, SpanParams, SpanPlan};
use crate::traces::{Tracer, engine_trace};

/// How the response is delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// One JSON body once every choice has ended.
    Whole,
    /// Server-sent events as tokens arrive, with a closing usage chunk when asked.
    Stream(UsageChunks),
}

impl Delivery {
    /// `stream` and `stream_options` as both endpoints send them.
    pub fn from_request(stream: Option<bool>, options: Option<&StreamOptions>) -> Self {
        if stream.unwrap_or(false) {
            let closing = options.and_then(|o| o.include_usage).unwrap_or(false);
            let continuous = closing && options.and_then(|o| o.continuous_usage_stats).unwrap_or(false);
            Delivery::Stream(UsageChunks { closing, continuous })
        } else {
            Delivery::Whole
        }
    }
}

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
    /// The parsed body.
    type Request;
    type Format: ResponseFormat;
    /// Prefix of the response id.
    const ID_PREFIX: &'static str;
    /// The operation the engine's metrics and spans record.
    const OPERATION: Operation;
    /// The field that carries the prompt, named in errors about it.
    const PROMPT_PARAM: &'static str;

    /// The model the request names, if any.
    fn requested_model(request: &Self::Request) -> Option<&str>;
    /// Validates every parameter and resolves defaults.
    fn sampling_params(request: &Self::Request) -> Result<SamplingParams, ApiError>;
    /// The fields that constrain the output (`response_format`, `structured_outputs`, ...).
    fn constraint_fields(request: &Self::Request) -> ConstraintFields<'_>;
    /// The field that carries `max_tokens` as this request spelled it.
    fn max_tokens_param(request: &Self::Request) -> &'static str;
    /// How many prompts, how much text: measured before tokenisation, for the limits.
    fn prompt_size(request: &Self::Request) -> PromptSize;
    fn delivery(request: &Self::Request) -> Delivery;
    /// Refuses what the request asks of the server that the server was not started for
    /// (chat's `tool_choice: auto` without a tool-call parser).
    fn check_served(_request: &Self::Request, _model: &ServedModel) -> Result<(), ApiError> {
        Ok(())
    }
    fn format(request: &Self::Request, head: ResponseHead, model: &ServedModel) -> Self::Format;
    /// The prompts as token ids, one per prompt the body holds.
    fn prompts(request: Self::Request, model: &ServedModel) -> impl Future<Output = Result<Vec<Vec<u32>>, ApiError>>;
}

/// Serves one generation request from its parsed body to the response.
pub async fn serve<E: Endpoint>(
    state: &AppState,
    request: E::Request,
    log: Arc<RequestLog>,
) -> Result<HttpResponse, ApiError> {
    let arrival = Instant::now();
    let adapter = state.check_model(E::requested_model(&request))?;
    let mut params = E::sampling_params(&request)?;
    E::check_served(&request, &state.model)?;
    check_logit_bias_ids(&params, state.model.token_id_bound)?;
    let constraint_param = apply_constraint_fields(&mut params, E::constraint_fields(&request))?;
    check_limits(&state.limits, E::prompt_size(&request), &params, E::PROMPT_PARAM)?;
    let params = compile_constraint(params, constraint_param, state.model.grammars.as_ref(), &state.stats).await?;
    let names = ParamNames {
        prompt: E::PROMPT_PARAM,
        max_tokens: E::max_tokens_param(&request),
    };
    let delivery = E::delivery(&request);
    let model_name = adapter.map_or(&state.model.name, |a| &a.name);
    let head = ResponseHead::new(E::ID_PREFIX, model_name, state.per_request_metrics);
    let id = head.id.clone();
    let format = E::format(&request, head, &state.model);
    let prompts = E::prompts(request, &state.model).await?;
    for ids in &prompts {
        check_prompt(ids, state.model.token_id_bound, E::PROMPT_PARAM)?;
    }
    check_prompt_logprob_work(&state.limits, &prompts, &params)?;
    let prompt_tokens = prompts.iter().map(Vec::len).sum();
    let fan_out = FanOut {
        id: &id,
        operation: E::OPERATION,
        arrival,
        max_model_len: state.model.max_model_len,
        params: names,
        lora: adapter.map(|a| a.id),
    };
    let choices_per_prompt = params.n.max(1);
    let span_params = SpanParams {
        max_tokens: params.max_tokens,
        temperature: params.temperature,
        top_p: params.top_p,
        top_k: params.top_k,
        n: params.n,
    };
    let mut choices = plan_choices(&fan_out, prompts, params)?;
    let request_id = log.request_id_or(&id);
    let traced = state.tracer.as_ref().and_then(|tracer| {
        let plan = tracer.sample(&log.parent, arrival)?;
        let spans = trace_choices(tracer, &plan, &mut choices);
        let spans = RequestSpans {
            plan,
            request_id,
            model: model_name.clone(),
            operation: E::OPERATION.as_str(),
            params: span_params,
            prompt_tokens,
            engine_requests: spans,
            ended: arrival,
        };
        Some((Arc::clone(tracer), spans))
    });
    let record = RequestRecord::new(log, traced, model_name.clone(), prompt_tokens, choices.len());
    let choices = submit_choices(&state.engine, &state.model.tokenizer, choices, Some(Arc::new(record))).await?;
    match delivery {
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
