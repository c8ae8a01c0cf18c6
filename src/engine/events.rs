//! What the engine tells one request: a tokio channel per request (the hot path, not an
//! actor message).

use crate::engine::intervals::RequestIntervals;
use crate::engine::timeline::RequestTimeline;
use crate::engine::types::FinishReason;

/// Log-probabilities of one generated position.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprobs {
    /// Log-probability of the sampled token under the model's distribution.
    pub logprob: f32,
    /// The most likely tokens and their log-probabilities, best first.
    pub top: Vec<(u32, f32)>,
}

/// Log-probability of one prompt token given the tokens before it.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptTokenLogprob {
    pub token: u32,
    pub logprob: f32,
    /// 1 for the most likely token of the position.
    pub rank: u32,
    /// The most likely tokens and their log-probabilities, best first.
    pub top: Vec<(u32, f32)>,
}

/// Prompt logprobs of consecutive prompt positions from `first_position` (at least 1: the
/// first prompt token has none), as one step computed them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PromptLogprobs {
    pub first_position: usize,
    pub positions: Vec<PromptTokenLogprob>,
}

/// Token counts of a finished request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TokenUsage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens whose KV came from the prefix cache (`prompt_tokens_details.cached_tokens`).
    pub cached_prompt_tokens: usize,
}

/// An event on a request's output channel.
#[derive(Debug, Clone, PartialEq)]
pub enum TokenEvent {
    Token {
        id: u32,
        logprobs: Option<TokenLogprobs>,
    },
    /// Prompt logprobs (`prompt_logprobs`), before the first token; a recompute after
    /// preemption may send positions again.
    PromptLogprobs(PromptLogprobs),
    Finished {
        reason: FinishReason,
        usage: TokenUsage,
        /// The request's intervals, defined exactly as the histograms define them.
        timings: RequestIntervals,
        /// Traced requests only: the timestamps and events their span is built from.
        timeline: Option<Box<RequestTimeline>>,
    },
    Failed {
        error: EngineError,
    },
}

/// Errors the engine reports to the API.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EngineError {
    #[error("the server is overloaded: {waiting} requests are already waiting")]
    Overloaded { waiting: usize },
    #[error("the prompt needs {needed} KV-cache blocks but the cache has only {available}")]
    TooLong { needed: usize, available: usize },
    #[error("the model failed while running this request: {0}")]
    Executor(String),
    /// The output constraint's matcher failed mid-generation (a grammar beyond the engine's
    /// per-token limits), so no valid output can follow.
    #[error("the output constraint could not be followed past this point: {0}")]
    Grammar(String),
    /// The server is shutting down (its grace period is over) or the engine has stopped.
    #[error("the engine is not running: the server is shutting down or stopped")]
    Unavailable,
    /// The request's LoRA adapter was unloaded before the request reached the engine.
    #[error("the LoRA adapter this request names has been unloaded")]
    AdapterUnloaded,
}

impl EngineError {
    /// The `error.type` / `reason` label of this error.
    pub fn error_type(&self) -> &'static str {
        match self {
            EngineError::Overloaded { .. } => "queue_full",
            EngineError::TooLong { .. } => "too_long",
            EngineError::Executor(_) => "executor_error",
            EngineError::Grammar(_) => "grammar_error",
            EngineError::Unavailable => "unavailable",
            EngineError::AdapterUnloaded => "adapter_unloaded",
        }
    }
}
