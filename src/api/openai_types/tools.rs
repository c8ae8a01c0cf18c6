//! Tool-calling wire types of the chat API: the `tools` a request offers, its `tool_choice`,
//! and the `tool_calls` of assistant messages (sent back in later requests, returned in
//! responses, streamed as deltas), shaped as OpenAI's.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One entry of `tools`; only `type: "function"` exists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolDefinition {
    /// Always `"function"`.
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionDefinition,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FunctionDefinition {
    #[schema(min_length = 1)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The arguments as a JSON Schema object; absent: no arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub parameters: Option<serde_json::Value>,
    /// Accepted; `required` and named choices are always held to the schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// `tool_choice`: a mode, or one function by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(
    untagged,
    expecting = "field `tool_choice` must be \"none\", \"auto\", \"required\" or \
                 {\"type\": \"function\", \"function\": {\"name\": ...}}"
)]
pub enum ToolChoice {
    Mode(ToolChoiceMode),
    Named(NamedToolChoice),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ToolChoiceMode {
    /// Never call a tool (the template still sees the tools, as vLLM renders them).
    None,
    /// The model decides; needs `--enable-auto-tool-choice` and `--tool-call-parser`.
    Auto,
    /// At least one call, held to the tools' schemas.
    Required,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct NamedToolChoice {
    /// Always `"function"`.
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionName,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FunctionName {
    pub name: String,
}

/// One call of a function, in an assistant message (request or response).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolCall {
    pub id: String,
    /// Always `"function"`.
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionCall,
}

impl ToolCall {
    pub fn function(id: String, name: String, arguments: String) -> Self {
        Self {
            id,
            kind: "function".to_owned(),
            function: FunctionCall { name, arguments },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FunctionCall {
    pub name: String,
    /// The arguments as a JSON text (an object).
    pub arguments: String,
}

/// A piece of a streamed tool call: the first carries `id`, `type`, `function.name` and the
/// first `arguments` text (maybe empty), later ones only `index` and more `function.arguments`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DeltaToolCall {
    /// The call's position among the choice's calls.
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub function: DeltaFunctionCall,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DeltaFunctionCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

impl DeltaToolCall {
    /// The opening piece of call `index`.
    pub fn opening(index: u32, id: String, name: String) -> Self {
        Self {
            index,
            id: Some(id),
            kind: Some("function".to_owned()),
            function: DeltaFunctionCall {
                name: Some(name),
                arguments: Some(String::new()),
            },
        }
    }

    /// More arguments text of call `index`.
    pub fn arguments(index: u32, arguments: String) -> Self {
        Self {
            index,
            id: None,
            kind: None,
            function: DeltaFunctionCall {
                name: None,
                arguments: Some(arguments),
            },
        }
    }
}
