//! The rules of a chat body: at least one message, no `chat_template` of the client's own,
//! `stream_options` only with `stream`, `prompt_logprobs` not with `stream` (as vLLM),
//! `top_logprobs` only with `logprobs: true`, `max_completion_tokens` (which wins) and
//! `max_tokens` each at least 1, and the tool fields (`tools/`). The messages' contents are
//! checked when the prompt is built.

use super::limits::PromptSize;
use super::prompt::ParamNames;
use super::sampling::{EndpointKnobs, sampling_params};
use super::tools::ToolChoicePlan;
use super::{Body, Checked, Delivery};
use crate::api::errors::ApiError;
use crate::api::openai_types::ChatCompletionRequest;
use crate::api::openai_types::CommonFields;
use crate::api::prompt::PromptSource;
use crate::api::tool_calls::{ToolCallParser, ToolOutput, tools_bytes};

/// What chat's wording needs of the body.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatOutput {
    /// `logprobs: true`: a whole response carries `logprobs` even when no token came.
    pub logprobs: bool,
    /// How the generated text is read for tool calls.
    pub tools: ToolOutput,
}

impl Body for ChatCompletionRequest {
    type Output = ChatOutput;

    fn common(&self) -> &CommonFields {
        &self.common
    }

    fn check(self, tool_parser: Option<ToolCallParser>) -> Result<Checked<ChatOutput>, ApiError> {
        if self.messages.is_empty() {
            return Err(ApiError::invalid(
                "messages",
                "`messages` must contain at least one message",
            ));
        }
        if self.chat_template.is_some() {
            return Err(ApiError::invalid(
                "chat_template",
                "`chat_template` is not accepted in requests: the server renders only the model's \
                 template or the one its operator configured",
            ));
        }
        let delivery = Delivery::of(self.common.stream, self.sampling.stream_options.as_ref())?;
        if self.sampling.prompt_logprobs.is_some() && self.common.stream == Some(true) {
            return Err(ApiError::invalid(
                "prompt_logprobs",
                "`prompt_logprobs` is not available with `stream: true` on chat (as in vLLM)",
            ));
        }
        let logprobs_on = self.logprobs == Some(true);
        if self.top_logprobs.is_some() && !logprobs_on {
            return Err(ApiError::invalid(
                "top_logprobs",
                "`top_logprobs` requires `logprobs` to be true",
            ));
        }
        // `max_completion_tokens` wins, but a `max_tokens` sent beside it must still be valid.
        if self.max_tokens == Some(0) {
            return Err(ApiError::invalid("max_tokens", "`max_tokens` must be at least 1"));
        }
        let (max_tokens, max_tokens_param) = match (self.max_completion_tokens, self.max_tokens) {
            (Some(m), _) => (Some(m), "max_completion_tokens"),
            (None, Some(m)) => (Some(m), "max_tokens"),
            (None, None) => (None, "max_tokens"),
        };
        let knobs = EndpointKnobs {
            max_tokens,
            max_tokens_param,
            logprobs: logprobs_on.then(|| self.top_logprobs.unwrap_or(0)),
            logprobs_param: "top_logprobs",
            echo: false,
            echo_only: false,
        };
        let params = sampling_params(&self.common, &self.sampling, knobs)?;
        // `required` and named tool choices constrain the output to valid calls.
        let plan = ToolChoicePlan::of(&self)?;
        let tool_constraint = plan.constraint(&self)?;
        plan.check_served(tool_parser)?;
        let size = PromptSize {
            prompts: 1,
            text_bytes: self.content_bytes() + tools_bytes(&self),
        };
        Ok(Checked {
            params,
            tool_constraint,
            constraints: self.constraints,
            prompt: PromptSource::Chat {
                messages: self.messages,
                tools: self.tools,
            },
            size,
            names: ParamNames {
                prompt: "messages",
                max_tokens: max_tokens_param,
            },
            delivery,
            output: ChatOutput {
                logprobs: logprobs_on,
                tools: plan.output(tool_parser),
            },
        })
    }
}
