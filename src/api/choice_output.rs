//! The output side of one generated choice, run on the output threads
//! ([`super::output_pool`]): token events become text (incremental detokenisation, stop
//! strings), per-token details and the prompt's echo, sent on as finished deltas for the
//! HTTP worker to write.

use std::sync::Arc;

use tokenizers::Tokenizer;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::choice_parts::{ChoiceEnd, TokenDetail};
use super::detokenizer::IncrementalDetokenizer;
use super::engine_handle::EngineHandle;
use super::errors::ApiError;
use super::prompt_echo::{Preamble, PromptEcho, PromptPositionDetail};
use super::request_log::RequestRecord;
use super::stop_strings::StopStringMatcher;
use crate::engine::events::{EngineError, TokenEvent, TokenLogprobs, TokenUsage};
use crate::engine::intervals::RequestIntervals;
use crate::engine::messages::AbortReason;
use crate::engine::sampling_params::SamplingParams;
use crate::engine::types::{FinishReason, RequestId};

/// New text of one choice, its tokens' details (when logprobs were asked), and the end.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChoiceDelta {
    pub text: String,
    pub tokens: Vec<TokenDetail>,
    pub end: Option<ChoiceEnd>,
    /// vLLM's `prompt_logprobs`, in the first delta of a choice that asked for them.
    pub prompt_logprobs: Option<Vec<Option<PromptPositionDetail>>>,
    /// The choice's prompt tokens and the tokens it has generated so far, this delta's
    /// included (for `continuous_usage_stats`).
    pub tokens_so_far: (usize, usize),
}

impl ChoiceDelta {
    /// `finish_reason` as the wire formats spell it; `None` until the choice ends.
    pub fn finish_reason(&self) -> Option<String> {
        self.end.map(|e| e.reason.as_str().to_string())
    }
}

/// One choice's output processing, from its engine events to its deltas.
pub struct ChoiceOutput {
    index: u32,
    id: RequestId,
    events: UnboundedReceiver<TokenEvent>,
    engine: EngineHandle,
    tokenizer: Arc<Tokenizer>,
    detokenizer: IncrementalDetokenizer,
    stops: StopStringMatcher,
    prompt_tokens: usize,
    /// Tokens received so far (up to the stop string, once one matched).
    completion_tokens: usize,
    /// Stop strings are not looked for within the first `min_tokens` tokens.
    min_tokens: usize,
    /// The prompt text and logprobs sent before the first token, when asked; taken then.
    echo: Option<PromptEcho>,
    /// `echo` with `max_tokens: 0`: only the prompt is sent.
    echo_only: bool,
    finished: bool,
    /// Where this choice reports its end (access log, spans); shared by the body's choices.
    record: Option<Arc<RequestRecord>>,
}

impl ChoiceOutput {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        index: u32,
        id: RequestId,
        prompt: &[u32],
        params: &SamplingParams,
        events: UnboundedReceiver<TokenEvent>,
        engine: EngineHandle,
        tokenizer: Arc<Tokenizer>,
        record: Option<Arc<RequestRecord>>,
    ) -> Self {
        Self {
            index,
            id,
            events,
            engine,
            tokenizer,
            detokenizer: IncrementalDetokenizer::new(prompt),
            stops: StopStringMatcher::new(params.stop.clone()),
            prompt_tokens: prompt.len(),
            completion_tokens: 0,
            min_tokens: params.min_tokens as usize,
            echo: (params.echo || params.return_prompt_logprobs).then(|| PromptEcho::new(prompt, params)),
            echo_only: params.echo_only,
            finished: false,
            record,
        }
    }

    /// Sends every delta to `out` until the choice ends or the client's side is gone.
    pub async fn run(mut self, out: UnboundedSender<Result<ChoiceDelta, ApiError>>) {
        while let Some(delta) = self.next().await {
            if out.send(delta).is_err() {
                return;
            }
        }
    }

    /// The prompt's echo and logprobs, once: decoding a long prompt and its alternatives
    /// runs on the blocking pool, so this thread's other choices keep flowing meanwhile.
    async fn preamble(&mut self) -> Option<Preamble> {
        let mut echo = self.echo.take()?;
        let tokenizer = Arc::clone(&self.tokenizer);
        match tokio::task::spawn_blocking(move || echo.take(&tokenizer)).await {
            Ok(preamble) => preamble,
            Err(error) => {
                tracing::error!(%error, "building a prompt echo failed");
                None
            }
        }
    }

    /// The next piece of output, or `None` after the end; the first carries the prompt's echo
    /// and logprobs when they were asked.
    async fn next(&mut self) -> Option<Result<ChoiceDelta, ApiError>> {
        let mut next = self.next_generated().await;
        if let Some(Ok(delta)) = next.as_mut()
            && let Some(preamble) = self.preamble().await
        {
            delta.text.insert_str(0, &preamble.text);
            delta.tokens = preamble
                .tokens
                .into_iter()
                .chain(std::mem::take(&mut delta.tokens))
                .collect();
            delta.prompt_logprobs = preamble.prompt_logprobs;
        }
        if let Some(Ok(delta)) = next.as_mut() {
            let generated = delta.end.map_or(self.completion_tokens, |e| e.usage.completion_tokens);
            delta.tokens_so_far = (self.prompt_tokens, generated);
        }
        next
    }

    async fn next_generated(&mut self) -> Option<Result<ChoiceDelta, ApiError>> {
        if self.finished {
            return None;
        }
        loop {
            let Some(event) = self.events.recv().await else {
                self.finished = true;
                return Some(Err(ApiError::EngineError("the engine dropped the request".into())));
            };
            match event {
                // `echo` with `max_tokens: 0`: the one step's token is not the client's.
                TokenEvent::Token { .. } if self.echo_only => {}
                TokenEvent::Token { id, logprobs } => {
                    self.completion_tokens += 1;
                    let tokens = logprobs.map(|lp| vec![self.detail(id, &lp)]).unwrap_or_default();
                    let text = self.detokenizer.push(&self.tokenizer, id);
                    // vLLM's `min_tokens`: stop strings count only once that many are out.
                    let outcome = if self.completion_tokens > self.min_tokens {
                        self.stops.push(&text)
                    } else {
                        self.stops.pass(&text)
                    };
                    if outcome.stopped {
                        // The engine's own usage and timings arrive with its `Finished`.
                        self.engine.abort(self.id.clone(), AbortReason::StopString);
                        return Some(Ok(self.await_stop_confirmation(outcome.emit, tokens).await));
                    }
                    if outcome.emit.is_empty() && tokens.is_empty() {
                        continue;
                    }
                    return Some(Ok(ChoiceDelta {
                        text: outcome.emit,
                        tokens,
                        end: None,
                        ..ChoiceDelta::default()
                    }));
                }
                TokenEvent::Finished {
                    reason,
                    usage,
                    timings,
                    timeline,
                } => {
                    self.finished = true;
                    let tail = self.detokenizer.finish(&self.tokenizer);
                    let outcome = self.stops.push(&tail);
                    let mut text = outcome.emit;
                    let reason = if outcome.stopped {
                        FinishReason::Stop
                    } else {
                        text.push_str(&self.stops.flush());
                        reason
                    };
                    let (reason, usage) = if self.echo_only {
                        let usage = TokenUsage {
                            completion_tokens: 0,
                            ..usage
                        };
                        (FinishReason::Length, usage)
                    } else {
                        (reason, usage)
                    };
                    let end = ChoiceEnd { reason, usage, timings };
                    self.report(end, timeline);
                    return Some(Ok(ChoiceDelta {
                        text,
                        tokens: Vec::new(),
                        end: Some(end),
                        ..ChoiceDelta::default()
                    }));
                }
                TokenEvent::PromptLogprobs(chunk) => {
                    if let Some(echo) = &mut self.echo {
                        echo.receive(chunk);
                    }
                }
                TokenEvent::Failed { error } => {
                    self.finished = true;
                    return Some(Err(engine_error(error)));
                }
            }
        }
    }

    /// After a stop string: skips tokens generated meanwhile and ends with the engine's
    /// usage and timings, so responses and metrics count the same tokens.
    async fn await_stop_confirmation(&mut self, text: String, tokens: Vec<TokenDetail>) -> ChoiceDelta {
        self.finished = true;
        let mut end = ChoiceEnd {
            reason: FinishReason::Stop,
            usage: TokenUsage {
                prompt_tokens: self.prompt_tokens,
                completion_tokens: self.completion_tokens,
                cached_prompt_tokens: 0,
            },
            timings: RequestIntervals::default(),
        };
        while let Some(event) = self.events.recv().await {
            if let TokenEvent::Finished {
                usage,
                timings,
                timeline,
                ..
            } = event
            {
                // The engine counts the tokens it computed, some after the stop string; the
                // client is billed only for the tokens up to it (as OpenAI and vLLM do).
                end.usage = TokenUsage {
                    completion_tokens: self.completion_tokens,
                    ..usage
                };
                end.timings = timings;
                self.report(end, timeline);
                return ChoiceDelta {
                    text,
                    tokens,
                    end: Some(end),
                    ..ChoiceDelta::default()
                };
            }
        }
        self.report(end, None);
        ChoiceDelta {
            text,
            tokens,
            end: Some(end),
            ..ChoiceDelta::default()
        }
    }

    fn report(&self, end: ChoiceEnd, timeline: Option<Box<crate::engine::timeline::RequestTimeline>>) {
        if let Some(record) = &self.record {
            record.choice_ended(self.index, end, timeline);
        }
    }

    fn detail(&self, id: u32, lp: &TokenLogprobs) -> TokenDetail {
        TokenDetail {
            text: self.token_text(id),
            logprob: lp.logprob,
            top: lp.top.iter().map(|&(t, l)| (self.token_text(t), l)).collect(),
        }
    }

    fn token_text(&self, id: u32) -> String {
        self.tokenizer.decode(&[id], false).unwrap_or_default()
    }
}

/// The one mapping of engine refusals and failures to API errors.
pub fn engine_error(error: EngineError) -> ApiError {
    match error {
        EngineError::Overloaded { .. } => ApiError::Overloaded { retry_after_secs: 1 },
        EngineError::TooLong { .. } => ApiError::InvalidParameter {
            param: "prompt".into(),
            message: format!("{error}; shorten the prompt"),
        },
        EngineError::Executor(_) => ApiError::EngineError(error.to_string()),
        EngineError::Grammar(_) => {
            ApiError::ConstraintFailed(format!("{error}; simplify the schema, regex or grammar"))
        }
        EngineError::Unavailable => ApiError::Unavailable(error.to_string()),
        EngineError::AdapterUnloaded => ApiError::AdapterNotFound(error.to_string()),
    }
}
