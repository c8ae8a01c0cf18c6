//! `POST /v1/responses` bodies (OpenAI's Responses API, stateless) and their translation
//! into the chat request the pipeline serves: `instructions` and `input` become messages,
//! `function_call` and `function_call_output` items become an assistant's `tool_calls` and
//! `tool` messages, flat function tools become chat's, `text.format` becomes
//! `response_format`, `max_output_tokens` becomes `max_completion_tokens`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use crate::api::errors::ApiError;
use crate::api::json_body::{RequestBody, parse_tracked};
use crate::api::openai_types::{ChatCompletionRequest, CommonFields};

/// Body of `POST /v1/responses`: its own fields and the group every generation body shares,
/// flattened. Fields this server does not act on (`reasoning`, `include`, `truncation`, ...)
/// are accepted and ignored, as by the chat endpoints.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ResponsesRequest {
    /// A user message as a string, or a list of items: messages (`role`, `content` as text
    /// or `input_text`/`output_text` parts), `function_call` and `function_call_output`.
    #[schema(value_type = Value)]
    pub input: Value,
    /// A system message before `input`.
    #[serde(default)]
    pub instructions: Option<String>,
    /// Function tools: `{"type": "function", "name", "description", "parameters", "strict"}`.
    #[serde(default)]
    #[schema(value_type = Option<Vec<Object>>)]
    pub tools: Option<Vec<Value>>,
    /// `"none"`, `"auto"`, `"required"` or `{"type": "function", "name": ...}`.
    #[serde(default)]
    #[schema(value_type = Option<Value>)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// `{"format": {"type": "text" | "json_object" | "json_schema", "name", "schema", "strict"}}`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub text: Option<Value>,
    #[serde(default)]
    #[schema(minimum = 1)]
    pub max_output_tokens: Option<u32>,
    /// Responses are not kept: `store` is answered `false` whatever is sent.
    #[serde(default)]
    pub store: Option<bool>,
    /// Refused (400): this server keeps no responses to continue from.
    #[serde(default)]
    pub previous_response_id: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    /// `stream`: the Responses API's events (`response.created` ... `response.completed`).
    #[serde(flatten)]
    #[schema(inline)]
    pub common: CommonFields,
}

impl RequestBody for ResponsesRequest {
    fn check_groups(text: &str) -> Result<(), ApiError> {
        parse_tracked::<CommonFields>(text).map(drop)
    }
}

/// What a response repeats of its request.
#[derive(Debug, Clone, PartialEq)]
pub struct Echo {
    pub instructions: Option<String>,
    pub tools: Vec<Value>,
    pub tool_choice: Value,
    pub parallel_tool_calls: bool,
    pub text: Value,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub max_output_tokens: Option<u32>,
    pub metadata: Value,
    pub user: Option<String>,
}

impl ResponsesRequest {
    /// The chat request this body comes to, and what its response repeats. 400s name the
    /// Responses field.
    pub fn into_chat(self) -> Result<(ChatCompletionRequest, Echo), ApiError> {
        if self.previous_response_id.is_some() {
            return Err(ApiError::invalid(
                "previous_response_id",
                "this server keeps no responses (`store` is off): send the whole conversation in `input`",
            ));
        }
        let objects = [("metadata", self.metadata.as_ref()), ("text", self.text.as_ref())];
        for (field, value) in objects {
            if value.is_some_and(|v| !v.is_object() && !v.is_null()) {
                return Err(ApiError::invalid(field, format!("`{field}` must be an object")));
            }
        }
        if self.max_output_tokens == Some(0) {
            return Err(ApiError::invalid(
                "max_output_tokens",
                "`max_output_tokens` must be at least 1",
            ));
        }
        let mut messages = Vec::new();
        if let Some(instructions) = &self.instructions {
            messages.push(json!({"role": "system", "content": instructions}));
        }
        input_messages(&self.input, &mut messages)?;
        let mut chat = Map::new();
        chat.insert("messages".into(), Value::Array(messages));
        let tools = self.tools.clone().unwrap_or_default();
        if !tools.is_empty() {
            chat.insert("tools".into(), Value::Array(chat_tools(&tools)?));
        }
        if let Some(choice) = &self.tool_choice {
            chat.insert("tool_choice".into(), chat_tool_choice(choice)?);
        }
        if let Some(format) = self.text.as_ref().and_then(|t| t.get("format"))
            && let Some(format) = response_format(format)?
        {
            chat.insert("response_format".into(), format);
        }
        let mut chat: ChatCompletionRequest =
            serde_json::from_value(Value::Object(chat)).map_err(|e| ApiError::invalid("input", e.to_string()))?;
        chat.max_completion_tokens = self.max_output_tokens;
        chat.parallel_tool_calls = self.parallel_tool_calls;
        chat.common = self.common.clone();
        let echo = Echo {
            instructions: self.instructions,
            tools,
            tool_choice: self.tool_choice.unwrap_or_else(|| json!("auto")),
            parallel_tool_calls: self.parallel_tool_calls.unwrap_or(true),
            text: self.text.unwrap_or_else(|| json!({"format": {"type": "text"}})),
            temperature: self.common.temperature,
            top_p: self.common.top_p,
            max_output_tokens: self.max_output_tokens,
            metadata: self.metadata.unwrap_or_else(|| json!({})),
            user: self.common.user,
        };
        Ok((chat, echo))
    }
}

/// `input` as chat messages, appended to `messages`.
fn input_messages(input: &Value, messages: &mut Vec<Value>) -> Result<(), ApiError> {
    let items = match input {
        Value::String(text) => {
            messages.push(json!({"role": "user", "content": text}));
            return Ok(());
        }
        Value::Array(items) => items,
        _ => {
            return Err(ApiError::invalid(
                "input",
                "`input` must be a string or a list of items",
            ));
        }
    };
    for (i, item) in items.iter().enumerate() {
        let field = |name: &str| item.get(name).and_then(Value::as_str);
        let required = |name: &str| {
            field(name).ok_or_else(|| ApiError::invalid(format!("input[{i}].{name}"), format!("`{name}` is required")))
        };
        match field("type").unwrap_or("message") {
            "message" => {
                let role = match required("role")? {
                    "developer" => "system",
                    role @ ("system" | "user" | "assistant") => role,
                    other => {
                        return Err(ApiError::invalid(
                            format!("input[{i}].role"),
                            format!("role `{other}` is not supported"),
                        ));
                    }
                };
                messages.push(json!({"role": role, "content": message_text(item.get("content"), i)?}));
            }
            "function_call" => {
                let call = json!({"id": required("call_id")?, "type": "function",
                    "function": {"name": required("name")?, "arguments": field("arguments").unwrap_or("{}")}});
                // Calls after an assistant turn (text or calls) belong to it.
                match messages.last_mut() {
                    Some(last) if last["role"] == "assistant" => match last.get_mut("tool_calls") {
                        Some(Value::Array(calls)) => calls.push(call),
                        _ => {
                            last["tool_calls"] = json!([call]);
                        }
                    },
                    _ => messages.push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
                }
            }
            "function_call_output" => {
                let output = match item.get("output") {
                    Some(Value::String(text)) => text.clone(),
                    Some(other) => other.to_string(),
                    None => return Err(ApiError::invalid(format!("input[{i}].output"), "`output` is required")),
                };
                messages.push(json!({"role": "tool", "tool_call_id": required("call_id")?, "content": output}));
            }
            other => {
                return Err(ApiError::invalid(
                    format!("input[{i}].type"),
                    format!("input items of type `{other}` are not supported"),
                ));
            }
        }
    }
    Ok(())
}

/// A message's content as text: a string, or its text parts joined by `\n`.
fn message_text(content: Option<&Value>, i: usize) -> Result<String, ApiError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (j, part) in parts.iter().enumerate() {
                let kind = part.get("type").and_then(Value::as_str).unwrap_or_default();
                match (kind, part.get("text").and_then(Value::as_str)) {
                    ("input_text" | "output_text" | "text", Some(text)) => texts.push(text),
                    _ => {
                        return Err(ApiError::invalid(
                            format!("input[{i}].content[{j}]"),
                            format!("only text parts are supported; got `{kind}`"),
                        ));
                    }
                }
            }
            Ok(texts.join("\n"))
        }
        Some(_) => Err(ApiError::invalid(
            format!("input[{i}].content"),
            "`content` must be a string or a list of parts",
        )),
    }
}

/// Flat function tools as chat's `{"type": "function", "function": {...}}`.
fn chat_tools(tools: &[Value]) -> Result<Vec<Value>, ApiError> {
    tools
        .iter()
        .enumerate()
        .map(|(i, tool)| {
            if !tool.is_object() {
                return Err(ApiError::invalid(format!("tools[{i}]"), "a tool must be an object"));
            }
            let kind = tool.get("type").and_then(Value::as_str).unwrap_or_default();
            if kind != "function" {
                return Err(ApiError::invalid(
                    format!("tools[{i}].type"),
                    format!("tool type `{kind}` is not supported; only `function` is"),
                ));
            }
            let mut function = Map::new();
            for key in ["name", "description", "parameters", "strict"] {
                if let Some(value) = tool.get(key).filter(|v| !v.is_null()) {
                    function.insert(key.into(), value.clone());
                }
            }
            Ok(json!({"type": "function", "function": function}))
        })
        .collect()
}

fn chat_tool_choice(choice: &Value) -> Result<Value, ApiError> {
    match choice {
        Value::String(_) => Ok(choice.clone()),
        Value::Object(named) if named.get("type").and_then(Value::as_str) == Some("function") => {
            let name = named.get("name").cloned().unwrap_or(Value::Null);
            Ok(json!({"type": "function", "function": {"name": name}}))
        }
        _ => Err(ApiError::invalid(
            "tool_choice",
            "`tool_choice` must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": ...}",
        )),
    }
}

/// `text.format` as chat's `response_format` (`None` for plain text).
fn response_format(format: &Value) -> Result<Option<Value>, ApiError> {
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "json_object"}))),
        Some("json_schema") => {
            let mut schema = Map::new();
            schema.insert(
                "name".into(),
                format.get("name").cloned().unwrap_or_else(|| json!("response")),
            );
            for key in ["description", "schema", "strict"] {
                if let Some(value) = format.get(key).filter(|v| !v.is_null()) {
                    schema.insert(key.into(), value.clone());
                }
            }
            Ok(Some(json!({"type": "json_schema", "json_schema": schema})))
        }
        _ => Err(ApiError::invalid(
            "text.format.type",
            "`text.format.type` must be \"text\", \"json_object\" or \"json_schema\"",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: Value) -> ResponsesRequest {
        serde_json::from_value(body).expect("request")
    }

    #[test]
    fn items_become_messages_calls_and_results() {
        let (chat, echo) = request(json!({
            "instructions": "Be brief.",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
                {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{\"city\":\"Oslo\"}"},
                {"type": "function_call", "call_id": "c2", "name": "t", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                {"type": "message", "role": "developer", "content": "then answer"},
            ],
            "tools": [{"type": "function", "name": "w", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "w"},
            "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
            "max_output_tokens": 9,
        }))
        .into_chat()
        .expect("chat");
        let wire = serde_json::to_value(&chat).unwrap();
        let roles: Vec<&str> = wire["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "system"]);
        assert_eq!(wire["messages"][1]["content"], "weather?");
        let calls = &wire["messages"][2]["tool_calls"];
        assert_eq!(
            (calls[0]["id"].as_str(), calls[1]["function"]["name"].as_str()),
            (Some("c1"), Some("t"))
        );
        assert_eq!(wire["messages"][3]["tool_call_id"], "c1");
        assert_eq!(wire["tools"][0]["function"]["name"], "w");
        assert_eq!(
            wire["tool_choice"],
            json!({"type": "function", "function": {"name": "w"}})
        );
        assert_eq!(wire["response_format"]["json_schema"]["name"], "x");
        assert_eq!(chat.max_completion_tokens, Some(9));
        assert_eq!(echo.tool_choice, json!({"type": "function", "name": "w"}));
        assert!(echo.parallel_tool_calls);
    }

    #[test]
    fn what_cannot_be_served_is_a_400_naming_the_field() {
        for (body, param) in [
            (
                json!({"input": "hi", "previous_response_id": "resp_1"}),
                "previous_response_id",
            ),
            (json!({"input": 3}), "input"),
            (json!({"input": [{"type": "reasoning"}]}), "input[0].type"),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}),
                "input[0].content[0]",
            ),
            (
                json!({"input": "hi", "tools": [{"type": "web_search"}]}),
                "tools[0].type",
            ),
            (
                json!({"input": "hi", "text": {"format": {"type": "yaml"}}}),
                "text.format.type",
            ),
        ] {
            match request(body.clone()).into_chat() {
                Err(ApiError::InvalidParameter { param: p, .. }) => assert_eq!(p, param, "{body}"),
                other => panic!("{body}: {other:?}"),
            }
        }
    }
}
