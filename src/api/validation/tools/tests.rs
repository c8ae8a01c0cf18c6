//! Tool-choice resolution and the schemas `required` and named choices constrain to.

use serde_json::{Value, json};

use super::*;
use crate::api::openai_types::ChatCompletionRequest;

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
