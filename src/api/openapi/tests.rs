//! The document against the code: the route table, the request types and validation.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::served::{API_KEY_SCHEME, CHAT, COMPLETION, GENERATION_REQUESTS};
use super::*;
use crate::api::ServedModel;
use crate::api::auth::OPEN_PATHS;
use crate::api::openai_types::schemas::TOKEN_ID;
use crate::api::openai_types::{ChatCompletionRequest, CompletionRequest};
use crate::api::validation::Body;
use crate::config::LimitsConfig;

fn document() -> Value {
    serde_json::to_value(ApiDoc::openapi()).expect("document serializes")
}

/// `(METHOD, path)` of every `resource!(path, Method::X, handler)` line of the route table.
fn route_table() -> BTreeSet<(String, String)> {
    // The main table and the routers' worker endpoints, each in the `resource!` form.
    let source = [
        include_str!("../routes.rs"),
        include_str!("../worker_contract/mod.rs"),
        include_str!("../lora_admin.rs"),
    ]
    .concat();
    source
        .split("resource!(")
        .skip(1)
        .filter_map(|rest| {
            // rustfmt breaks a long invocation over lines.
            let (path, rest) = rest.trim_start().strip_prefix('"')?.split_once('"')?;
            let method = rest.trim_start_matches([',', ' ', '\n']).strip_prefix("Method::")?;
            let method = method.split(|c: char| !c.is_ascii_alphabetic()).next()?;
            Some((method.to_owned(), path.to_owned()))
        })
        .collect()
}

fn documented_operations(doc: &Value) -> BTreeSet<(String, String)> {
    let paths = doc["paths"].as_object().expect("paths");
    paths
        .iter()
        .flat_map(|(path, item)| {
            let methods = item.as_object().expect("path item");
            methods.keys().map(move |m| (m.to_uppercase(), path.clone()))
        })
        .collect()
}

#[test]
fn the_document_lists_exactly_the_routes_of_the_route_table() {
    let table = route_table();
    assert!(
        table.len() >= 9,
        "the route table parsed to {table:?}; did its form change?"
    );
    assert!(table.contains(&("GET".into(), "/openapi.json".into())));
    assert_eq!(documented_operations(&document()), table);
}

/// A request body with `field` set, on top of a minimal valid body for `request`.
fn body_with(request: &str, field: &str, value: Value) -> Value {
    let mut body = match request {
        "CompletionRequest" => json!({"prompt": "hi"}),
        _ => json!({"messages": [{"role": "user", "content": "hi"}]}),
    };
    body[field] = value;
    // Fields that validation checks against another one.
    match field {
        "best_of" => body["n"] = body["best_of"].clone(),
        "top_logprobs" => body["logprobs"] = json!(true),
        _ => {}
    }
    body
}

/// Whether kiln takes the body: it parses, and validation (sampling parameters and, for chat,
/// the message contents) passes. Model-dependent checks (context, vocabulary) come later.
fn accepts(request: &str, body: &Value) -> bool {
    match request {
        "CompletionRequest" => {
            serde_json::from_value::<CompletionRequest>(body.clone()).is_ok_and(|r| r.check(None).is_ok())
        }
        "ChatCompletionRequest" => serde_json::from_value::<ChatCompletionRequest>(body.clone())
            .is_ok_and(|r| r.flattened_messages().is_ok() && r.check(None).is_ok()),
        other => panic!("no request type for {other}"),
    }
}

/// Values just inside and just outside each numeric bound the document states.
fn probes(schema: &Value) -> Vec<(Value, bool)> {
    let integer =
        schema["type"].as_array().is_some_and(|t| t.contains(&json!("integer"))) || schema["type"] == "integer";
    let step = if integer { 1.0 } else { 1e-3 };
    let value = |x: f64| if integer { json!(x as i64) } else { json!(x) };
    let mut out = Vec::new();
    if let Some(min) = schema["minimum"].as_f64() {
        out.extend([(value(min), true), (value(min - step), false)]);
    }
    if let Some(min) = schema["exclusiveMinimum"].as_f64() {
        out.extend([(value(min + step), true), (value(min), false)]);
    }
    if let Some(max) = schema["maximum"].as_f64() {
        // Past f32::MAX the f32 fields read infinity, which validation refuses.
        let beyond = if max > 1e30 { max * 2.0 } else { max + step };
        out.extend([(value(max), true), (value(beyond), false)]);
    }
    out
}

#[test]
fn every_numeric_bound_in_the_document_is_the_bound_validation_enforces() {
    let doc = document();
    let mut checked = 0;
    for request in GENERATION_REQUESTS {
        let properties = doc["components"]["schemas"][request]["properties"]
            .as_object()
            .expect("properties");
        for (field, schema) in properties {
            for (value, inside) in probes(schema) {
                let body = body_with(request, field, value.clone());
                assert_eq!(
                    accepts(request, &body),
                    inside,
                    "{request}.{field} = {value}: the document says {}",
                    if inside { "valid" } else { "invalid" }
                );
                checked += 1;
            }
        }
    }
    // temperature, top_p, n, logprobs, penalties, best_of, top_k, min_p, ... in both requests.
    assert!(checked >= 60, "only {checked} bounds probed");
}

#[test]
fn enumerated_values_are_the_ones_validation_takes() {
    let doc = document();
    let schemas = &doc["components"]["schemas"];
    for echo in [json!(false), json!(true), Value::Null] {
        assert!(accepts(
            "CompletionRequest",
            &body_with("CompletionRequest", "echo", echo)
        ));
    }
    assert!(accepts(CHAT, &body_with(CHAT, "prompt_logprobs", Value::Null)));
    assert!(accepts(CHAT, &body_with(CHAT, "prompt_logprobs", json!(20))));
    assert!(!accepts(CHAT, &body_with(CHAT, "prompt_logprobs", json!(21))));

    assert_eq!(schemas[CHAT]["properties"]["chat_template"]["type"], "null");
    assert!(accepts(CHAT, &body_with(CHAT, "chat_template", Value::Null)));
    assert!(!accepts(CHAT, &body_with(CHAT, "chat_template", json!("{{ 1 }}"))));

    let roles = schemas["ChatRole"]["enum"].as_array().expect("roles");
    for role in roles {
        let body = json!({"messages": [{"role": role, "content": "hi"}]});
        assert!(accepts("ChatCompletionRequest", &body), "{role}");
    }
    let body = json!({"messages": [{"role": "bot", "content": "hi"}]});
    assert!(!accepts("ChatCompletionRequest", &body));

    let part = &schemas["MessageContent"]["oneOf"][1]["items"];
    assert_eq!(part["properties"]["type"]["enum"], json!(["text"]));
    assert_eq!(part["required"], json!(["type", "text"]));
    let with_parts = |parts: Value| json!({"messages": [{"role": "user", "content": parts}]});
    assert!(accepts(
        "ChatCompletionRequest",
        &with_parts(json!([{"type": "text", "text": "a"}]))
    ));
    assert!(!accepts(
        "ChatCompletionRequest",
        &with_parts(json!([{"type": "text"}]))
    ));
    assert!(!accepts(
        "ChatCompletionRequest",
        &with_parts(json!([{"type": "image_url", "text": "a"}]))
    ));
}

#[test]
fn every_request_example_is_a_valid_request() {
    let doc = document();
    let mut seen = 0;
    for (path, request) in [
        ("/v1/completions", "CompletionRequest"),
        ("/v1/chat/completions", "ChatCompletionRequest"),
    ] {
        let body = &doc["paths"][path]["post"]["requestBody"]["content"]["application/json"];
        assert_eq!(body["schema"]["$ref"], format!("#/components/schemas/{request}"));
        let examples = body["examples"].as_object().expect("examples");
        assert!(!examples.is_empty(), "{path} has no examples");
        for (name, example) in examples {
            assert!(accepts(request, &example["value"]), "{path} example {name:?}");
            seen += 1;
        }
    }
    assert!(seen >= 4);
}

#[test]
fn every_error_response_is_the_openai_error_shape() {
    let doc = document();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("operations") {
            for (status, response) in operation["responses"].as_object().expect("responses") {
                if status.starts_with('4') || (status.starts_with('5') && path != "/ready") {
                    assert_eq!(
                        response["content"]["application/json"]["schema"]["$ref"], "#/components/schemas/ErrorBody",
                        "{method} {path} {status}"
                    );
                }
            }
        }
    }
    let detail = &doc["components"]["schemas"]["ErrorDetail"];
    assert_eq!(detail["required"], json!(["message", "type", "param", "code"]));
}

fn tiny_model() -> ServedModel {
    use std::sync::Arc;

    use crate::model::chat_template::{CHATML_TEMPLATE, ChatTemplate};

    let tokenizer = tokenizers::Tokenizer::new(tokenizers::models::bpe::BPE::default());
    ServedModel {
        name: "m".into(),
        tokenizer: Arc::new(tokenizer),
        chat_template: Arc::new(ChatTemplate::new(CHATML_TEMPLATE, "", "").expect("template")),
        max_model_len: 256,
        token_id_bound: 300,
        created: 0,
        grammars: None,
        tool_parser: None,
        tokenizer_config: Arc::new(serde_json::json!({})),
        adapters: Default::default(),
    }
}

#[test]
fn the_served_document_states_the_models_bounds_and_the_limits() {
    let model = tiny_model();
    let limits = LimitsConfig {
        max_stop_token_ids: 5,
        ..LimitsConfig::default()
    };
    let doc = served_document(&Serving {
        model: &model,
        limits: &limits,
        api_keys: false,
        routes: &|_| true,
    });
    let schemas = &doc["components"]["schemas"];
    for request in GENERATION_REQUESTS {
        let properties = &schemas[request]["properties"];
        assert_eq!(properties["model"]["enum"], json!(["m", null]), "{request}");
        assert_eq!(properties["stop_token_ids"]["maxItems"], 5, "{request}");
    }
    assert_eq!(schemas[COMPLETION]["properties"]["max_tokens"]["maximum"], 255);
    assert_eq!(schemas[CHAT]["properties"]["max_completion_tokens"]["maximum"], 255);
    // Beside `max_completion_tokens`, any `u32` is taken.
    assert_eq!(schemas[CHAT]["properties"]["max_tokens"]["maximum"], u32::MAX);
    assert_eq!(schemas[TOKEN_ID]["maximum"], 299);
    // The rest is the generic document.
    assert_eq!(doc["paths"], document()["paths"]);
    assert_eq!(doc["components"].get("securitySchemes"), None);
}

#[test]
fn the_served_document_lists_only_routed_paths_and_asks_for_the_key_off_the_open_paths() {
    let model = tiny_model();
    let limits = LimitsConfig::default();
    let doc = served_document(&Serving {
        model: &model,
        limits: &limits,
        api_keys: true,
        routes: &|path| path != "/metrics",
    });
    let paths = doc["paths"].as_object().expect("paths");
    assert!(!paths.contains_key("/metrics"));
    assert_eq!(paths.len(), document()["paths"].as_object().expect("paths").len() - 1);
    assert_eq!(doc["components"]["securitySchemes"][API_KEY_SCHEME]["scheme"], "bearer");
    for (path, item) in paths {
        let operation = item.as_object().and_then(|i| i.values().next()).expect("operation");
        let open = OPEN_PATHS.contains(&path.as_str());
        let security = operation.get("security");
        assert_eq!(security.is_none(), open, "{path}: {security:?}");
    }
}

#[test]
fn a_401_is_documented_exactly_where_a_key_is_asked_for() {
    let doc = document();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        let operation = item.as_object().and_then(|i| i.values().next()).expect("operation");
        let has_401 = operation["responses"].get("401").is_some();
        assert_eq!(has_401, !OPEN_PATHS.contains(&path.as_str()), "{path}");
    }
}

/// Every `$ref` in `value`.
fn refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(target)) = map.get("$ref") {
                out.push(target.clone());
            }
            map.values().for_each(|v| refs(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

#[test]
fn request_bodies_are_flat_objects_with_their_shared_field_groups() {
    const COMMON: [&str; 7] = [
        "model",
        "stream",
        "temperature",
        "top_p",
        "seed",
        "user",
        "data_parallel_rank",
    ];
    const SAMPLING: [&str; 12] = [
        "n",
        "stream_options",
        "stop",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "top_k",
        "min_p",
        "repetition_penalty",
        "stop_token_ids",
        "ignore_eos",
        "min_tokens",
    ];
    const CONSTRAINTS: [&str; 6] = [
        "response_format",
        "structured_outputs",
        "guided_json",
        "guided_regex",
        "guided_choice",
        "guided_grammar",
    ];
    let doc = document();
    let schemas = &doc["components"]["schemas"];
    let shared: Vec<&str> = COMMON.iter().chain(&SAMPLING).chain(&CONSTRAINTS).copied().collect();
    let bodies: [(&str, Vec<&str>); 3] = [
        (
            COMPLETION,
            [
                shared.as_slice(),
                &[
                    "prompt_logprobs",
                    "prompt",
                    "max_tokens",
                    "logprobs",
                    "echo",
                    "suffix",
                    "best_of",
                ],
            ]
            .concat(),
        ),
        (
            CHAT,
            [
                shared.as_slice(),
                &[
                    "prompt_logprobs",
                    "messages",
                    "max_tokens",
                    "max_completion_tokens",
                    "logprobs",
                    "top_logprobs",
                    "chat_template",
                    "tools",
                    "tool_choice",
                    "parallel_tool_calls",
                ],
            ]
            .concat(),
        ),
        (
            "ResponsesRequest",
            [
                COMMON.as_slice(),
                &[
                    "input",
                    "instructions",
                    "tools",
                    "tool_choice",
                    "parallel_tool_calls",
                    "text",
                    "max_output_tokens",
                    "store",
                    "previous_response_id",
                    "metadata",
                ],
            ]
            .concat(),
        ),
    ];
    for (body, fields) in bodies {
        let schema = &schemas[body];
        assert_eq!(schema["type"], "object", "{body}: {schema}");
        assert_eq!(schema.get("allOf"), None, "{body}");
        assert!(schema["description"].is_string(), "{body}");
        let mut documented: Vec<&str> = schema["properties"]
            .as_object()
            .expect("properties")
            .keys()
            .map(String::as_str)
            .collect();
        let mut fields = fields;
        documented.sort_unstable();
        fields.sort_unstable();
        assert_eq!(documented, fields, "{body}");
    }
    assert_eq!(schemas[COMPLETION]["required"], json!(["prompt"]));
    assert_eq!(schemas[CHAT]["required"], json!(["messages"]));
    assert_eq!(schemas["ResponsesRequest"]["required"], json!(["input"]));
    assert_eq!(schemas[CHAT]["properties"]["temperature"]["maximum"], 2);
    let mut targets = Vec::new();
    refs(&doc, &mut targets);
    assert!(!targets.is_empty());
    for target in targets {
        let name = target
            .strip_prefix("#/components/schemas/")
            .expect("a schema reference");
        assert!(schemas.get(name).is_some(), "{target} names no schema");
    }
}

#[test]
fn the_generation_operations_share_one_error_table() {
    let doc = document();
    let statuses = |path: &str| -> Vec<String> {
        let responses = doc["paths"][path]["post"]["responses"].as_object().expect("responses");
        responses.keys().cloned().collect()
    };
    for path in ["/v1/completions", "/v1/chat/completions", "/v1/responses"] {
        assert_eq!(
            statuses(path),
            ["200", "400", "401", "404", "408", "413", "429", "500", "503"],
            "{path}"
        );
        let too_many = &doc["paths"][path]["post"]["responses"]["429"];
        assert_eq!(too_many["headers"]["Retry-After"]["schema"]["type"], "integer");
    }
}
