//! Plain data shared by the api, the scheduler and the executor.

use std::time::Instant;

/// Engine-wide request id (the API's `cmpl-…`/`chatcmpl-…` id plus a choice index).
pub type RequestId = String;

/// Why a request ended; the value of the `finished_reason` metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// EOS, a stop token id, or a stop string.
    Stop,
    /// `max_tokens` or the model's context length was reached.
    Length,
    /// The client went away or the request was cancelled.
    Abort,
    /// The engine failed while running the request.
    Error,
}

impl FinishReason {
    /// The label value used by metrics and by the OpenAI `finish_reason` field.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
            FinishReason::Error => "error",
        }
    }
}

/// Which OpenAI operation a request came from (GenAI `gen_ai.operation.name`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    Chat,
    TextCompletion,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Chat => "chat",
            Operation::TextCompletion => "text_completion",
        }
    }
}

/// Monotonic timestamps of one request, all from `Instant` (one clock).
#[derive(Debug, Clone, Copy)]
pub struct RequestTimestamps {
    /// The API parsed the request.
    pub arrival: Instant,
    /// The scheduler accepted it.
    pub queued: Option<Instant>,
    /// First included in a batch.
    pub scheduled: Option<Instant>,
    pub first_token: Option<Instant>,
    pub last_token: Option<Instant>,
    pub finished: Option<Instant>,
}
