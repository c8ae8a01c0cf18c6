//! `GET /openapi.json` on the real server: it documents exactly the routes the server serves,
//! its request examples are served, and it states the served model's bounds.

use kiln::model::loader::open_model;
use kiln::tokenizer::token_id_bound;
use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{Tiny, start_tiny};

fn served_document(t: &Tiny) -> Value {
    let (status, text) = t.get_text("/openapi.json");
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).expect("the document is JSON")
}

/// The first request example of an operation, if it takes a body.
fn example_body(operation: &Value) -> Option<Value> {
    let examples = operation["requestBody"]["content"]["application/json"]["examples"].as_object()?;
    examples.values().next().map(|e| e["value"].clone())
}

/// The status, the `Allow` header and the JSON body (`null` if none).
fn send(t: &Tiny, method: &Method, path: &str, body: Option<&Value>) -> (u16, String, Value) {
    let mut request = t.client.request(method.clone(), t.server.url(path));
    if let Some(body) = body {
        request = request.json(body);
    }
    let resp = request.send().expect("request");
    let status = resp.status().as_u16();
    let allow = resp
        .headers()
        .get("allow")
        .map(|v| v.to_str().expect("ascii").to_owned())
        .unwrap_or_default();
    (status, allow, resp.json().unwrap_or(Value::Null))
}

#[test]
fn the_document_covers_every_served_route_and_each_documented_one_is_served() {
    let t = start_tiny(|_| {});
    let doc = served_document(&t);
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().expect("paths");
    let all_methods = [Method::GET, Method::POST, Method::PUT, Method::DELETE, Method::PATCH];
    let mut operations = 0;
    for (path, item) in paths {
        let item = item.as_object().expect("path item");
        let documented: Vec<String> = item.keys().map(|m| m.to_uppercase()).collect();
        for method in &all_methods {
            let name = method.as_str().to_lowercase();
            let (status, allow, body) = match item.get(&name) {
                Some(operation) => send(&t, method, path, example_body(operation).as_ref()),
                None => send(&t, method, path, None),
            };
            if item.contains_key(&name) {
                operations += 1;
                assert!(
                    ![404, 405].contains(&status),
                    "{method} {path} is documented but answers {status}: {body}"
                );
                assert!(status < 500, "{method} {path}: {status} {body}");
            } else {
                assert_eq!(
                    status, 405,
                    "{method} {path} is not documented but answers {status}: {body}"
                );
                assert_eq!(body["error"]["code"], "method_not_allowed");
                assert_eq!(allow, documented.join(", "), "{method} {path}: the 405's Allow header");
            }
        }
    }
    assert_eq!(operations, 23, "{paths:?}");
    // An undocumented path is not served either.
    assert_eq!(send(&t, &Method::GET, "/v1/embeddings", None).0, 404);
}

#[test]
fn every_request_example_of_the_document_is_served() {
    let t = start_tiny(|_| {});
    let doc = served_document(&t);
    let mut served = 0;
    for path in ["/v1/completions", "/v1/chat/completions"] {
        let examples = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["examples"]
            .as_object()
            .expect("examples");
        for (name, example) in examples {
            let body = &example["value"];
            if body["stream"] == true {
                let events = t.stream(path, body);
                assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{path} {name}");
            } else {
                let (status, response) = t.post(path, body);
                assert_eq!(status, 200, "{path} example {name:?}: {response}");
                assert!(response["choices"].as_array().is_some_and(|c| !c.is_empty()));
            }
            served += 1;
        }
    }
    assert!(served >= 6, "{served}");
}

#[test]
fn the_served_document_states_this_models_name_context_and_vocabulary() {
    let t = start_tiny(|_| {});
    let doc = served_document(&t);
    let (_, models) = t.get_text("/v1/models");
    let models: Value = serde_json::from_str(&models).expect("models");
    let card = &models["data"][0];
    let context = card["max_model_len"].as_u64().expect("max_model_len");
    let vocabulary = token_id_bound(&open_model(&t.model_path).expect("open").tokenizer) as u64;
    let schemas = &doc["components"]["schemas"];
    assert_eq!(schemas["TokenId"]["maximum"], vocabulary - 1);
    for (request, max_tokens) in [
        ("CompletionRequest", "max_tokens"),
        ("ChatCompletionRequest", "max_completion_tokens"),
    ] {
        let properties = &schemas[request]["properties"];
        assert_eq!(properties[max_tokens]["maximum"], context - 1, "{request}");
        assert_eq!(properties["model"]["enum"][0], card["id"], "{request}");
    }
}

/// With `--allow-runtime-lora-updating` the document has vLLM's two adapter routes, with
/// their bodies and refusals; each answers what it documents, and another method a 405.
#[test]
fn the_runtime_adapter_routes_are_documented_where_they_are_served() {
    let fixture = crate::arch_parity::fixture("llama");
    let t = crate::common::start_model(tempfile::tempdir().expect("tempdir"), fixture.join("hf"), |c| {
        c.engine.kv_cache_memory = "8MiB".into();
        c.lora.enable_lora = true;
        c.lora.allow_runtime_lora_updating = true;
    });
    let doc = served_document(&t);
    let adapter = fixture.join("lora").join("all").display().to_string();
    let cases = [
        (
            "/v1/load_lora_adapter",
            "LoadLoraAdapterRequest",
            json!({"lora_name": "a", "lora_path": adapter}),
            200,
        ),
        (
            "/v1/load_lora_adapter",
            "LoadLoraAdapterRequest",
            json!({"lora_name": "a"}),
            400,
        ),
        (
            "/v1/unload_lora_adapter",
            "UnloadLoraAdapterRequest",
            json!({"lora_name": "a"}),
            200,
        ),
        (
            "/v1/unload_lora_adapter",
            "UnloadLoraAdapterRequest",
            json!({"lora_name": "a"}),
            404,
        ),
    ];
    for (path, schema, body, want) in cases {
        let operation = &doc["paths"][path]["post"];
        let documented = &operation["requestBody"]["content"]["application/json"]["schema"]["$ref"];
        assert_eq!(documented, &json!(format!("#/components/schemas/{schema}")), "{path}");
        assert!(example_body(operation).is_some(), "{path} has an example");
        let (status, _, answer) = send(&t, &Method::POST, path, Some(&body));
        assert_eq!(status, want, "{path} {body}: {answer}");
        assert!(
            operation["responses"][want.to_string()].is_object(),
            "{path} answers {want}, undocumented"
        );
        if want != 200 {
            assert!(answer["error"]["message"].is_string(), "{path}: {answer}");
        }
        let (status, allow, _) = send(&t, &Method::GET, path, None);
        assert_eq!((status, allow.as_str()), (405, "POST"), "{path}");
    }
    let properties = &doc["components"]["schemas"]["LoadLoraAdapterRequest"]["properties"];
    assert!(properties["lora_name"].is_object() && properties["lora_path"].is_object());
    let unload = &doc["components"]["schemas"]["UnloadLoraAdapterRequest"]["properties"];
    assert!(unload["lora_name"].is_object() && unload["lora_int_id"].is_object());
}
