//! Chat templates come from the model or the operator, never from a request, and a hostile
//! one fails the request that ran it, with a clear error, while the server keeps serving.

use std::thread;
use std::time::{Duration, Instant};

use kiln::testing::TinyModelSpec;
use serde_json::{Value, json};

use crate::common::process::Launch;
use crate::common::{Tiny, start_tiny, start_tiny_spec};

/// A model template that misbehaves when the last message asks it to: loops of 10^10
/// iterations, a macro that calls itself, or gigabytes of output; ChatML otherwise.
const HOSTILE_TEMPLATE: &str = "{% macro deeper(n) %}{{ deeper(n + 1) }}{% endmacro %}\
{% set ask = messages[-1]['content'] %}\
{% if ask == 'loops' %}{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}\
{% elif ask == 'recursion' %}{{ deeper(0) }}\
{% elif ask == 'output' %}{% for i in range(100000) %}{{ 'x' * 1000000 }}{% endfor %}\
{% else %}{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}\
{{ '<|im_start|>assistant\n' }}{% endif %}";

/// Renders each message's content and nothing else, so the prompt is the content's tokens.
const BARE_TEMPLATE: &str = "{% for m in messages %}{{ m['content'] }}{% endfor %}";

/// How long one request against a hostile template may take before the test calls it hung.
const BOUNDED: Duration = Duration::from_secs(30);

fn chat(t: &Tiny, content: &str) -> (u16, Value, Duration) {
    let started = Instant::now();
    let body = json!({"messages": [{"role": "user", "content": content}], "max_tokens": 2});
    let (status, v) = t.post("/v1/chat/completions", &body);
    (status, v, started.elapsed())
}

#[test]
fn a_hostile_model_template_fails_its_request_with_a_500_and_the_server_keeps_serving() {
    let spec = TinyModelSpec {
        chat_template: HOSTILE_TEMPLATE,
        ..TinyModelSpec::default()
    };
    let t = start_tiny_spec(spec, |_| {});
    for (ask, limit) in [
        ("loops", "instruction budget"),
        ("recursion", "recursion limit"),
        ("output", "output size limit"),
    ] {
        let (status, v, took) = chat(&t, ask);
        assert_eq!(status, 500, "{ask}: {v}");
        assert!(took < BOUNDED, "{ask} took {took:?}");
        let error = &v["error"];
        assert_eq!(error["type"], "server_error", "{v}");
        assert_eq!(error["code"], "chat_template_error", "{v}");
        let message = error["message"].as_str().expect("message");
        assert!(
            message.contains("chat template") && message.contains(limit),
            "{message}"
        );
        // Nothing of the template itself reaches the client.
        for internal in ["{%", "range", "macro", "deeper", "line"] {
            assert!(!message.contains(internal), "{message}");
        }
    }

    // Hostile renders running at the same time do not hold up a normal request.
    let hostile: Vec<_> = (0..4)
        .map(|_| {
            let client = t.client.clone();
            let url = t.server.url("/v1/chat/completions");
            thread::spawn(move || {
                let body = json!({"messages": [{"role": "user", "content": "loops"}], "max_tokens": 2});
                client.post(url).json(&body).send().map(|r| r.status().as_u16())
            })
        })
        .collect();
    let (status, v, took) = chat(&t, "hello");
    assert_eq!(status, 200, "{v}");
    assert!(took < BOUNDED, "a normal request took {took:?} beside hostile ones");
    for h in hostile {
        assert_eq!(h.join().expect("thread").expect("response"), 500);
    }
    let (status, v) = t.post("/v1/completions", &json!({"prompt": "hello", "max_tokens": 2}));
    assert_eq!(status, 200, "{v}");
    let (status, v, _) = chat(&t, "hello again");
    assert_eq!(status, 200, "{v}");
}

#[test]
fn a_request_cannot_bring_its_own_template() {
    let t = start_tiny(|_| {});
    let body = json!({
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 1,
        "chat_template": "{% for i in range(100000) %}x{% endfor %}",
    });
    let (status, v) = t.post("/v1/chat/completions", &body);
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["param"], "chat_template");
}

/// The prompt tokens kiln counted for a one-message chat and for the same text as a
/// completion prompt.
fn prompt_tokens_chat_and_completion(client: &reqwest::blocking::Client, url: impl Fn(&str) -> String) -> (u64, u64) {
    let text = "hello there, tiny model";
    let post = |path: &str, body: Value| -> Value {
        let resp = client.post(url(path)).json(&body).send().expect("request");
        assert_eq!(resp.status().as_u16(), 200);
        resp.json().expect("json")
    };
    let chat = post(
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": text}], "max_tokens": 1}),
    );
    let completion = post("/v1/completions", json!({"prompt": text, "max_tokens": 1}));
    let tokens = |v: &Value| v["usage"]["prompt_tokens"].as_u64().expect("prompt_tokens");
    (tokens(&chat), tokens(&completion))
}

#[test]
fn chat_template_flag_with_a_file_replaces_the_models_template() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bare.jinja");
    std::fs::write(&file, BARE_TEMPLATE).expect("write template");
    let file = file.to_str().expect("utf-8 path").to_owned();
    let kiln = Launch::default().arg("--chat-template", &file).start();
    let client = reqwest::blocking::Client::new();
    let (chat, completion) = prompt_tokens_chat_and_completion(&client, |p| kiln.url(p));
    // The model's template adds a system turn and role markers; the operator's adds nothing.
    assert_eq!(chat, completion, "{}", kiln.logs());
}

#[test]
fn an_inline_chat_template_in_the_config_replaces_the_models_template() {
    let model_default = start_tiny(|_| {});
    let (chat, completion) = prompt_tokens_chat_and_completion(&model_default.client, |p| model_default.server.url(p));
    assert!(chat > completion, "the model's template adds its own text");
    let t = start_tiny(|c| c.model.chat_template = BARE_TEMPLATE.into());
    let (chat, completion) = prompt_tokens_chat_and_completion(&t.client, |p| t.server.url(p));
    assert_eq!(chat, completion);
}
