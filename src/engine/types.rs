//! Plain data shared by the api, the scheduler and the executor.

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
