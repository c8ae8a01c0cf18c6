//! Constrained decoding end to end on the tiny random-weight model: whatever the model would
//! say, the mask makes every output that ends with `stop` satisfy its constraint (the model
//! contributes nothing to validity). Bad constraints get 400 naming the parameter before
//! generation starts, and the server keeps serving.

use std::process::Command;

use kiln::testing::TinyModelSpec;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::common::{Tiny, metric_value, scrape_until, start_tiny, start_tiny_spec};

/// A tiny model with room for a few hundred generated tokens.
fn start() -> Tiny {
    let spec = TinyModelSpec {
        context: 1024,
        ..TinyModelSpec::default()
    };
    start_tiny_spec(spec, |c| c.server.max_request_body_bytes = 4 << 20)
}

fn choice_texts(body: &Value) -> Vec<(String, String)> {
    body["choices"]
        .as_array()
        .expect("choices")
        .iter()
        .map(|c| {
            let text = c["text"].as_str().or(c["message"]["content"].as_str()).expect("text");
            (
                text.to_owned(),
                c["finish_reason"].as_str().expect("finish_reason").to_owned(),
            )
        })
        .collect()
}

/// `base` with the prompt `go` in the endpoint's shape (messages for chat) and `constraint`'s
/// fields.
fn body_for(path: &str, mut base: Value, constraint: &Value) -> Value {
    if path.ends_with("chat/completions") {
        base["messages"] = json!([{"role": "user", "content": "go"}]);
    } else {
        base["prompt"] = json!("go");
    }
    base.as_object_mut()
        .expect("object")
        .extend(constraint.as_object().expect("object").clone());
    base
}

/// A random schema small enough that a valid answer fits the token budget: strings are
/// short, arrays and objects small, nesting shallow.
fn random_schema(rng: &mut StdRng, depth: u32) -> Value {
    let kinds = if depth >= 2 { 5 } else { 7 };
    match rng.random_range(0..kinds) {
        0 => json!({"type": "string", "maxLength": rng.random_range(1..8)}),
        1 => json!({"type": "integer", "minimum": -50, "maximum": rng.random_range(0..2000)}),
        2 => {
            let values = [json!("red"), json!("green"), json!("blue"), json!(7), Value::Null];
            json!({"enum": values[..rng.random_range(1..6)]})
        }
        3 => json!({"type": "boolean"}),
        4 => json!({"type": "string", "pattern": "^[a-z]{2,5}(-[0-9])?$"}),
        5 => random_object(rng, depth + 1),
        _ => json!({
            "type": "array",
            "items": random_schema(rng, depth + 1),
            "minItems": rng.random_range(0..2),
            "maxItems": 2,
        }),
    }
}

fn random_object(rng: &mut StdRng, depth: u32) -> Value {
    let count = rng.random_range(1..4);
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    for i in 0..count {
        let name = ["id", "name", "tags", "size", "ok"][i];
        properties.insert(name.into(), random_schema(rng, depth));
        if rng.random_bool(0.7) {
            required.push(name);
        }
    }
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
}

#[test]
#[ignore = "needs KILN_TEST_PYTHON with jsonschema; .ci/run provides it"]
fn a_hundred_random_schemas_hold_at_temperature_one() {
    std::env::var("KILN_TEST_PYTHON").expect("KILN_TEST_PYTHON");
    let t = start();
    let mut rng = StdRng::seed_from_u64(16);
    let (mut valid_cases, mut cut) = (Vec::new(), 0);
    for i in 0..100 {
        let schema = random_object(&mut rng, 0);
        let body = json!({
            "prompt": "Answer in JSON:", "max_tokens": 400, "temperature": 1.0, "seed": i, "n": 3,
            "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}},
        });
        let (status, response) = t.post("/v1/completions", &body);
        assert_eq!(status, 200, "{schema}: {response}");
        for (output, reason) in choice_texts(&response) {
            match reason.as_str() {
                "stop" => valid_cases.push(json!({"schema": schema, "output": output})),
                "length" => cut += 1,
                other => panic!("unexpected finish_reason {other}"),
            }
        }
    }
    assert!(
        valid_cases.len() >= 240,
        "most outputs finish: {} stopped, {cut} cut",
        valid_cases.len()
    );
    validate_with_python(&valid_cases);
}

/// Runs the `jsonschema` validator over (schema, output) pairs; panics on any invalid one.
fn validate_with_python(cases: &[Value]) {
    let python = std::env::var("KILN_TEST_PYTHON").expect("KILN_TEST_PYTHON");
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), serde_json::to_vec(cases).expect("json")).expect("write");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/validate_json_outputs.py");
    let out = Command::new(python)
        .arg(script)
        .arg(file.path())
        .output()
        .expect("run python");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        report.contains(&format!("checked {}, invalid 0", cases.len())),
        "{report}"
    );
}

#[test]
#[ignore = "needs the real model and KILN_TEST_PYTHON with jsonschema; .ci/run provides them"]
fn a_sample_of_schemas_hold_on_the_default_model() {
    let model = kiln::testing::real_model::model_path();
    let mut config = kiln::config::Config::default();
    config.model.path = model.display().to_string();
    config.engine.kv_cache_memory = "256MiB".into();
    let files = kiln::model::loader::open_model(&model).expect("open model");
    let prepared = kiln::server::prepare_model(&config, files).expect("prepare");
    let server = kiln::testing::TestServer::start(config, prepared).expect("server");
    let client = reqwest::blocking::Client::new();
    let mut rng = StdRng::seed_from_u64(5);
    let (mut cases, mut cut) = (Vec::new(), 0);
    for seed in 0..6 {
        let schema = random_object(&mut rng, 1);
        let body = json!({
            "messages": [{"role": "user", "content": "Reply with a JSON object."}],
            "max_tokens": 160, "temperature": 1.0, "seed": seed,
            "response_format": {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}},
        });
        let response: Value = client
            .post(server.url("/v1/chat/completions"))
            .json(&body)
            .send()
            .and_then(|r| r.json())
            .expect("response");
        for (output, reason) in choice_texts(&response) {
            match reason.as_str() {
                "stop" => cases.push(json!({"schema": schema, "output": output})),
                _ => cut += 1,
            }
        }
    }
    assert!(
        cases.len() >= 4,
        "most answers finish: {} stopped, {cut} cut",
        cases.len()
    );
    validate_with_python(&cases);
}

#[test]
fn every_request_form_constrains_the_output() {
    let t = start();
    let choices = json!(["alpha", "beta", "gamma delta"]);
    let regex = "[0-9]{2,3}-[a-z]{3}";
    let forms = [
        ("/v1/completions", json!({"guided_choice": choices})),
        ("/v1/completions", json!({"structured_outputs": {"choice": choices}})),
        (
            "/v1/chat/completions",
            json!({"structured_outputs": {"choice": choices}}),
        ),
        ("/v1/completions", json!({"guided_regex": regex})),
        ("/v1/chat/completions", json!({"structured_outputs": {"regex": regex}})),
        ("/v1/completions", json!({"response_format": {"type": "json_object"}})),
        (
            "/v1/chat/completions",
            json!({"response_format": {"type": "json_object"}}),
        ),
        ("/v1/completions", json!({"structured_outputs": {"json_object": true}})),
        (
            "/v1/completions",
            json!({"guided_json": {"type": "array", "items": {"type": "integer"}, "maxItems": 3}}),
        ),
        (
            "/v1/chat/completions",
            json!({"structured_outputs": {"json": "{\"type\": \"boolean\"}"}}),
        ),
        (
            "/v1/completions",
            json!({"guided_grammar": "root ::= \"(\" [1-9] (\",\" [1-9])* \")\""}),
        ),
        (
            "/v1/chat/completions",
            json!({"structured_outputs": {"grammar": "start: \"<\" /[a-c]+/ \">\""}}),
        ),
    ];
    for (path, constraint) in forms {
        let body = body_for(
            path,
            json!({"max_tokens": 120, "temperature": 1.0, "seed": 3, "n": 4}),
            &constraint,
        );
        let (status, response) = t.post(path, &body);
        assert_eq!(status, 200, "{constraint}: {response}");
        for (text, reason) in choice_texts(&response) {
            if reason == "length" {
                continue;
            }
            assert_eq!(reason, "stop", "{constraint}");
            let key = constraint.to_string();
            let ok = if key.contains("choice") {
                choices.as_array().expect("list").iter().any(|c| c == &json!(text))
            } else if key.contains("regex") {
                let (digits, letters) = text.split_once('-').unwrap_or_default();
                (2..=3).contains(&digits.len())
                    && digits.bytes().all(|b| b.is_ascii_digit())
                    && letters.len() == 3
                    && letters.bytes().all(|b| b.is_ascii_lowercase())
            } else if key.contains("grammar") {
                (text.starts_with('(') && text.ends_with(')')) || (text.starts_with('<') && text.ends_with('>'))
            } else {
                let value: Result<Value, _> = serde_json::from_str(&text);
                match value {
                    Ok(v) if key.contains("json_object") => v.is_object(),
                    Ok(v) if key.contains("boolean") => v.is_boolean(),
                    Ok(v) => v
                        .as_array()
                        .is_some_and(|a| a.len() <= 3 && a.iter().all(Value::is_i64)),
                    Err(_) => false,
                }
            };
            assert!(ok, "{constraint} produced {text:?}");
        }
    }
    let text = scrape_until(&t, |m| {
        metric_value(m, "kiln_structured_output_requests_total", "kind=\"choice\"").is_some_and(|v| v >= 12.0)
    });
    for (name, fragment) in [
        ("kiln_structured_output_requests_total", "kind=\"regex\""),
        ("kiln_structured_output_requests_total", "kind=\"json_object\""),
        ("kiln_structured_output_requests_total", "kind=\"json_schema\""),
        ("kiln_structured_output_requests_total", "kind=\"grammar\""),
        ("kiln_grammar_mask_duration_seconds_count", "model_name"),
        ("kiln_grammar_compile_duration_seconds_count", "model_name"),
        ("kiln_grammar_cache_hits_total", "model_name"),
    ] {
        assert!(
            metric_value(&text, name, fragment).is_some_and(|v| v > 0.0),
            "{name} {fragment}:\n{text}"
        );
    }
}

#[test]
fn bad_constraints_get_400_naming_the_parameter_and_nothing_sticks() {
    let t = start();
    let huge_schema = json!({"type": "object", "description": "x".repeat(1 << 20)});
    let cases = [
        (json!({"response_format": {"type": "xml"}}), "response_format"),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": 5}}}}),
            "response_format.json_schema.schema",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": huge_schema}}}),
            "response_format.json_schema.schema",
        ),
        (json!({"guided_json": "{not json"}), "guided_json"),
        (json!({"guided_regex": "(a|b"}), "guided_regex"),
        (
            json!({"structured_outputs": {"grammar": "start: missing_rule"}}),
            "structured_outputs.grammar",
        ),
        (json!({"guided_choice": []}), "guided_choice"),
        (json!({"guided_regex": "a+", "guided_choice": ["a"]}), "guided_choice"),
    ];
    for (constraint, param) in cases {
        let mut body = json!({"prompt": "go", "max_tokens": 8});
        body.as_object_mut()
            .expect("object")
            .extend(constraint.as_object().expect("object").clone());
        let (status, response) = t.post("/v1/completions", &body);
        assert_eq!(status, 400, "{constraint}: {response}");
        let error_param = response["error"]["param"].as_str().unwrap_or_default();
        assert!(error_param.starts_with(param), "{param} vs {response}");
    }
    let (status, response) = t.post("/v1/completions", &json!({"prompt": "go", "max_tokens": 4}));
    assert_eq!(status, 200, "a normal request still completes: {response}");
    // The running gauge comes from the stats actor after the step that ended the last request,
    // which may be after its response: wait for it too. If a request stuck, it never gets there.
    let text = scrape_until(&t, |m| {
        metric_value(m, "kiln_grammar_compile_failures_total", "reason=\"too_large\"").is_some_and(|v| v >= 1.0)
            && metric_value(m, "vllm:num_requests_running", "model_name") == Some(0.0)
    });
    assert!(metric_value(&text, "kiln_grammar_compile_failures_total", "reason=\"invalid\"").is_some_and(|v| v >= 4.0));
    assert_eq!(
        metric_value(&text, "vllm:num_requests_running", "model_name"),
        Some(0.0)
    );
}

/// Regexes pathological for one engine or another. Backtracking blow-ups (`(x+x+)+y`) are
/// linear for llguidance's derivatives and complete with matching output. Nesting past the
/// regex parser's limit, and counted repetitions that multiply to a billion positions (which
/// the mask engine would meet only mid-generation), get 400 before generation starts; both
/// request forms, streaming too. A pattern in a schema that exhausts the mask engine
/// mid-generation fails its request with `constraint_failed`. Nothing is left running.
#[test]
fn pathological_regexes_get_400_or_complete_and_nothing_sticks() {
    let t = start();
    let nested = format!("{}a{}", "(".repeat(300), ")".repeat(300));
    for regex in [nested.as_str(), "((a{1000}){1000}){1000}"] {
        for (path, constraint, param) in [
            ("/v1/completions", json!({"guided_regex": regex}), "guided_regex"),
            (
                "/v1/chat/completions",
                json!({"structured_outputs": {"regex": regex}, "stream": true}),
                "structured_outputs.regex",
            ),
        ] {
            let body = body_for(path, json!({"max_tokens": 8}), &constraint);
            let (status, response) = t.post(path, &body);
            assert_eq!(status, 400, "{}: {response}", &regex[..regex.len().min(40)]);
            assert_eq!(response["error"]["param"], param, "{response}");
        }
    }
    type Matches = fn(&str) -> bool;
    let backtracking: [(&str, Matches); 2] = [
        ("(x+x+)+y", |text| {
            text.len() >= 3 && text.ends_with('y') && text[..text.len() - 1].bytes().all(|b| b == b'x')
        }),
        ("(a+)+$", |text| !text.is_empty() && text.bytes().all(|b| b == b'a')),
    ];
    for (regex, matches) in backtracking {
        let body = json!({"prompt": "go", "max_tokens": 24, "temperature": 1.0, "seed": 5, "n": 3,
            "guided_regex": regex});
        let (status, response) = t.post("/v1/completions", &body);
        assert_eq!(status, 200, "{regex}: {response}");
        for (text, reason) in choice_texts(&response) {
            assert!(
                reason == "length" || matches(&text),
                "{regex} produced {text:?} ({reason})"
            );
        }
    }
    // A pattern inside a schema is not sized up front: its request fails when the mask
    // engine runs out of its per-token budget, with an error rather than a broken output.
    let schema = json!({"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a{1000}){1000}$"}},
        "required": ["s"]});
    let body = json!({"prompt": "go", "max_tokens": 16, "guided_json": schema});
    let (status, response) = t.post("/v1/completions", &body);
    assert_eq!(status, 400, "{response}");
    assert_eq!(response["error"]["code"], "constraint_failed", "{response}");
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let events = t.stream("/v1/completions", &streamed);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{events:?}");
    let error: Value = serde_json::from_str(&events[events.len() - 2]).expect("an error event");
    assert_eq!(error["error"]["code"], "constraint_failed", "{events:?}");
    t.wait_for_load(|l| l["running"] == 0 && l["waiting"] == 0 && l["kv_cache_usage"] == 0.0);
    let text = scrape_until(&t, |m| {
        metric_value(m, "kiln_grammar_compile_failures_total", "reason=\"too_large\"").is_some_and(|v| v >= 2.0)
            && metric_value(m, "kiln_structured_output_invalid_total", "reason=\"error\"").is_some_and(|v| v >= 2.0)
    });
    assert!(metric_value(&text, "kiln_grammar_compile_failures_total", "reason=\"invalid\"").is_some_and(|v| v >= 2.0));
}

/// `min_tokens` longer than any answer the constraint allows: the grammar's end wins (the
/// answer stops where the constraint ends), sampled and greedy, on both endpoints.
#[test]
fn min_tokens_never_pushes_the_output_outside_its_constraint() {
    let t = start();
    let forms = [
        (json!({"guided_choice": ["yes"]}), ["yes"].as_slice()),
        (json!({"guided_regex": "(ab|cd)"}), ["ab", "cd"].as_slice()),
    ];
    for path in ["/v1/chat/completions", "/v1/completions"] {
        for (constraint, allowed) in &forms {
            for sampling in [json!({"n": 4, "seed": 9}), json!({"temperature": 0.0})] {
                let mut base = json!({"min_tokens": 5, "max_tokens": 10});
                base.as_object_mut()
                    .expect("object")
                    .extend(sampling.as_object().expect("object").clone());
                let body = body_for(path, base, constraint);
                let (status, response) = t.post(path, &body);
                assert_eq!(status, 200, "{body}: {response}");
                for (text, reason) in choice_texts(&response) {
                    assert!(allowed.contains(&text.as_str()), "{body} produced {text:?}");
                    assert_eq!(reason, "stop", "{body}");
                }
            }
        }
    }
}

#[test]
fn a_constrained_and_a_free_request_share_a_batch() {
    let t = start_tiny(|_| {});
    let free = json!({"prompt": "go", "max_tokens": 24, "temperature": 1.0, "ignore_eos": true, "n": 2});
    std::thread::scope(|s| {
        let constrained = s.spawn(|| {
            let body = json!({"prompt": "go", "max_tokens": 40, "guided_choice": ["yes", "no"], "n": 4});
            t.post("/v1/completions", &body)
        });
        let (status, beside) = t.post("/v1/completions", &free);
        assert_eq!(status, 200);
        assert_eq!(
            beside["usage"]["completion_tokens"], 48,
            "the free choices run unconstrained to the end"
        );
        let (status, response) = constrained.join().expect("thread");
        assert_eq!(status, 200, "{response}");
        for (text, _) in choice_texts(&response) {
            assert!(text == "yes" || text == "no", "{text}");
        }
    });
}

#[test]
#[ignore = "needs KILN_TEST_PYTHON with the openai client; .ci/run provides it"]
fn the_openai_clients_parse_with_a_pydantic_model_gets_valid_objects() {
    let t = start();
    let stdout = crate::openai_client::run_openai_script("openai_structured_check.py", &t.server.url("/v1"));
    assert!(stdout.contains("parsed 5 answers"), "{stdout}");
}
