//! The one engine request: what the API plans for each choice of a body and the scheduler
//! admits, built once where the API fans a body out and handed over as it is.

use std::sync::Arc;
use std::time::Instant;

use crate::engine::sampling_params::SamplingParams;
use crate::engine::trace_context::TraceContext;
use crate::engine::types::{Operation, RequestId};

/// One choice of one prompt, as the engine runs it.
#[derive(Debug, Clone)]
pub struct NewRequest {
    pub id: RequestId,
    pub prompt_token_ids: Vec<u32>,
    /// Shared with the other choices of its body.
    pub params: Arc<SamplingParams>,
    /// This choice's seed (the body's `params.seed` plus the choice index); `None` samples
    /// from the engine's own generator.
    pub seed: Option<u64>,
    pub operation: Operation,
    /// When the API finished parsing the request (start of every interval).
    pub arrival: Instant,
    /// The span this engine request's telemetry links to; `None` when it is not traced.
    pub trace: Option<TraceContext>,
    /// The LoRA adapter it runs under (its id, from 1), or `None` for the base model.
    pub lora: Option<u32>,
}
