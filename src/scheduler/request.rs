//! One request's state inside the scheduler.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use super::in_flight::InFlight;
use crate::engine::intervals::RequestTimestamps;
use crate::engine::sampling_params::SamplingParams;
use crate::engine::timeline::{PrefillChunk, RequestEventKind, RequestEvents, RequestTimeline};
use crate::engine::trace_context::TraceContext;
use crate::engine::types::{Operation, RequestId};
use crate::kv_cache::block::hash::{BlockHash, BlockHasher};

pub use crate::engine::request::NewRequest;

/// A request the scheduler owns, waiting or running.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub id: RequestId,
    pub prompt: Arc<Vec<u32>>,
    pub output: Vec<u32>,
    pub params: Arc<SamplingParams>,
    pub seed: Option<u64>,
    pub operation: Operation,
    pub trace: Option<TraceContext>,
    /// The LoRA adapter it runs under (`None`: the base model).
    pub lora: Option<u32>,
    pub timestamps: RequestTimestamps,
    /// Traced requests only: scheduling events for the span (nothing kept otherwise).
    pub events: Option<Box<RequestEvents>>,
    /// Tokens whose K/V are in the cache (0 again after a recompute preemption).
    pub num_computed: usize,
    /// Its part in the steps sent to the executor and not back yet (async scheduling).
    pub in_flight: InFlight,
    /// Whether `prompt_tokens_total` has counted this request (once, at its first token).
    pub prefill_counted: bool,
    /// Prompt tokens found in the prefix cache at its first admission (`None` until then):
    /// the prefix-cache counters count one lookup per request, however often it is retried.
    pub cached_prompt_tokens: Option<usize>,
    /// Its prompt's KV was forked from a sibling's (`policy_prompt_sharing`): it computes
    /// only the last prompt token, and counts the rest as cached.
    pub forked_prompt: bool,
    /// Times it was preempted (recompute or swap), for `request_num_preemptions`.
    pub num_preemptions: u64,
    /// Hashes of the prompt's full blocks, computed once when first asked (the token-load
    /// gauges look them up in the prefix cache every step).
    prompt_block_hashes: OnceLock<Vec<BlockHash>>,
}

impl Request {
    pub fn new(new: NewRequest, now: Instant) -> Self {
        let mut timestamps = RequestTimestamps::new(new.arrival);
        timestamps.queued = Some(now);
        Self {
            id: new.id,
            prompt: Arc::new(new.prompt_token_ids),
            output: Vec::new(),
            params: new.params,
            seed: new.seed,
            operation: new.operation,
            events: new.trace.map(|_| Box::default()),
            trace: new.trace,
            lora: new.lora,
            timestamps,
            num_computed: 0,
            in_flight: InFlight::default(),
            prefill_counted: false,
            cached_prompt_tokens: None,
            forked_prompt: false,
            num_preemptions: 0,
            prompt_block_hashes: OnceLock::new(),
        }
    }

    /// Records a scheduling event when the request is traced.
    pub fn note(&mut self, kind: RequestEventKind, at: Instant) {
        if let Some(events) = &mut self.events {
            events.record(kind, at);
        }
    }

    /// Whether it has run before (a preempted request waiting to run again).
    pub fn was_admitted(&self) -> bool {
        self.timestamps.scheduled.is_some()
    }

    /// Admitted into the running batch: the first time sets `scheduled`.
    pub fn note_scheduled(&mut self, at: Instant) {
        self.timestamps.scheduled.get_or_insert(at);
        self.note(RequestEventKind::Scheduled, at);
    }

    /// A step that ended at `end` after `step_seconds` computed `tokens` prompt tokens from
    /// `position` (traced requests only: their phase spans).
    pub fn note_prefill_chunk(&mut self, end: Instant, step_seconds: f64, position: usize, tokens: usize) {
        if let Some(events) = &mut self.events {
            let took = std::time::Duration::try_from_secs_f64(step_seconds).unwrap_or_default();
            events.record_prefill_chunk(PrefillChunk {
                start: end.checked_sub(took).unwrap_or(end),
                end,
                position: u32::try_from(position).unwrap_or(u32::MAX),
                tokens: u32::try_from(tokens).unwrap_or(u32::MAX),
            });
        }
    }

    /// A token was sampled at `at`.
    pub fn note_token(&mut self, at: Instant) {
        if self.timestamps.first_token.is_none() {
            self.timestamps.first_token = Some(at);
            self.note(RequestEventKind::FirstToken, at);
        }
        self.timestamps.last_token = Some(at);
    }

    /// The timestamps and events its span is built from (traced requests only).
    pub fn take_timeline(&mut self) -> Option<Box<RequestTimeline>> {
        self.events.take().map(|events| {
            Box::new(RequestTimeline {
                timestamps: self.timestamps,
                events: *events,
            })
        })
    }

    /// The chained hashes of the prompt's full blocks of `block_size` tokens (as the prefix
    /// cache keys them), computed on the first call.
    pub fn prompt_block_hashes(&self, block_size: usize, hasher: &BlockHasher) -> &[BlockHash] {
        self.prompt_block_hashes
            .get_or_init(|| hasher.hash_all(&self.prompt, block_size, self.lora))
    }

    /// Another choice of the same body on the same prompt: the API gives the choices of one
    /// body a single `Arc` of their params (see `NewRequest::params`). Not when prompt
    /// logprobs are asked for: every choice then computes every prompt position.
    pub fn is_sibling_of(&self, other: &Request) -> bool {
        self.id != other.id
            && Arc::ptr_eq(&self.params, &other.params)
            && self.params.reads_prefix_cache()
            && self.prompt == other.prompt
    }

    /// Whether its whole prompt's K/V is in the cache.
    pub fn prompt_computed(&self) -> bool {
        self.num_computed >= self.prompt.len()
    }

    /// Prompt plus generated tokens.
    pub fn total_len(&self) -> usize {
        self.prompt.len() + self.output.len()
    }

    /// Tokens computed or on their way: where the next step starts.
    pub fn num_scheduled(&self) -> usize {
        self.num_computed + self.in_flight.tokens()
    }

    /// Prompt, generated and still-to-be-sampled tokens.
    pub fn len_with_pending(&self) -> usize {
        self.total_len() + self.in_flight.samples()
    }

    /// Generated tokens, counting the ones steps in flight will sample.
    pub fn num_generated_with_pending(&self) -> usize {
        self.output.len() + self.in_flight.samples()
    }

    /// Tokens `start .. start + len` of prompt ++ output.
    pub fn tokens(&self, start: usize, len: usize) -> Vec<u32> {
        self.prompt
            .iter()
            .chain(self.output.iter())
            .skip(start)
            .take(len)
            .copied()
            .collect()
    }
}
