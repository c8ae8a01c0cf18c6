//! The Hermes tool-call format (vLLM's `hermes` parser): calls are JSON objects
//! `{"name": ..., "arguments": {...}}` between `<tool_call>` and `</tool_call>`; text before
//! the first call is the message's content.

use serde::Deserialize;

pub const START: &str = "<tool_call>";
pub const END: &str = "</tool_call>";

/// One call as the model wrote it.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedCall {
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
}

#[derive(Deserialize)]
struct HermesCall {
    name: String,
    #[serde(default)]
    arguments: Option<serde_json::Value>,
}

/// One call's JSON, between the tags; `None` when it is not a call.
pub fn parse_call(json: &str) -> Option<ParsedCall> {
    let call: HermesCall = serde_json::from_str(json.trim()).ok()?;
    let arguments = match call.arguments {
        None | Some(serde_json::Value::Null) => "{}".to_owned(),
        Some(value) => value.to_string(),
    };
    Some(ParsedCall {
        name: call.name,
        arguments,
    })
}

/// The text before the first call and every call. No calls when there is no `<tool_call>`
/// or when any call is malformed: then the whole text is content, as vLLM returns it.
pub fn parse(text: &str) -> (Option<String>, Vec<ParsedCall>) {
    let Some(first) = text.find(START) else {
        return (Some(text.to_owned()), Vec::new());
    };
    let mut calls = Vec::new();
    let mut rest = &text[first..];
    while let Some(start) = rest.find(START) {
        let body = &rest[start + START.len()..];
        // An unterminated last call runs to the end (the output was cut or the model
        // stopped at its end-of-turn token).
        let (json, after) = match body.find(END) {
            Some(end) => (&body[..end], &body[end + END.len()..]),
            None => (body, ""),
        };
        match parse_call(json) {
            Some(call) => calls.push(call),
            None => return (Some(text.to_owned()), Vec::new()),
        }
        rest = after;
    }
    let content = &text[..first];
    ((!content.is_empty()).then(|| content.to_owned()), calls)
}
