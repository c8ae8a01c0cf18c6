//! Tool calling in chat: the reading of the generated text back into OpenAI `tool_calls`,
//! whole or streamed (vLLM's serving_chat). Which `tool_choice` a request resolves to, and the
//! output constraint of `required` and named choices, are validation's (`validation::tools`).

mod call_head;
mod hermes;
mod json_scan;
mod output;
mod streaming;
mod template_inputs;

pub use output::{ShapedOutput, shape_output};
pub use streaming::{StreamPiece, ToolStream};
pub use template_inputs::{template_messages, template_tools, tools_bytes};

pub use crate::config::ToolCallParser;

/// How a choice's generated text is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolOutput {
    Text,
    Parsed(ToolCallParser),
    Required,
    Named(String),
}

/// A fresh tool-call id, as vLLM spells them.
pub fn new_tool_call_id() -> String {
    format!("chatcmpl-tool-{}", uuid::Uuid::new_v4().simple())
}

#[cfg(test)]
mod tests;
