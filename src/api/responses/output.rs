//! The Responses API's objects: the response (whole, and as the stream's snapshots), its
//! output items (`message` with `output_text`, `function_call`) and its usage.

use serde_json::{Value, json};

use super::request::Echo;
use crate::api::openai_types::Usage;
use crate::api::pipeline::ResponseHead;

/// Fresh item ids, as OpenAI spells them.
pub fn message_id() -> String {
    format!("msg_{}", uuid::Uuid::new_v4().simple())
}

pub fn function_call_id() -> String {
    format!("fc_{}", uuid::Uuid::new_v4().simple())
}

/// An assistant message item with one `output_text` part.
pub fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({
        "type": "message",
        "id": id,
        "status": status,
        "role": "assistant",
        "content": [output_text(text)],
    })
}

pub fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// A `function_call` item.
pub fn function_call_item(id: &str, call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({
        "type": "function_call",
        "id": id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    })
}

/// Usage as the Responses API words it (cached prompt tokens under `input_tokens_details`).
pub fn usage_object(usage: &Usage) -> Value {
    json!({
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.prompt_tokens_details.cached_tokens,
            "cache_write_tokens": 0,
        },
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    })
}

/// How a response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    InProgress,
    Completed,
    /// Cut by `max_output_tokens` (or the context).
    Incomplete,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "in_progress",
            Status::Completed => "completed",
            Status::Incomplete => "incomplete",
        }
    }
}

/// The response object.
pub fn response_object(
    head: &ResponseHead,
    echo: &Echo,
    status: Status,
    output: Vec<Value>,
    usage: Option<&Usage>,
) -> Value {
    json!({
        "id": head.id,
        "object": "response",
        "created_at": head.created,
        "model": head.model,
        "status": status.as_str(),
        "incomplete_details": (status == Status::Incomplete).then(|| json!({"reason": "max_output_tokens"})),
        "error": null,
        "instructions": echo.instructions,
        "output": output,
        "tools": echo.tools,
        "tool_choice": echo.tool_choice,
        "parallel_tool_calls": echo.parallel_tool_calls,
        "text": echo.text,
        "temperature": echo.temperature,
        "top_p": echo.top_p,
        "max_output_tokens": echo.max_output_tokens,
        "previous_response_id": null,
        "store": false,
        "truncation": "disabled",
        "metadata": echo.metadata,
        "user": echo.user,
        "usage": usage.map(usage_object),
    })
}
