//! Actor messages between the api and the scheduler (named fields, declared results).

use actix::Message;
use tokio::sync::mpsc::UnboundedSender;

use crate::engine::events::{EngineError, TokenEvent};
use crate::engine::request::NewRequest;
use crate::engine::types::RequestId;

/// Submit a request to the engine: the request as the API planned it, and where its events
/// go.
#[derive(Debug, Message)]
#[rtype(result = "Result<(), EngineError>")]
pub struct Generate {
    pub request: NewRequest,
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
