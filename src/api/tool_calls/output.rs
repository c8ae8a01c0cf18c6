//! A whole choice's text read back into an assistant message (the non-streaming response).

use serde::Deserialize;

use super::json_scan::json_object_end;
use super::{ToolCallParser, ToolOutput, hermes, new_tool_call_id};
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

/// Reads `text` as `output` says. Output that does not hold the expected calls (malformed,
/// or cut short before its first call closed) stays plain content rather than failing the
/// request; a `required` array cut short after some calls keeps the complete ones.
pub fn shape_output(output: &ToolOutput, text: String) -> ShapedOutput {
    let plain = |text: String| ShapedOutput {
        message: ChatResponseMessage::assistant(text),
        tool_calls_finish: false,
    };
    match output {
        ToolOutput::Text => plain(text),
        ToolOutput::Parsed(ToolCallParser::Hermes) => {
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
        ToolOutput::Required => match complete_required_calls(&text) {
            calls if !calls.is_empty() => {
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

/// The complete calls at the front of a `required` array (`[{..}, {..}, {..`): all of them
/// when the array closed, those before the cut when `max_tokens` ended it, none when the
/// text is not such an array.
fn complete_required_calls(text: &str) -> Vec<RequiredCall> {
    let Some(mut rest) = text.trim_start().strip_prefix('[') else {
        return Vec::new();
    };
    let mut calls = Vec::new();
    loop {
        rest = rest.trim_start();
        if !calls.is_empty() {
            // `]`, the cut or anything else ends the calls.
            let Some(after) = rest.strip_prefix(',') else {
                return calls;
            };
            rest = after.trim_start();
        }
        let Some(end) = json_object_end(rest).filter(|_| rest.starts_with('{')) else {
            return calls;
        };
        match serde_json::from_str::<RequiredCall>(&rest[..end]) {
            Ok(call) => calls.push(call),
            Err(_) => return Vec::new(),
        }
        rest = &rest[end..];
    }
}
