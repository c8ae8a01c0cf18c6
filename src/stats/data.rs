//! Stats as plain data: produced by the scheduler each step, recorded by the `StatsActor`.
//! Nothing here touches a metrics API.

use std::time::Duration;

use actix::Message;

use super::step_cost::StepCost;
use crate::engine::intervals::RequestIntervals;
pub use crate::engine::step::KvTransfer;
use crate::engine::trace_context::TraceContext;
use crate::engine::types::{FinishReason, Operation};
use crate::kv_cache::residency::ResidencyObservations;

/// A snapshot of the scheduler's state after one step (gauges).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SchedulerStats {
    pub num_running: usize,
    pub num_waiting: usize,
    /// Of the waiting, those whose LoRA adapter finds no slot (`--max-loras`): vLLM's
    /// `deferred` reason; the rest wait for capacity.
    pub num_waiting_deferred: usize,
    pub num_swapped: usize,
    /// Device KV blocks in use / all device blocks, 0..1.
    pub kv_cache_usage: f64,
    /// Host swap-pool blocks in use / all host blocks, 0..1 (0 when there is no pool).
    pub cpu_cache_usage: f64,
    /// Prompt tokens looked up in the prefix cache during this step.
    pub prefix_cache_queries: u64,
    /// Prompt tokens found in the prefix cache during this step.
    pub prefix_cache_hits: u64,
    /// Preemptions (recompute or swap) during this step.
    pub num_preemptions: u64,
    /// Sampled KV-block residency since the last stats (`--kv-cache-metrics`; else empty).
    pub kv_block_residency: ResidencyObservations,
    /// The same load counted in tokens (`num_tokens_waiting`, …).
    pub tokens: TokenLoad,
    /// The adapters of the running and waiting requests; `None` without `--enable-lora`.
    pub lora: Option<LoraLoad>,
}

/// What `lora_requests_info` says: the adapter slots and the adapters in use, by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoraLoad {
    /// `--max-loras`.
    pub max_loras: usize,
    /// Distinct adapters of the running requests, in the order they run.
    pub running: Vec<String>,
    /// Distinct adapters of the waiting requests, in queue order.
    pub waiting: Vec<String>,
    /// The adapters served now, by id (the `kiln_lora_*` families' `lora_name`).
    pub adapters: Vec<(u32, String)>,
    /// Running and waiting requests (as `num_requests_running`/`_waiting` count them) by
    /// adapter id, `None` for the base model; one not listed has none.
    pub requests: Vec<LoraRequests>,
}

/// The requests of one adapter (or of the base model) at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoraRequests {
    pub lora: Option<u32>,
    pub running: usize,
    pub waiting: usize,
}

/// One step's tokens and first tokens by adapter (`kiln_lora_*`); empty without `--enable-lora`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoraIteration {
    /// Prompt and generated tokens by adapter id (`None`: the base model), as
    /// `num_prompt_tokens` and `num_generation_tokens` count them.
    pub tokens: Vec<LoraTokens>,
    /// Each time to first token of `time_to_first_token_s`, with its request's adapter.
    pub time_to_first_token_s: Vec<(Option<u32>, Observation)>,
}

/// Tokens of one adapter (or of the base model) in one step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoraTokens {
    pub lora: Option<u32>,
    pub prompt: u64,
    pub generation: u64,
}

impl LoraIteration {
    /// The entry of adapter `lora`, made on first use (a step holds few adapters).
    pub fn tokens_of(&mut self, lora: Option<u32>) -> &mut LoraTokens {
        let at = match self.tokens.iter().position(|t| t.lora == lora) {
            Some(at) => at,
            None => {
                self.tokens.push(LoraTokens {
                    lora,
                    ..LoraTokens::default()
                });
                self.tokens.len() - 1
            }
        };
        &mut self.tokens[at]
    }
}

/// The scheduler's load in tokens at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenLoad {
    /// Tokens the waiting requests still have to compute (their prompt, plus the generated
    /// tokens of a request preempted for recompute).
    pub waiting: u64,
    /// Of `waiting`, those the prefix cache would not cover if each were admitted now.
    pub uncached_waiting: u64,
    /// Context tokens (prompt plus generated) of the requests in the running batch.
    pub running: u64,
    /// Tokens the device KV cache holds when full.
    pub capacity: u64,
}

/// What happened during one engine step (counters and histograms).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IterationStats {
    /// Prompt tokens of requests whose prefill completed this step (once per request).
    pub num_prompt_tokens: u64,
    /// Tokens generated this step.
    pub num_generation_tokens: u64,
    /// Tokens run through the model this step (prefill + decode); 0 when no step ran.
    pub num_batched_tokens: u64,
    /// Prompt tokens actually computed this step (throughput log line; excludes cache hits).
    pub num_prefill_tokens_computed: u64,
    /// Of `num_prompt_tokens`, those whose KV came from the prefix cache (same requests).
    pub num_prompt_tokens_cached: u64,
    /// Per request whose prefill completed this step: prompt tokens computed, not cached.
    pub prefill_kv_computed_tokens: Vec<u64>,
    /// Time to first token (s) of requests that produced their first token this step.
    pub time_to_first_token_s: Vec<Observation>,
    /// Inter-token latencies (s): one per token after a request's first.
    pub inter_token_latency_s: Vec<Observation>,
    /// The step's estimated FLOPs and bytes (`--enable-mfu-metrics`; else 0).
    pub step_cost: StepCost,
    /// Requests that ended this step, whatever the reason.
    pub finished: Vec<FinishedRequestStats>,
    /// Seconds each grammar mask of the step took (constrained samples only).
    pub grammar_mask_seconds: Vec<f64>,
    /// The executor's wall time for this step (`None` outside a step: aborts, failures).
    pub step_duration_s: Option<f64>,
    /// KV blocks copied to the host swap pool this step, and back from it.
    pub swapped_out: KvTransfer,
    pub swapped_in: KvTransfer,
    /// The step's tokens and first tokens by LoRA adapter (`--enable-lora` only).
    pub lora: LoraIteration,
}

/// Everything the stats actor records for one finished request; intervals come from
/// `RequestTimestamps::intervals` (one function, METRICS.md definitions).
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedRequestStats {
    pub finish_reason: FinishReason,
    pub operation: Operation,
    /// Set when the request failed: the `error.type` label (e.g. `executor_error`).
    pub error_type: Option<&'static str>,
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    pub max_tokens: u64,
    pub n: u64,
    /// Times the request was preempted before it finished (`request_num_preemptions`).
    pub num_preemptions: u64,
    pub intervals: RequestIntervals,
    /// The request's span (exemplars link its histogram observations to it).
    pub trace: Option<TraceContext>,
    /// The kind of output constraint the request had (`StructuredOutput::kind`), if any.
    pub constraint_kind: Option<&'static str>,
    /// The request's LoRA adapter id (`None`: the base model).
    pub lora: Option<u32>,
}

/// One latency observation and the trace of the request it belongs to, so the histogram
/// bucket it lands in can carry that request as its exemplar.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    pub seconds: f64,
    pub trace: Option<TraceContext>,
}

impl Observation {
    pub fn new(seconds: f64, trace: Option<TraceContext>) -> Self {
        Self { seconds, trace }
    }
}

/// An untraced observation.
impl From<f64> for Observation {
    fn from(seconds: f64) -> Self {
        Self { seconds, trace: None }
    }
}

/// One finished HTTP request (semconv `http.server.*`), sent by the middleware.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct RecordHttp {
    /// The matched route pattern (`/v1/models/{id}`); `None` for unmatched paths, so a
    /// client cannot mint series.
    pub route: Option<String>,
    /// Normalised method: a known method or `_OTHER` (see `server::http_middleware::normalise_method`).
    pub method: &'static str,
    /// `None` when no response was sent (the handler panicked or the client left first).
    pub status: Option<u16>,
    /// Until the response body was fully sent (or dropped).
    pub duration: Duration,
    pub request_body_bytes: u64,
    pub response_body_bytes: u64,
    /// The status code for 5xx, `panic`, `cancelled`, …; `None` on success.
    pub error_type: Option<String>,
    /// The error response came after generation started (the engine failed the request),
    /// not from validation or admission (`request_failure_total`'s stage).
    pub generation_started: bool,
    /// A stream that failed after its 200 was sent: the error's status code.
    pub stream_failure: Option<u16>,
}
