//! Tool-choice resolution, schemas, parsing and stream deltas, without an engine.

use serde_json::{Value, json};

use super::*;
use crate::api::openai_types::{ChatCompletionRequest, DeltaToolCall};

const WEATHER: &str = r#"{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}"#;

fn request(extra: Value) -> ChatCompletionRequest {
    let mut body = json!({
        "messages": [{"role": "user", "content": "weather?"}],
        "tools": [
            {"type": "function", "function": {"name": "get_weather", "parameters": serde_json::from_str::<Value>(WEATHER).unwrap()}},
            {"type": "function", "function": {"name": "get_time"}},
        ],
    });
    for (k, v) in extra.as_object().expect("object") {
        body[k] = v.clone();
    }
    serde_json::from_value(body).expect("request parses")
}

fn refused_param(r: Result<ToolChoicePlan, ApiError>) -> String {
    match r {
        Err(ApiError::InvalidParameter { param, .. }) => param,
        other => panic!("expected a 400, got {other:?}"),
    }
}

#[test]
fn tool_choice_resolves_as_vllm_does() {
    assert_eq!(ToolChoicePlan::of(&request(json!({}))).unwrap(), ToolChoicePlan::Auto);
    assert_eq!(
        ToolChoicePlan::of(&request(json!({"tools": null}))).unwrap(),
        ToolChoicePlan::None
    );
    assert_eq!(
        ToolChoicePlan::of(&request(json!({"tool_choice": "none"}))).unwrap(),
        ToolChoicePlan::None
    );
    assert_eq!(
        ToolChoicePlan::of(&request(json!({"tool_choice": "required"}))).unwrap(),
        ToolChoicePlan::Required { parallel: true }
    );
    assert_eq!(
        ToolChoicePlan::of(&request(
            json!({"tool_choice": "required", "parallel_tool_calls": false})
        ))
        .unwrap(),
        ToolChoicePlan::Required { parallel: false }
    );
    let named = json!({"tool_choice": {"type": "function", "function": {"name": "get_time"}}});
    assert_eq!(
        ToolChoicePlan::of(&request(named)).unwrap(),
        ToolChoicePlan::Named("get_time".into())
    );
}

#[test]
fn bad_tool_choices_and_tools_are_refused_naming_the_field() {
    let missing = json!({"tool_choice": {"type": "function", "function": {"name": "nope"}}});
    assert_eq!(refused_param(ToolChoicePlan::of(&request(missing))), "tool_choice");
    assert_eq!(
        refused_param(ToolChoicePlan::of(&request(
            json!({"tools": null, "tool_choice": "required"})
        ))),
        "tool_choice"
    );
    let bad_type = json!({"tools": [{"type": "retrieval", "function": {"name": "x"}}]});
    assert_eq!(refused_param(ToolChoicePlan::of(&request(bad_type))), "tools[0].type");
    let bad_params = json!({"tools": [{"type": "function", "function": {"name": "x", "parameters": [1]}}]});
    assert_eq!(
        refused_param(ToolChoicePlan::of(&request(bad_params))),
        "tools[0].function.parameters"
    );
    let no_name = json!({"tools": [{"type": "function", "function": {"name": ""}}]});
    assert_eq!(
        refused_param(ToolChoicePlan::of(&request(no_name))),
        "tools[0].function.name"
    );
}

#[test]
fn auto_needs_a_parser_and_none_never_parses() {
    assert!(ToolChoicePlan::Auto.check_served(None).is_err());
    assert!(ToolChoicePlan::Auto.check_served(Some(ToolCallParser::Hermes)).is_ok());
    assert!(ToolChoicePlan::None.check_served(None).is_ok());
    assert_eq!(
        ToolChoicePlan::None.output(Some(ToolCallParser::Hermes)),
        ToolOutput::Text
    );
    assert_eq!(
        ToolChoicePlan::Auto.output(Some(ToolCallParser::Hermes)),
        ToolOutput::Parsed(ToolCallParser::Hermes)
    );
}

fn schema_of(plan: &ToolChoicePlan, req: &ChatCompletionRequest) -> Value {
    match plan.constraint(req).expect("constraint") {
        Some(StructuredOutput::Tool(text)) => serde_json::from_str(&text).expect("schema json"),
        other => panic!("expected a JSON schema, got {other:?}"),
    }
}

#[test]
fn required_and_named_choices_constrain_to_the_tools_schemas() {
    let req = request(json!({}));
    assert_eq!(ToolChoicePlan::Auto.constraint(&req).unwrap(), None);
    assert_eq!(ToolChoicePlan::None.constraint(&req).unwrap(), None);
    // Strict by default, as vLLM: objects that do not say get `additionalProperties: false`.
    let mut weather = serde_json::from_str::<Value>(WEATHER).unwrap();
    weather["additionalProperties"] = json!(false);
    let named = schema_of(&ToolChoicePlan::Named("get_weather".into()), &req);
    assert_eq!(named, weather);
    let no_params = schema_of(&ToolChoicePlan::Named("get_time".into()), &req);
    assert_eq!(
        no_params,
        json!({"type": "object", "properties": {}, "additionalProperties": false})
    );
    // vLLM's option, sent false, keeps the schemas as sent.
    let open = request(json!({"structured_outputs": {"disable_additional_properties": false}}));
    let named = schema_of(&ToolChoicePlan::Named("get_weather".into()), &open);
    assert_eq!(named, serde_json::from_str::<Value>(WEATHER).unwrap());
    let required = schema_of(&ToolChoicePlan::Required { parallel: true }, &req);
    assert_eq!(required["type"], "array");
    assert_eq!(required["minItems"], 1);
    assert_eq!(required.get("maxItems"), None);
    let branches = required["items"]["anyOf"].as_array().expect("anyOf");
    assert_eq!(branches.len(), 2);
    assert_eq!(branches[0]["properties"]["name"]["enum"], json!(["get_weather"]));
    assert_eq!(branches[0]["required"], json!(["name", "parameters"]));
    assert_eq!(branches[1]["properties"]["parameters"], no_params);
    let single = schema_of(&ToolChoicePlan::Required { parallel: false }, &req);
    assert_eq!(single["maxItems"], 1);
}

#[test]
fn required_schema_hoists_defs_and_refuses_conflicting_ones() {
    let tool = |name: &str, def: Value| {
        json!({"type": "function", "function": {"name": name, "parameters": {
            "type": "object", "properties": {"p": {"$ref": "#/$defs/P"}}, "$defs": {"P": def}}}})
    };
    let same = request(json!({"tools": [tool("a", json!({"type": "string"})), tool("b", json!({"type": "string"}))]}));
    let schema = schema_of(&ToolChoicePlan::Required { parallel: true }, &same);
    assert_eq!(schema["$defs"], json!({"P": {"type": "string"}}));
    assert_eq!(
        schema["items"]["anyOf"][0]["properties"]["parameters"].get("$defs"),
        None
    );
    let clash =
        request(json!({"tools": [tool("a", json!({"type": "string"})), tool("b", json!({"type": "integer"}))]}));
    assert!(ToolChoicePlan::Required { parallel: true }.constraint(&clash).is_err());
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
    let req = request(json!({"messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
            {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]}));
    let messages = template_messages(&req.messages).expect("messages");
    assert_eq!(messages[1].content, "");
    let calls = messages[1].tool_calls.as_ref().expect("calls");
    assert_eq!(calls[0]["function"]["arguments"], json!({"city": "Oslo"}));
    assert_eq!(calls[1]["function"]["arguments"], json!({}));
    assert_eq!(messages[2].tool_call_id.as_deref(), Some("call_1"));
    let tools = template_tools(req.tools.as_deref()).expect("tools");
    assert_eq!(tools[0]["function"]["name"], "get_weather");
    assert!(tools_bytes(&req) > 0);
    let bad = request(
        json!({"messages": [{"role": "assistant", "content": null, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]}),
    );
    match template_messages(&bad.messages) {
        Err(ApiError::InvalidParameter { param, .. }) => {
            assert_eq!(param, "messages[0].tool_calls[0].function.arguments")
        }
        other => panic!("expected a 400, got {other:?}"),
    }
}
