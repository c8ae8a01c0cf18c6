//! One engine step as the messages between the scheduler and the executor actors: the batch
//! the scheduler asks for, what comes back, and how it can fail.

use std::sync::Arc;

use actix::Message;

use crate::engine::events::{PromptLogprobs, TokenLogprobs};
use crate::engine::lora::LoraAdapter;
use crate::engine::sampling_params::SamplingParams;
use crate::engine::types::RequestId;

/// Stands in for a token that the step before samples; the executor replaces it (see
/// [`ScheduledSequence::last_token_pending`]).
pub const PENDING_TOKEN: u32 = u32::MAX;

/// One sequence's work in a step.
#[derive(Debug, Clone)]
pub struct ScheduledSequence {
    pub id: RequestId,
    /// Tokens to run this step (a prompt chunk, a recompute, or the last sampled token).
    pub token_ids: Vec<u32>,
    /// The last of `token_ids` is [`PENDING_TOKEN`]: this step was scheduled while the step
    /// before ran, and the token that step samples for this sequence goes here (also at the
    /// end of `output_token_ids` when a penalty needs them). The executor, which ran that
    /// step, fills it in.
    pub last_token_pending: bool,
    /// Position of `token_ids[0]`.
    pub start_position: usize,
    /// Blocks covering positions `0 .. start_position + token_ids.len()`.
    pub block_table: Vec<u32>,
    /// Whether a token is sampled after this step (false for a non-final prompt chunk).
    pub sample: bool,
    pub params: Arc<SamplingParams>,
    /// The request's own seed (per choice; `params.seed` is the body's).
    pub seed: Option<u64>,
    /// How many tokens were generated before this step's sample, pending ones included
    /// (the seeded RNG stream position).
    pub num_generated: usize,
    /// The generated tokens, sent only when a penalty needs them (empty otherwise).
    pub output_token_ids: Vec<u32>,
    /// Prompt tokens, sent only when the repetition penalty needs them.
    pub prompt_token_ids: Option<Arc<Vec<u32>>>,
    /// The LoRA adapter the sequence runs under, or `None` for the base model.
    pub lora: Option<u32>,
}

/// One engine step: the batch handed to the executor.
#[derive(Debug, Clone, Default)]
pub struct SchedulerOutput {
    pub sequences: Vec<ScheduledSequence>,
    /// Blocks to copy device → host before the step (swap out), as (device, host) pairs.
    pub swap_out: Vec<(u32, u32)>,
    /// Blocks to copy host → device before the step (swap in), as (host, device) pairs.
    pub swap_in: Vec<(u32, u32)>,
    /// Device blocks to copy before anything else in the step, as (source, destination)
    /// pairs: the partial prompt block of a choice that forked its sibling's prompt.
    pub copy_blocks: Vec<(u32, u32)>,
    /// Adapters to install or drop before the step runs, in order (run-time
    /// `/v1/load_lora_adapter` and `/v1/unload_lora_adapter`): they ride the step stream so
    /// an adapter is on the executor before the first step that names it, and leaves only
    /// after the last one.
    pub lora_changes: Vec<LoraChange>,
}

/// A change to the executor's adapter set.
#[derive(Debug, Clone)]
pub enum LoraChange {
    Install(Arc<LoraAdapter>),
    /// Drop the adapter with this id: no queued or running request names it any more.
    Remove(u32),
}

impl SchedulerOutput {
    pub fn is_empty(&self) -> bool {
        self.sequences.is_empty() && self.swap_out.is_empty() && self.swap_in.is_empty() && self.copy_blocks.is_empty()
    }

    pub fn num_tokens(&self) -> usize {
        self.sequences.iter().map(|s| s.token_ids.len()).sum()
    }
}

/// A sampled token.
#[derive(Debug, Clone, PartialEq)]
pub struct SampledToken {
    pub token: u32,
    pub logprobs: Option<TokenLogprobs>,
}

/// The executor's answer: one entry per scheduled sequence, `None` where `sample` was false.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelOutput {
    pub sampled: Vec<Option<SampledToken>>,
    /// The step's copies of KV blocks to the host swap pool (swap-out) and back (swap-in).
    pub swapped_out: KvTransfer,
    pub swapped_in: KvTransfer,
    /// Seconds spent computing each grammar mask of the step (constrained samples only).
    pub grammar_mask_seconds: Vec<f64>,
    /// Prompt logprobs computed this step, for the sequences that asked for them.
    pub prompt_logprobs: Vec<(RequestId, PromptLogprobs)>,
    /// Constrained sequences whose matcher failed this step, with its error: they end
    /// failed rather than with a token sampled under a broken mask.
    pub grammar_failures: Vec<(RequestId, String)>,
    /// Wall time the executor spent on the step (filled in by the executor actor): the
    /// step-duration histogram and the scheduler's step-time model learn from it.
    pub step_seconds: f64,
    /// How long the executor sat idle between the end of the step before and this one's
    /// start (`None` for its first step): the per-step log shows it beside the step.
    pub idle_seconds: Option<f64>,
}

/// KV blocks copied between the device pool and the host swap pool in one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct KvTransfer {
    pub bytes: u64,
    pub seconds: f64,
}

/// Run one step.
#[derive(Debug, Message)]
#[rtype(result = "Result<ModelOutput, ExecutorError>")]
pub struct ExecuteBatch {
    pub batch: Arc<SchedulerOutput>,
}

/// Why a step produced no output. The messages reach clients: a panic's own text is only
/// logged.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExecutorError {
    /// The executor thread panicked; it was rebuilt with a fresh (empty) cache, which took
    /// `restarts` attempts.
    #[error("internal error: the engine crashed during this step and was restarted")]
    Restarted { restarts: u32 },
    /// The executor panicked and its restarts are exhausted (after `restarts` more tries in
    /// this step): no step runs any more.
    #[error("internal error: the engine crashed and could not be restarted")]
    Dead { restarts: u32 },
    #[error("the executor failed: {0}")]
    Failed(String),
}

/// Where in a step the executor thread is: the points where the fake executor injects
/// panics, to show that each is survived (test builds only).
#[cfg(any(test, feature = "testing"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StepStage {
    /// Filling in the placeholders of a step scheduled ahead.
    BeforeExecute,
    /// Inside `Executor::execute` (the forward pass and sampling).
    #[default]
    Execute,
    /// Remembering the step's samples for the step after it.
    AfterExecute,
}
