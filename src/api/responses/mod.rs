//! `POST /v1/responses`: OpenAI's Responses API, stateless (vLLM serves it too; openai-agents
//! calls it by default). Validation translates the body into a chat request (see [`request`])
//! and checks it as chat's; the same pipeline serves it (limits, constraints, spans, access
//! log, metrics, with `Chat` as the operation); only the wording of the answer differs (see
//! [`format`]). Responses are not stored: `previous_response_id` is refused.

mod format;
mod output;
mod request;

pub use request::{Echo, ResponsesRequest};

use super::pipeline::{Endpoint, ResponseHead};
use super::validation::ResponsesOutput;
use crate::engine::types::Operation;
use format::ResponsesFormat;

/// The Responses endpoint's part of the pipeline: chat's, worded as the Responses API (its
/// rules: `validation::responses`).
pub struct Responses;

impl Endpoint for Responses {
    type Request = ResponsesRequest;
    type Format = ResponsesFormat;
    const ID_PREFIX: &'static str = "resp";
    const OPERATION: Operation = Operation::Chat;

    fn format(output: ResponsesOutput, head: ResponseHead) -> ResponsesFormat {
        ResponsesFormat::new(head, output.echo, output.tools)
    }
}
