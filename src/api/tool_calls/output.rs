//! A whole choice's text read back into an assistant message (the non-streaming response).

use serde::Deserialize;

use super::{ToolOutput, ToolParserKind, hermes, new_tool_call_id};
use crate::api::openai_types::{ChatResponseMessage, ToolCall};

/// An assistant message, and whether its calls end the choice as `tool_calls`.
#[derive(Debug, Clone, PartialEq)]
pub struct ShapedOutput {
    pub message: ChatResponseMessage,
    /// `finish_reason` becomes `tool_calls` (when the engine said `stop`). A named choice
    /// keeps `stop`, as OpenAI and vLLM report it.
    pub tool_calls_finish: bool,
}

/// One element of a `required` output (the schema's `{"name", "parameters"}`).
#[derive(Deserialize)]
pub(super) struct RequiredCall {
    pub name: String,
    #[serde(default)]
    pub parameters: Option<serde_json::Value>,
}

impl RequiredCall {
    pub fn arguments(&self) -> String {
        match &self.parameters {
            None | Some(serde_json::Value::Null) => "{}".to_owned(),
            Some(value) => value.to_string(),
        }
    }
}

/// Reads `text` as `output` says. Output that does not hold the expected calls (cut short
/// by `max_tokens`, malformed) stays plain content rather than failing the request.
pub fn shape_output(output: &ToolOutput, text: String) -> ShapedOutput {
    let plain = |text: String| ShapedOutput {
        message: ChatResponseMessage::assistant(text),
        tool_calls_finish: false,
    };
    match output {
        ToolOutput::Text => plain(text),
        ToolOutput::Parsed(ToolParserKind::Hermes) => {
            let (content, calls) = hermes::parse(&text);
            if calls.is_empty() {
                return plain(text);
            }
            let calls = calls
                .into_iter()
                .map(|c| ToolCall::function(new_tool_call_id(), c.name, c.arguments))
                .collect();
            ShapedOutput {
                message: ChatResponseMessage::with_tool_calls(content, calls),
                tool_calls_finish: true,
            }
        }
        ToolOutput::Required => match serde_json::from_str::<Vec<RequiredCall>>(text.trim()) {
            Ok(calls) if !calls.is_empty() => {
                let calls = calls
                    .iter()
                    .map(|c| ToolCall::function(new_tool_call_id(), c.name.clone(), c.arguments()))
                    .collect();
                ShapedOutput {
                    message: ChatResponseMessage::with_tool_calls(None, calls),
                    tool_calls_finish: true,
                }
            }
            _ => plain(text),
        },
        ToolOutput::Named(name) => ShapedOutput {
            message: ChatResponseMessage::with_tool_calls(
                None,
                vec![ToolCall::function(new_tool_call_id(), name.clone(), text)],
            ),
            tool_calls_finish: false,
        },
    }
}
