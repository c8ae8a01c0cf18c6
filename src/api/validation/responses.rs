//! The rules of a Responses body: those of its translation into a chat request
//! (`previous_response_id` refused, `metadata` and `text` objects, `max_output_tokens` at
//! least 1, `input` items a chat conversation can hold; see `api::responses`), then chat's,
//! with errors about the prompt and its length naming `input` and `max_output_tokens`.

use super::prompt::ParamNames;
use super::{Body, Checked, Delivery};
use crate::api::errors::ApiError;
use crate::api::openai_types::CommonFields;
use crate::api::responses::{Echo, ResponsesRequest};
use crate::api::sse::UsageChunks;
use crate::api::tool_calls::{ToolCallParser, ToolOutput};

/// What the Responses wording needs of the body.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponsesOutput {
    /// What the response repeats of its request.
    pub echo: Echo,
    /// How the generated text is read for tool calls.
    pub tools: ToolOutput,
}

impl Body for ResponsesRequest {
    type Output = ResponsesOutput;

    fn common(&self) -> &CommonFields {
        &self.common
    }

    fn check(self, tool_parser: Option<ToolCallParser>) -> Result<Checked<ResponsesOutput>, ApiError> {
        let (chat, echo) = self.into_chat()?;
        // Streams always end with the whole response and its usage.
        let delivery = match chat.common.stream {
            Some(true) => Delivery::Stream(UsageChunks {
                closing: true,
                continuous: false,
            }),
            _ => Delivery::Whole,
        };
        let checked = chat.check(tool_parser)?;
        Ok(Checked {
            names: ParamNames {
                prompt: "input",
                max_tokens: "max_output_tokens",
            },
            delivery,
            output: ResponsesOutput {
                echo,
                tools: checked.output.tools,
            },
            params: checked.params,
            tool_constraint: checked.tool_constraint,
            constraints: checked.constraints,
            prompt: checked.prompt,
            size: checked.size,
        })
    }
}
