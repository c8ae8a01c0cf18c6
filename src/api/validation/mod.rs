//! The validation step: [`validate`] turns a parsed body of any generation endpoint
//! (completions, chat, Responses) into one [`ValidRequest`], or the first
//! [`ApiError`] that names the field at fault (TGI's `Validation` and its
//! `ValidGenerateRequest`). Every check of a generation request lives behind it; once a
//! request is valid nothing checks it again, and nothing changes its sampling parameters: the
//! pipeline builds the engine requests from the [`ValidRequest`] alone.
//!
//! In order:
//! 1. `model` names the served model (404 otherwise).
//! 2. The endpoint's own fields, and the sampling group resolved the endpoint's way
//!    ([`Body::check`]: `completions.rs`, `chat.rs`, `responses.rs`; the shared rules in
//!    `sampling.rs`, the tool fields in `tools/`).
//! 3. `logit_bias` ids inside the vocabulary (`sampling.rs`).
//! 4. One output constraint, from the constraint fields or a tool choice (`constraints.rs`).
//! 5. The request limits that need no tokens: prompt bytes, sequences, stop strings and ids
//!    (`limits.rs`).
//! 6. The constraint compiled into a grammar (`constraints.rs`).
//! 7. The prompts built and tokenised (`api::prompt`), each non-empty and inside the
//!    vocabulary (`prompt.rs`); the prompt logprobs they would cost (`limits.rs`).
//! 8. Each prompt fitted to the context (`prompt.rs`).

mod chat;
mod completions;
mod constraints;
mod limits;
mod prompt;
mod responses;
mod sampling;
mod tools;

pub use chat::ChatOutput;
pub use prompt::check_prompt_ids;
pub use responses::ResponsesOutput;

use std::sync::Arc;

use super::errors::ApiError;
use super::openai_types::{CommonFields, ConstraintFields, StreamOptions};
use super::prompt::PromptSource;
use super::sse::UsageChunks;
use super::tool_calls::ToolCallParser;
use super::{AppState, ServedAdapter, ServedModel};
use crate::engine::sampling_params::SamplingParams;
use crate::engine::structured_output::StructuredOutput;
use limits::PromptSize;
use prompt::ParamNames;

/// A generation request that passed every check.
#[derive(Debug)]
pub struct ValidRequest<O> {
    /// The body's parameters: every knob resolved, the output constraint compiled; an open
    /// `max_tokens` is still open here (spans record it so).
    pub params: Arc<SamplingParams>,
    /// Each prompt with its parameters, `max_tokens` fitted to the context.
    pub prompts: Vec<ValidPrompt>,
    pub delivery: Delivery,
    /// What the endpoint's wording of the answer needs of the body.
    pub output: O,
    /// The name the answer reports: the served model's, or the LoRA adapter's it names.
    pub model: String,
    /// The LoRA adapter every engine request runs under (`None`: the base model).
    pub lora: Option<u32>,
}

/// One prompt of a valid request: `n` engine requests run it.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidPrompt {
    pub token_ids: Vec<u32>,
    /// The body's parameters with `max_tokens` fitted to this prompt; prompts that fit alike
    /// share one copy.
    pub params: Arc<SamplingParams>,
}

/// How the response is delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// One JSON body once every choice has ended.
    Whole,
    /// Server-sent events as tokens arrive, with a closing usage chunk when asked.
    Stream(UsageChunks),
}

impl Delivery {
    /// `stream` and `stream_options` as completions and chat send them; `stream_options` is
    /// meaningless without streaming, and OpenAI refuses it.
    pub fn of(stream: Option<bool>, options: Option<&StreamOptions>) -> Result<Self, ApiError> {
        if options.is_some() && stream != Some(true) {
            return Err(ApiError::invalid(
                "stream_options",
                "`stream_options` is only allowed when `stream` is true",
            ));
        }
        if !stream.unwrap_or(false) {
            return Ok(Delivery::Whole);
        }
        let closing = options.and_then(|o| o.include_usage).unwrap_or(false);
        let continuous = closing && options.and_then(|o| o.continuous_usage_stats).unwrap_or(false);
        Ok(Delivery::Stream(UsageChunks { closing, continuous }))
    }
}

/// The endpoint's part of validation: the rules of one body type.
pub trait Body {
    /// What the endpoint's wording of the answer needs of the body.
    type Output;

    /// The fields every generation body has (the model it names, the rank it is pinned to).
    fn common(&self) -> &CommonFields;

    /// Checks what needs no model but the tool-call parser the server runs, and hands the
    /// body over in the shape every endpoint shares.
    fn check(self, tool_parser: Option<ToolCallParser>) -> Result<Checked<Self::Output>, ApiError>;
}

/// A body whose own checks passed, in the shape every endpoint shares.
#[derive(Debug)]
pub struct Checked<O> {
    /// Every knob resolved; no output constraint yet.
    pub params: SamplingParams,
    /// The constraint of a `required` or named tool choice.
    pub tool_constraint: Option<StructuredOutput>,
    pub constraints: ConstraintFields,
    pub prompt: PromptSource,
    pub size: PromptSize,
    pub names: ParamNames,
    pub delivery: Delivery,
    pub output: O,
}

/// A request may name the served model, one of its LoRA adapters (returned) or none;
/// anything else is 404.
pub fn check_model(model: &ServedModel, requested: Option<&str>) -> Result<Option<ServedAdapter>, ApiError> {
    match requested {
        None => Ok(None),
        Some(name) if name == model.name => Ok(None),
        Some(name) if let Some(adapter) = model.adapters.find(name) => Ok(Some(adapter)),
        Some(name) => {
            // The client's text, escaped (`?`) so that a CR/LF in it cannot forge a log line.
            tracing::debug!(requested_model = ?name, "a request named a model this server does not serve");
            Err(ApiError::ModelNotFound(name.to_string()))
        }
    }
}

/// The validation step (see the module docs).
pub async fn validate<B: Body>(state: &AppState, body: B) -> Result<ValidRequest<B::Output>, ApiError> {
    let model = &state.model;
    let adapter = check_model(model, body.common().model.as_deref())?;
    let (answer_model, lora) = adapter.map_or_else(|| (model.name.clone(), None), |a| (a.name, Some(a.id)));
    let checked = body.check(model.tool_parser)?;
    sampling::check_logit_bias_ids(&checked.params, model.token_id_bound)?;
    let constraint = constraints::output_constraint(checked.tool_constraint, &checked.constraints)?;
    limits::check_limits(&state.limits, checked.size, &checked.params, checked.names.prompt)?;
    let grammar = constraints::compile(constraint.as_ref(), model.grammars.as_ref(), &state.stats).await?;
    let params = Arc::new(SamplingParams {
        structured: constraint.map(|c| c.output),
        grammar,
        ..checked.params
    });
    let prompts = checked.prompt.token_ids(model).await?;
    for ids in &prompts {
        prompt::check_prompt(ids, model.token_id_bound, checked.names.prompt)?;
    }
    limits::check_prompt_logprob_work(&state.limits, &prompts, &params)?;
    let prompts = prompt::fit_to_context(prompts, &params, model.max_model_len, checked.names)?;
    Ok(ValidRequest {
        params,
        prompts,
        delivery: checked.delivery,
        output: checked.output,
        model: answer_model,
        lora,
    })
}

#[cfg(test)]
mod tests;
