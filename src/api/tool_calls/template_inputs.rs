//! What the chat template receives of a tool-using conversation: the request's `tools`,
//! assistant turns with their `tool_calls`, and `tool` results with their `tool_call_id`.

use serde_json::{Value, json};

use crate::api::errors::ApiError;
use crate::api::openai_types::{ChatCompletionRequest, ChatMessageIn, ToolDefinition};
use crate::model::chat_template::ChatMessage as TemplateMessage;

/// The messages as the template sees them. Call arguments arrive as JSON text and are given
/// to the template parsed (empty: `{}`), as vLLM and Hugging Face templates expect.
/// Shared by chat and `/tokenize`, so both render the same prompt.
pub fn template_messages(messages: &[ChatMessageIn]) -> Result<Vec<TemplateMessage>, ApiError> {
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let tool_calls = match &m.tool_calls {
                None => None,
                Some(calls) => Some(
                    calls
                        .iter()
                        .enumerate()
                        .map(|(j, call)| {
                            let arguments = if call.function.arguments.trim().is_empty() {
                                json!({})
                            } else {
                                serde_json::from_str::<Value>(&call.function.arguments).map_err(|e| {
                                    ApiError::invalid(
                                        format!("messages[{i}].tool_calls[{j}].function.arguments"),
                                        format!("arguments must be JSON text: {e}"),
                                    )
                                })?
                            };
                            Ok(json!({
                                "id": call.id,
                                "type": call.kind,
                                "function": {"name": call.function.name, "arguments": arguments},
                            }))
                        })
                        .collect::<Result<Vec<_>, ApiError>>()?,
                ),
            };
            Ok(TemplateMessage {
                role: m.role.as_str().to_owned(),
                content: m.text(i)?,
                name: m.name.clone(),
                tool_calls,
                tool_call_id: m.tool_call_id.clone(),
            })
        })
        .collect()
}

/// `tools` for the template: each `{"type": "function", "function": {...}}`.
pub fn template_tools(tools: Option<&[ToolDefinition]>) -> Option<Vec<Value>> {
    let tools = tools?;
    Some(tools.iter().filter_map(|t| serde_json::to_value(t).ok()).collect())
}

/// Bytes of the tools and call arguments a request adds to the prompt, for the prompt limit.
pub fn tools_bytes(request: &ChatCompletionRequest) -> usize {
    let tools = request
        .tools
        .as_ref()
        .map_or(0, |t| serde_json::to_vec(t).map_or(0, |v| v.len()));
    let arguments: usize = request
        .messages
        .iter()
        .flat_map(|m| m.tool_calls.iter().flatten())
        .map(|c| c.function.arguments.len() + c.function.name.len())
        .sum();
    tools + arguments
}
