//! The HTTP worker's side of one generated choice: submit to the engine, start its output
//! processing on the output threads ([`super::choice_output`]), and take the finished
//! deltas. Dropping an unfinished choice aborts it in the engine, which frees its KV blocks
//! at once.

use std::sync::Arc;

use tokenizers::Tokenizer;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::choice_output::ChoiceOutput;
pub use super::choice_output::{ChoiceDelta, engine_error};
pub use super::choice_parts::{ChoiceEnd, TokenDetail};
use super::engine_handle::EngineHandle;
use super::errors::ApiError;
use super::openai_types::RequestMetrics;
use super::output_pool::OutputPool;
use super::request_log::RequestRecord;
use crate::engine::messages::{AbortReason, Generate};
use crate::engine::request::NewRequest;
use crate::engine::types::RequestId;

/// A choice in flight, as its HTTP handler sees it.
pub struct ChoiceStream {
    pub index: u32,
    id: RequestId,
    engine: EngineHandle,
    /// Finished pieces from the choice's output processing.
    deltas: UnboundedReceiver<Result<ChoiceDelta, ApiError>>,
    finished: bool,
}

/// What to submit for one choice: its number in the response and the engine request itself,
/// built once by the fan-out plan and handed to the engine as it is.
#[derive(Debug)]
pub struct ChoiceRequest {
    pub index: u32,
    pub request: NewRequest,
}

impl ChoiceStream {
    /// Hands the request to the engine; refusals become 429/400 errors.
    pub async fn submit(
        engine: &EngineHandle,
        tokenizer: &Arc<Tokenizer>,
        request: ChoiceRequest,
        record: Option<Arc<RequestRecord>>,
    ) -> Result<Self, ApiError> {
        let ChoiceRequest { index, request } = request;
        // Bound to one engine, so that aborts and stop strings reach the one running it.
        let engine = &engine.choose_for(&request.prompt_token_ids, request.lora).await;
        let id = request.id.clone();
        let (tx, rx) = unbounded_channel();
        let output = ChoiceOutput::new(
            index,
            id.clone(),
            &request.prompt_token_ids,
            &request.params,
            rx,
            engine.clone(),
            Arc::clone(tokenizer),
            record,
        );
        engine
            .submit(Generate { request, events: tx })
            .await
            .map_err(engine_error)?;
        let (out, deltas) = unbounded_channel();
        OutputPool::shared().spawn(output.run(out));
        Ok(Self {
            index,
            id,
            engine: engine.clone(),
            deltas,
            finished: false,
        })
    }

    /// The next piece of output, or `None` after the end; the first carries the prompt's echo
    /// and logprobs when they were asked.
    pub async fn next(&mut self) -> Option<Result<ChoiceDelta, ApiError>> {
        if self.finished {
            return None;
        }
        let next = match self.deltas.recv().await {
            Some(next) => next,
            None => Err(ApiError::EngineError(
                "the choice's output processing ended early".into(),
            )),
        };
        self.finished = next.as_ref().map_or(true, |delta| delta.end.is_some());
        Some(next)
    }
}

/// Aborts one choice from outside its stream (the stall watchdog).
#[derive(Clone)]
pub struct AbortHandle {
    id: RequestId,
    engine: EngineHandle,
}

impl AbortHandle {
    /// Ends the choice in the engine as `abort`; its stream then ends on its own.
    pub fn abort(&self) {
        self.engine.abort(self.id.clone(), AbortReason::ClientGone);
    }
}

impl ChoiceStream {
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle {
            id: self.id.clone(),
            engine: self.engine.clone(),
        }
    }
}

impl Drop for ChoiceStream {
    fn drop(&mut self) {
        if !self.finished {
            self.engine.abort(self.id.clone(), AbortReason::ClientGone);
        }
    }
}

impl ChoiceEnd {
    /// The per-request figures of `--enable-per-request-metrics`.
    pub fn request_metrics(&self) -> RequestMetrics {
        let t = &self.timings;
        let generated = self.usage.completion_tokens as f64;
        RequestMetrics {
            queue_s: t.queue_s,
            time_to_first_token_s: t.time_to_first_token_s,
            decode_s: t.decode_s,
            mean_inter_token_latency_s: t.time_per_output_token_s,
            e2e_s: t.e2e_s,
            output_tokens_per_s: if t.e2e_s > 0.0 { generated / t.e2e_s } else { 0.0 },
        }
    }
}

/// Runs a choice to its end, collecting text and token details.
pub async fn collect(mut choice: ChoiceStream) -> Result<(u32, ChoiceDelta), ApiError> {
    let mut all = ChoiceDelta::default();
    while let Some(delta) = choice.next().await {
        let delta = delta?;
        all.text.push_str(&delta.text);
        all.tokens.extend(delta.tokens);
        if delta.prompt_logprobs.is_some() {
            all.prompt_logprobs = delta.prompt_logprobs;
        }
        if delta.end.is_some() {
            all.end = delta.end;
        }
    }
    Ok((choice.index, all))
}

/// Runs every choice to its end; the choices in index order and their generated tokens.
/// Cached prompt tokens of a body, each prompt counted once (by its first choice; choice
/// `index` belongs to prompt `index / choices_per_prompt`), as `prompt_tokens` is.
pub fn cached_prompt_tokens(ends: impl Iterator<Item = (u32, usize)>, choices_per_prompt: u32) -> usize {
    ends.filter(|(index, _)| index % choices_per_prompt.max(1) == 0)
        .map(|(_, cached)| cached)
        .sum()
}

pub async fn collect_all(choices: Vec<ChoiceStream>) -> Result<(Vec<(u32, ChoiceDelta)>, usize), ApiError> {
    let results = futures_util::future::try_join_all(choices.into_iter().map(collect)).await?;
    let completion_tokens = results
        .iter()
        .map(|(_, delta)| delta.end.map_or(0, |e| e.usage.completion_tokens))
        .sum();
    Ok((results, completion_tokens))
}
