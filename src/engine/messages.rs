//! Actor messages between the api and the scheduler (named fields, declared results).

use std::sync::Arc;
use std::time::Instant;

use actix::Message;
use tokio::sync::mpsc::UnboundedSender;

use crate::engine::events::{EngineError, TokenEvent};
use crate::engine::sampling_params::SamplingParams;
use crate::engine::trace_context::TraceContext;
use crate::engine::types::{Operation, RequestId};

/// Submit a request to the engine.
#[derive(Debug, Message)]
#[rtype(result = "Result<(), EngineError>")]
pub struct Generate {
    pub id: RequestId,
    pub prompt_token_ids: Vec<u32>,
    /// Shared by every choice of the body.
    pub params: Arc<SamplingParams>,
    /// This choice's seed (the body's `params.seed` plus the choice index); `None` samples
    /// from the engine's own generator.
    pub seed: Option<u64>,
    pub operation: Operation,
    /// When the API finished parsing the request (start of every interval).
    pub arrival: Instant,
    /// The span this engine request's telemetry links to; `None` when it is not traced.
    pub trace: Option<TraceContext>,
    pub events: UnboundedSender<TokenEvent>,
}

/// Why a request is being stopped from outside the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AbortReason {
    /// The client disconnected or cancelled.
    ClientGone,
    /// The API matched a stop string: the request ended normally (`finish_reason=stop`).
    StopString,
}

/// Stop a request and free everything it holds.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Abort {
    pub id: RequestId,
    pub reason: AbortReason,
}
