//! Strict schemas by default, as vLLM compiles them: an object schema that does not set
//! `additionalProperties` allows only its own keys, in `response_format`, vLLM's schema
//! fields and tool parameters; `structured_outputs.disable_additional_properties: false`
//! keeps a schema as sent. On the tiny random-weight model, which writes any key it may.

use serde_json::{Value, json};

use crate::common::{Tiny, start_tiny_spec};
use kiln::testing::TinyModelSpec;

fn start() -> Tiny {
    let spec = TinyModelSpec {
        context: 1024,
        ..TinyModelSpec::default()
    };
    start_tiny_spec(spec, |_| {})
}

/// An object with one listed key, silent about others.
fn open_schema() -> Value {
    json!({"type": "object", "properties": {"a": {"type": "boolean"}}})
}

/// The JSON objects of the choices that finished with `stop`.
fn finished_objects(body: &Value) -> Vec<serde_json::Map<String, Value>> {
    let choices = body["choices"].as_array().expect("choices");
    choices
        .iter()
        .filter(|c| c["finish_reason"] != "length")
        .map(|c| {
            let text = c["text"]
                .as_str()
                .or(c["message"]["content"].as_str())
                .or(c["message"]["tool_calls"][0]["function"]["arguments"].as_str())
                .expect("text");
            match serde_json::from_str(text) {
                Ok(Value::Object(object)) => object,
                other => panic!("not an object: {text:?} ({other:?})"),
            }
        })
        .collect()
}

fn sample(t: &Tiny, path: &str, constraint: Value) -> Vec<serde_json::Map<String, Value>> {
    let mut body = json!({"max_tokens": 80, "temperature": 1.0, "seed": 11, "n": 8});
    if path.ends_with("chat/completions") {
        body["messages"] = json!([{"role": "user", "content": "go"}]);
    } else {
        body["prompt"] = json!("go");
    }
    for (k, v) in constraint.as_object().expect("object") {
        body[k] = v.clone();
    }
    let (status, response) = t.post(path, &body);
    assert_eq!(status, 200, "{constraint}: {response}");
    let objects = finished_objects(&response);
    assert!(!objects.is_empty(), "no choice finished: {response}");
    objects
}

/// The texts of sampled completions under `constraint`, however they ended.
fn texts(t: &Tiny, constraint: Value) -> Vec<String> {
    let mut body = json!({"prompt": "go", "max_tokens": 40, "temperature": 1.0, "seed": 11, "n": 4});
    for (k, v) in constraint.as_object().expect("object") {
        body[k] = v.clone();
    }
    let (status, response) = t.post("/v1/completions", &body);
    assert_eq!(status, 200, "{constraint}: {response}");
    let choices = response["choices"].as_array().expect("choices");
    choices
        .iter()
        .map(|c| c["text"].as_str().expect("text").to_owned())
        .collect()
}

#[test]
fn schemas_that_do_not_say_allow_only_their_own_keys() {
    let t = start();
    let named = json!({"type": "function", "function": {"name": "a"}});
    let forms = [
        ("/v1/completions", json!({"guided_json": open_schema()})),
        (
            "/v1/completions",
            json!({"structured_outputs": {"json": open_schema()}}),
        ),
        (
            "/v1/chat/completions",
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": open_schema()}}}),
        ),
        (
            "/v1/chat/completions",
            json!({"tools": [{"type": "function", "function": {"name": "a", "parameters": open_schema()}}], "tool_choice": named}),
        ),
    ];
    for (path, constraint) in forms {
        for object in sample(&t, path, constraint.clone()) {
            assert!(object.keys().all(|k| k == "a"), "{constraint}: {object:?}");
        }
    }
}

#[test]
fn vllms_option_sent_false_keeps_the_schema_as_sent() {
    let t = start();
    // `b` is required but not listed: only an open object can hold it.
    let mut needs_b = open_schema();
    needs_b["required"] = json!(["b"]);
    let opted_out = json!({"structured_outputs": {"json": needs_b, "disable_additional_properties": false}});
    // The random model rarely closes an open object: read the texts, finished or not.
    for text in texts(&t, opted_out.clone()) {
        assert!(text.contains("\"b\":"), "{text:?}");
    }
    // Strict (the default, or the option sent true), the same schema admits no object.
    for strict in [
        json!({"json": needs_b}),
        json!({"json": needs_b, "disable_additional_properties": true}),
    ] {
        let mut body = json!({"prompt": "go", "max_tokens": 20});
        body["structured_outputs"] = strict.clone();
        let (status, response) = t.post("/v1/completions", &body);
        let refused = status == 400;
        let never_finished = status == 200 && response["choices"][0]["finish_reason"] == "length";
        assert!(refused || never_finished, "{strict}: {status} {response}");
    }
    // A schema that says `additionalProperties` keeps it: here extra keys must be integers.
    let mut says = needs_b.clone();
    says["additionalProperties"] = json!({"type": "integer"});
    for text in texts(&t, json!({"guided_json": says})) {
        let value = text.split("\"b\":").nth(1).unwrap_or_else(|| panic!("{text:?}"));
        assert!(value.starts_with(|c: char| c == '-' || c.is_ascii_digit()), "{text:?}");
    }
}
