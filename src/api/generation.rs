//! The api's side of one generated choice: submit to the engine, then turn token events into
//! text (incremental detokenisation, stop strings) and per-token details. Dropping an
//! unfinished choice aborts it in the engine, which frees its KV blocks at once.

use std::sync::Arc;
use std::time::Instant;

use actix::Addr;
use tokenizers::Tokenizer;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

pub use super::choice_parts::{ChoiceEnd, TokenDetail};
use super::detokenizer::IncrementalDetokenizer;
use super::errors::ApiError;
use super::openai_types::RequestMetrics;
use super::prompt_echo::{PromptEcho, PromptPositionDetail};
use super::request_log::RequestRecord;
use super::stop_strings::StopStringMatcher;
use crate::engine::events::{EngineError, TokenEvent, TokenLogprobs, TokenUsage};
use crate::engine::intervals::RequestIntervals;
use crate::engine::messages::{Abort, AbortReason, Generate};
use crate::engine::sampling_params::SamplingParams;
use crate::engine::trace_context::TraceContext;
use crate::engine::types::{FinishReason, Operation, RequestId};
use crate::scheduler::actor::SchedulerActor;

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

/// A choice in flight.
pub struct ChoiceStream {
    pub index: u32,
    id: RequestId,
    events: UnboundedReceiver<TokenEvent>,
    scheduler: Addr<SchedulerActor>,
    tokenizer: Arc<Tokenizer>,
    detokenizer: IncrementalDetokenizer,
    stops: StopStringMatcher,
    prompt_tokens: usize,
    /// Tokens received so far (up to the stop string, once one matched).
    completion_tokens: usize,
    /// Stop strings are not looked for within the first `min_tokens` tokens.
    min_tokens: usize,
    /// The prompt text and logprobs sent before the first token, when asked.
    echo: PromptEcho,
    /// `echo` with `max_tokens: 0`: only the prompt is sent.
    echo_only: bool,
    finished: bool,
    /// Where this choice reports its end (access log, spans); shared by the body's choices.
    record: Option<Arc<RequestRecord>>,
}

/// What to submit for one choice.
#[derive(Debug)]
pub struct ChoiceRequest {
    pub id: RequestId,
    pub index: u32,
    pub prompt: Vec<u32>,
    /// Shared by the choices of one body (one copy per distinct fitted `max_tokens`).
    pub params: Arc<SamplingParams>,
    /// This choice's seed: the body's plus the choice's number.
    pub seed: Option<u64>,
    pub operation: Operation,
    pub arrival: Instant,
    /// The span this engine request's telemetry links to (set when the request is traced).
    pub trace: Option<TraceContext>,
}

impl ChoiceStream {
    /// Hands the request to the scheduler; refusals become 429/400 errors.
    pub async fn submit(
        scheduler: &Addr<SchedulerActor>,
        tokenizer: &Arc<Tokenizer>,
        request: ChoiceRequest,
        record: Option<Arc<RequestRecord>>,
    ) -> Result<Self, ApiError> {
        let (tx, rx) = unbounded_channel();
        let stops = StopStringMatcher::new(request.params.stop.clone());
        let detokenizer = IncrementalDetokenizer::new(&request.prompt);
        let prompt_tokens = request.prompt.len();
        let min_tokens = request.params.min_tokens as usize;
        let echo = PromptEcho::new(&request.prompt, &request.params);
        let echo_only = request.params.echo_only;
        let message = Generate {
            id: request.id.clone(),
            prompt_token_ids: request.prompt,
            params: request.params,
            seed: request.seed,
            operation: request.operation,
            arrival: request.arrival,
            trace: request.trace,
            events: tx,
        };
        match scheduler.send(message).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(engine_error(error)),
            Err(_) => return Err(ApiError::Unavailable("the engine is not running".into())),
        }
        Ok(Self {
            index: request.index,
            id: request.id,
            events: rx,
            scheduler: scheduler.clone(),
            tokenizer: Arc::clone(tokenizer),
            detokenizer,
            stops,
            prompt_tokens,
            completion_tokens: 0,
            min_tokens,
            echo,
            echo_only,
            finished: false,
            record,
        })
    }

    /// The next piece of output, or `None` after the end; the first carries the prompt's echo
    /// and logprobs when they were asked.
    pub async fn next(&mut self) -> Option<Result<ChoiceDelta, ApiError>> {
        let mut next = self.next_generated().await;
        if let Some(Ok(delta)) = next.as_mut()
            && let Some(preamble) = self.echo.take(&self.tokenizer)
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
                        self.scheduler.do_send(Abort {
                            id: self.id.clone(),
                            reason: AbortReason::StopString,
                        });
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
                TokenEvent::PromptLogprobs(chunk) => self.echo.receive(chunk),
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

/// Aborts one choice from outside its stream (the stall watchdog).
#[derive(Clone)]
pub struct AbortHandle {
    id: RequestId,
    scheduler: Addr<SchedulerActor>,
}

impl AbortHandle {
    /// Ends the choice in the engine as `abort`; its stream then ends on its own.
    pub fn abort(&self) {
        self.scheduler.do_send(Abort {
            id: self.id.clone(),
            reason: AbortReason::ClientGone,
        });
    }
}

impl ChoiceStream {
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle {
            id: self.id.clone(),
            scheduler: self.scheduler.clone(),
        }
    }
}

impl Drop for ChoiceStream {
    fn drop(&mut self) {
        if !self.finished {
            self.scheduler.do_send(Abort {
                id: self.id.clone(),
                reason: AbortReason::ClientGone,
            });
        }
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
