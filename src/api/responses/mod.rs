//! `POST /v1/responses`: OpenAI's Responses API, stateless (vLLM serves it too; openai-agents
//! calls it by default). The body is translated into a chat request and served by the same
//! pipeline (validation, limits, constraints, spans, access log, metrics, with `Chat` as the
//! operation); only the wording of the answer differs (see [`format`]). Responses are not
//! stored: `previous_response_id` is refused.

mod format;
mod output;
mod request;

pub use request::{Echo, ResponsesRequest};

use actix_web::{HttpRequest, HttpResponse, web};

use super::chat::Chat;
use super::errors::ApiError;
use super::json_body::JsonBody;
use super::limits::PromptSize;
use super::openai_types::ChatCompletionRequest;
use super::pipeline::{Delivery, Endpoint, ResponseHead, serve};
use super::request_log::RequestLog;
use super::sse::UsageChunks;
use super::structured_output::ConstraintFields;
use super::tool_calls::{ToolChoicePlan, ToolOutput};
use super::{AppState, ServedModel};
use crate::engine::sampling_params::SamplingParams;
use crate::engine::types::Operation;
use format::ResponsesFormat;

pub async fn create_response(
    req: HttpRequest,
    state: web::Data<AppState>,
    JsonBody(body): JsonBody<ResponsesRequest>,
) -> Result<HttpResponse, ApiError> {
    let (chat, echo) = body.into_chat()?;
    serve::<Responses>(&state, ResponsesCall { chat, echo }, RequestLog::of(&req)).await
}

/// A Responses body as the chat request it comes to, and what its answer repeats.
pub struct ResponsesCall {
    chat: ChatCompletionRequest,
    echo: Echo,
}

/// The Responses endpoint's part of the pipeline: chat's, worded as the Responses API.
pub struct Responses;

impl Endpoint for Responses {
    type Request = ResponsesCall;
    type Format = ResponsesFormat;
    const ID_PREFIX: &'static str = "resp";
    const OPERATION: Operation = Operation::Chat;
    const PROMPT_PARAM: &'static str = "input";

    fn requested_model(request: &ResponsesCall) -> Option<&str> {
        Chat::requested_model(&request.chat)
    }

    fn sampling_params(request: &ResponsesCall) -> Result<SamplingParams, ApiError> {
        Chat::sampling_params(&request.chat)
    }

    fn check_served(request: &ResponsesCall, model: &ServedModel) -> Result<(), ApiError> {
        Chat::check_served(&request.chat, model)
    }

    fn constraint_fields(request: &ResponsesCall) -> ConstraintFields<'_> {
        Chat::constraint_fields(&request.chat)
    }

    fn max_tokens_param(_request: &ResponsesCall) -> &'static str {
        "max_output_tokens"
    }

    fn prompt_size(request: &ResponsesCall) -> PromptSize {
        Chat::prompt_size(&request.chat)
    }

    /// Streams always end with the whole response and its usage.
    fn delivery(request: &ResponsesCall) -> Delivery {
        if request.chat.stream.unwrap_or(false) {
            Delivery::Stream(UsageChunks {
                closing: true,
                continuous: false,
            })
        } else {
            Delivery::Whole
        }
    }

    fn format(request: &ResponsesCall, head: ResponseHead, model: &ServedModel) -> ResponsesFormat {
        let tools = ToolChoicePlan::of(&request.chat).map_or(ToolOutput::Text, |plan| plan.output(model.tool_parser));
        ResponsesFormat::new(head, request.echo.clone(), tools)
    }

    async fn prompts(request: ResponsesCall, model: &ServedModel) -> Result<Vec<Vec<u32>>, ApiError> {
        Chat::prompts(request.chat, model).await
    }
}
