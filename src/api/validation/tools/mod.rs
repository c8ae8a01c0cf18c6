//! `tools`, `tool_choice` and `parallel_tool_calls`: what a chat request's tool fields come
//! to (as vLLM resolves them), whether the server can serve that, and the output constraint
//! that holds `required` and named choices to the tools' schemas.

mod schema;

use crate::api::errors::ApiError;
use crate::api::openai_types::{ChatCompletionRequest, StructuredOutputsParam, ToolChoice, ToolChoiceMode};
use crate::api::tool_calls::{ToolCallParser, ToolOutput};
use crate::engine::structured_output::StructuredOutput;

/// What a request's `tools` and `tool_choice` come to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoicePlan {
    /// No tools, or `tool_choice: none`: plain text.
    None,
    /// The model decides; its text is parsed for calls.
    Auto,
    /// At least one call (at most one unless `parallel`), held to the schemas.
    Required { parallel: bool },
    /// Exactly one call of this function; the output is its arguments.
    Named(String),
}

impl ToolChoicePlan {
    /// Validates `tools`, `tool_choice` and `parallel_tool_calls` (400s naming the field).
    /// Absent `tool_choice` is `auto` when tools are sent, else `none`, as in vLLM.
    pub fn of(request: &ChatCompletionRequest) -> Result<Self, ApiError> {
        let tools = request.tools.as_deref().unwrap_or_default();
        for (i, tool) in tools.iter().enumerate() {
            if tool.kind != "function" {
                return Err(ApiError::invalid(
                    format!("tools[{i}].type"),
                    format!("tool type `{}` is not supported; only `function` is", tool.kind),
                ));
            }
            if tool.function.name.is_empty() {
                return Err(ApiError::invalid(
                    format!("tools[{i}].function.name"),
                    "a function needs a non-empty name",
                ));
            }
            if tool.function.parameters.as_ref().is_some_and(|p| !p.is_object()) {
                return Err(ApiError::invalid(
                    format!("tools[{i}].function.parameters"),
                    "parameters must be a JSON Schema object",
                ));
            }
        }
        let needs_tools = || {
            if tools.is_empty() {
                Err(ApiError::invalid(
                    "tool_choice",
                    "when `tool_choice` is not `none`, `tools` must list at least one function",
                ))
            } else {
                Ok(())
            }
        };
        match &request.tool_choice {
            None if tools.is_empty() => Ok(ToolChoicePlan::None),
            None => Ok(ToolChoicePlan::Auto),
            Some(ToolChoice::Mode(ToolChoiceMode::None)) => Ok(ToolChoicePlan::None),
            Some(ToolChoice::Mode(ToolChoiceMode::Auto)) => needs_tools().map(|()| ToolChoicePlan::Auto),
            Some(ToolChoice::Mode(ToolChoiceMode::Required)) => needs_tools().map(|()| ToolChoicePlan::Required {
                parallel: request.parallel_tool_calls.unwrap_or(true),
            }),
            Some(ToolChoice::Named(named)) => {
                if named.kind != "function" {
                    return Err(ApiError::invalid(
                        "tool_choice.type",
                        format!("tool type `{}` is not supported; only `function` is", named.kind),
                    ));
                }
                let name = &named.function.name;
                if !tools.iter().any(|t| &t.function.name == name) {
                    return Err(ApiError::invalid(
                        "tool_choice",
                        format!("tool `{name}` has not been passed in `tools`"),
                    ));
                }
                Ok(ToolChoicePlan::Named(name.clone()))
            }
        }
    }

    /// The output constraint of `required` and named choices; `None` otherwise.
    pub fn constraint(&self, request: &ChatCompletionRequest) -> Result<Option<StructuredOutput>, ApiError> {
        let tools = request.tools.as_deref().unwrap_or_default();
        let strict = StructuredOutputsParam::strict_schemas(request.constraints.structured_outputs.as_ref());
        let schema = match self {
            ToolChoicePlan::None | ToolChoicePlan::Auto => return Ok(None),
            ToolChoicePlan::Required { parallel } => schema::required_calls(tools, *parallel, strict)?,
            ToolChoicePlan::Named(name) => schema::named_call(tools, name, strict),
        };
        Ok(Some(StructuredOutput::Tool(schema.to_string())))
    }

    /// `auto` needs a parser (`--enable-auto-tool-choice --tool-call-parser NAME`).
    pub fn check_served(&self, parser: Option<ToolCallParser>) -> Result<(), ApiError> {
        if *self == ToolChoicePlan::Auto && parser.is_none() {
            return Err(ApiError::invalid(
                "tool_choice",
                "\"auto\" tool choice requires the server to run with --enable-auto-tool-choice and \
                 --tool-call-parser",
            ));
        }
        Ok(())
    }

    /// How the generated text is read back.
    pub fn output(&self, parser: Option<ToolCallParser>) -> ToolOutput {
        match (self, parser) {
            (ToolChoicePlan::Auto, Some(parser)) => ToolOutput::Parsed(parser),
            (ToolChoicePlan::None | ToolChoicePlan::Auto, _) => ToolOutput::Text,
            (ToolChoicePlan::Required { .. }, _) => ToolOutput::Required,
            (ToolChoicePlan::Named(name), _) => ToolOutput::Named(name.clone()),
        }
    }
}

#[cfg(test)]
mod tests;
