//! Tool-call parsing and stream deltas, without an engine.

use serde_json::{Value, json};

use super::*;
use crate::api::errors::ApiError;
use crate::api::openai_types::{ChatCompletionRequest, DeltaToolCall};

/// A chat body with two tools and these messages.
fn with_tools(messages: Value) -> ChatCompletionRequest {
    serde_json::from_value(json!({
        "messages": messages,
        "tools": [
            {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "get_time"}},
        ],
    }))
    .expect("request parses")
}

#[test]
fn hermes_text_is_read_into_calls() {
    let text = "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>";
    let (content, calls) = hermes::parse(text);
    assert_eq!(content.as_deref(), Some("Let me check."));
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].name, "get_weather");
    assert_eq!(
        serde_json::from_str::<Value>(&calls[0].arguments).unwrap(),
        json!({"city": "Paris"})
    );
    assert_eq!(calls[1].arguments, "{}");
    // No tag: all content. A malformed call: all content, no calls (as vLLM).
    assert_eq!(hermes::parse("just text"), (Some("just text".into()), vec![]));
    let malformed = "<tool_call>{\"name\": oops}</tool_call>";
    assert_eq!(hermes::parse(malformed), (Some(malformed.into()), vec![]));
    // An unterminated last call runs to the end.
    let (content, calls) = hermes::parse("<tool_call>{\"name\": \"get_time\", \"arguments\": {}}");
    assert_eq!((content, calls.len()), (None, 1));
}

#[test]
fn whole_outputs_are_shaped_as_openai_messages() {
    let hermes = ToolOutput::Parsed(ToolCallParser::Hermes);
    let shaped = shape_output(
        &hermes,
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}</tool_call>".into(),
    );
    assert!(shaped.tool_calls_finish);
    assert_eq!(shaped.message.content, None);
    let call = &shaped.message.tool_calls[0];
    assert!(call.id.starts_with("chatcmpl-tool-"), "{}", call.id);
    assert_eq!(call.kind, "function");
    assert_eq!(call.function.name, "get_weather");
    assert_eq!(call.function.arguments, r#"{"city":"Oslo"}"#);
    let wire = serde_json::to_value(&shaped.message).unwrap();
    assert_eq!(wire["content"], Value::Null, "null content is sent, as OpenAI does");
    assert!(wire["tool_calls"][0]["function"]["arguments"].is_string());

    let plain = shape_output(&hermes, "no calls".into());
    assert!(!plain.tool_calls_finish);
    assert_eq!(plain.message.content.as_deref(), Some("no calls"));
    let wire = serde_json::to_value(&plain.message).unwrap();
    assert_eq!(wire.get("tool_calls"), None);

    let required = shape_output(
        &ToolOutput::Required,
        r#"[{"name": "get_weather", "parameters": {"city": "Rome"}}, {"name": "get_time", "parameters": {}}]"#.into(),
    );
    assert!(required.tool_calls_finish);
    assert_eq!(required.message.tool_calls.len(), 2);
    assert_eq!(required.message.tool_calls[0].function.arguments, r#"{"city":"Rome"}"#);
    assert_ne!(required.message.tool_calls[0].id, required.message.tool_calls[1].id);
    let cut = shape_output(&ToolOutput::Required, r#"[{"name": "get_we"#.into());
    assert!(!cut.tool_calls_finish);
    assert_eq!(cut.message.content.as_deref(), Some(r#"[{"name": "get_we"#));
    // Parallel calls cut by max_tokens: the complete ones are kept, the cut one dropped.
    let cut = shape_output(
        &ToolOutput::Required,
        r#"[{"name": "get_time", "parameters": {}}, {"name": "get_weather", "parameters": {"city": "Rome"}}, {"name": "get_weather", "parameters": {"ci"#.into(),
    );
    let calls: Vec<_> = cut
        .message
        .tool_calls
        .iter()
        .map(|c| c.function.arguments.as_str())
        .collect();
    assert_eq!(calls, ["{}", r#"{"city":"Rome"}"#]);
    assert_eq!(cut.message.content, None);

    let named = shape_output(&ToolOutput::Named("get_weather".into()), r#"{"city": "Lima"}"#.into());
    assert!(!named.tool_calls_finish, "a named choice finishes as stop");
    assert_eq!(named.message.tool_calls[0].function.name, "get_weather");
    assert_eq!(named.message.tool_calls[0].function.arguments, r#"{"city": "Lima"}"#);
}

/// Feeds `text` in pieces of `step` bytes (on char boundaries) and gathers the deltas.
fn stream_all(output: ToolOutput, text: &str, step: usize) -> (String, Vec<DeltaToolCall>, bool) {
    let mut stream = ToolStream::new(output);
    let (mut content, mut calls) = (String::new(), Vec::new());
    let chars: Vec<char> = text.chars().collect();
    let mut take = |piece: StreamPiece| {
        let mut indexes: Vec<u32> = piece.calls.iter().map(|c| c.index).collect();
        indexes.dedup();
        assert_eq!(
            indexes.len(),
            piece.calls.len(),
            "one entry per index per delta: {piece:?}"
        );
        content.push_str(&piece.content);
        calls.extend(piece.calls);
    };
    for chunk in chars.chunks(step) {
        take(stream.push(&chunk.iter().collect::<String>()));
    }
    take(stream.finish());
    (content, calls, stream.tool_calls_finish())
}

/// The calls the deltas add up to: (index, id, name, arguments).
fn assemble(deltas: &[DeltaToolCall]) -> Vec<(u32, String, String, String)> {
    let mut calls: Vec<(u32, String, String, String)> = Vec::new();
    for d in deltas {
        if let Some(id) = &d.id {
            assert_eq!(d.kind.as_deref(), Some("function"));
            assert_eq!(d.index as usize, calls.len(), "calls are numbered in order");
            calls.push((
                d.index,
                id.clone(),
                d.function.name.clone().expect("name"),
                d.function
                    .arguments
                    .clone()
                    .expect("the opening entry has arguments, maybe empty"),
            ));
        } else {
            assert_eq!(d.function.name, None);
            let call = calls.iter_mut().find(|c| c.0 == d.index).expect("opened before");
            call.3.push_str(d.function.arguments.as_deref().unwrap_or(""));
        }
    }
    calls
}

#[test]
fn hermes_streams_content_then_calls_whatever_the_chunking() {
    let text = "Sure.<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich <x>\"}}</tool_call>\n<tool_call>{\"name\": \"get_time\"}</tool_call>";
    for step in [1, 2, 3, 7, 1000] {
        let (content, deltas, finish) = stream_all(ToolOutput::Parsed(ToolCallParser::Hermes), text, step);
        assert_eq!(content, "Sure.", "step {step}");
        assert!(finish);
        let calls = assemble(&deltas);
        assert_eq!(calls.len(), 2, "step {step}");
        assert_eq!(calls[0].2, "get_weather");
        assert_eq!(
            serde_json::from_str::<Value>(&calls[0].3).unwrap(),
            json!({"city": "Zürich <x>"})
        );
        assert_eq!((calls[1].2.as_str(), calls[1].3.as_str()), ("get_time", "{}"));
        if step < 10 {
            assert!(
                argument_deltas(&deltas, 0) > 1,
                "step {step}: the arguments arrive as they are generated"
            );
        }
    }
    // Keys in another order: the call is read whole once it closes.
    let reversed = "<tool_call>{\"arguments\": {\"city\": \"Oslo\"}, \"name\": \"get_weather\"}</tool_call>";
    let (_, deltas, finish) = stream_all(ToolOutput::Parsed(ToolCallParser::Hermes), reversed, 3);
    let calls = assemble(&deltas);
    assert!(finish);
    assert_eq!((calls.len(), calls[0].2.as_str()), (1, "get_weather"));
    assert_eq!(
        serde_json::from_str::<Value>(&calls[0].3).unwrap(),
        json!({"city": "Oslo"})
    );
    // Cut short inside the arguments: what came of them has been sent, under the opened call.
    let cut = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Os";
    let (content, deltas, _) = stream_all(ToolOutput::Parsed(ToolCallParser::Hermes), cut, 2);
    let calls = assemble(&deltas);
    assert_eq!((content.as_str(), calls.len()), ("", 1));
    assert_eq!(calls[0].3, "{\"city\": \"Os");
    // Text with a lone `<` that never becomes a tag is all content, in order.
    let (content, deltas, finish) = stream_all(ToolOutput::Parsed(ToolCallParser::Hermes), "a < b <tool", 1);
    assert_eq!((content.as_str(), deltas.len(), finish), ("a < b <tool", 0, false));
    // A malformed call comes back as the text it was.
    let bad = "<tool_call>{oops}</tool_call>";
    let (content, deltas, finish) = stream_all(ToolOutput::Parsed(ToolCallParser::Hermes), bad, 4);
    assert_eq!((content.as_str(), deltas.len(), finish), (bad, 0, false));
}

/// How many deltas carried arguments of call `index`.
fn argument_deltas(deltas: &[DeltaToolCall], index: u32) -> usize {
    deltas
        .iter()
        .filter(|d| {
            d.index == index && d.id.is_none() && d.function.arguments.as_deref().is_some_and(|a| !a.is_empty())
        })
        .count()
}

#[test]
fn required_streams_each_call_as_it_comes() {
    let text =
        r#" [{"name": "get_weather", "parameters": {"city": "a}\"]b"}}, {"name": "get_time", "parameters": {}}]"#;
    for step in [1, 5, 1000] {
        let (content, deltas, finish) = stream_all(ToolOutput::Required, text, step);
        assert_eq!(content, "");
        assert!(finish);
        let calls = assemble(&deltas);
        assert_eq!(calls.len(), 2, "step {step}");
        assert_eq!(
            serde_json::from_str::<Value>(&calls[0].3).unwrap(),
            json!({"city": "a}\"]b"})
        );
        assert_eq!(calls[1].3, "{}");
        if step < 10 {
            assert!(argument_deltas(&deltas, 0) > 1, "step {step}: arguments as they come");
        }
    }
    let (content, deltas, finish) = stream_all(ToolOutput::Required, "not json", 3);
    assert_eq!((content.as_str(), deltas.len(), finish), ("not json", 0, false));
}

#[test]
fn named_streams_arguments_as_they_come() {
    let (content, deltas, finish) = stream_all(ToolOutput::Named("get_weather".into()), r#"{"city": "Oslo"}"#, 4);
    assert_eq!(content, "");
    assert!(!finish, "a named choice finishes as stop");
    let calls = assemble(&deltas);
    assert_eq!(calls.len(), 1);
    assert_eq!(
        (calls[0].2.as_str(), calls[0].3.as_str()),
        ("get_weather", r#"{"city": "Oslo"}"#)
    );
    assert!(deltas.len() > 2, "arguments arrive in several deltas");
    // The first text goes out with the opening, in one entry (the issue's reproduction).
    let mut stream = ToolStream::new(ToolOutput::Named("w".into()));
    let piece = stream.push("{\"");
    assert_eq!(piece.calls.len(), 1, "{piece:?}");
    assert!(piece.calls[0].id.is_some());
    assert_eq!(piece.calls[0].function.name.as_deref(), Some("w"));
    assert_eq!(piece.calls[0].function.arguments.as_deref(), Some("{\""));
}

#[test]
fn text_output_passes_through() {
    let (content, deltas, finish) = stream_all(ToolOutput::Text, "<tool_call>{}</tool_call>", 3);
    assert_eq!(
        (content.as_str(), deltas.len(), finish),
        ("<tool_call>{}</tool_call>", 0, false)
    );
}

#[test]
fn template_inputs_carry_tools_calls_and_results() {
    let req = with_tools(json!([
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
            {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]));
    let messages = template_messages(&req.messages).expect("messages");
    assert_eq!(messages[1].content, "");
    let calls = messages[1].tool_calls.as_ref().expect("calls");
    assert_eq!(calls[0]["function"]["arguments"], json!({"city": "Oslo"}));
    assert_eq!(calls[1]["function"]["arguments"], json!({}));
    assert_eq!(messages[2].tool_call_id.as_deref(), Some("call_1"));
    let tools = template_tools(req.tools.as_deref()).expect("tools");
    assert_eq!(tools[0]["function"]["name"], "get_weather");
    assert!(tools_bytes(&req) > 0);
    let bad = with_tools(json!([{"role": "assistant", "content": null, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]));
    match template_messages(&bad.messages) {
        Err(ApiError::InvalidParameter { param, .. }) => {
            assert_eq!(param, "messages[0].tool_calls[0].function.arguments")
        }
        other => panic!("expected a 400, got {other:?}"),
    }
}
