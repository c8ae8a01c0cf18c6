//! Capacity, fan-out limits and overload, against the real server: a request over a limit or
//! one that could never be admitted gets 400 naming its parameter; a burst beyond the waiting
//! queue gets only 200s and 429s with a `Retry-After`, never a 5xx or a dropped connection.

use std::time::Duration;

use kiln::config::Config;
use kiln::executor::fake::{FakeBehaviour, FakeExecutor};
use kiln::model::loader::open_model;
use kiln::server::prepare_engine;
use kiln::testing::{TinyModelSpec, write_tiny_model};
use serde_json::{Value, json};

use crate::common::{start_fake, start_tiny};

/// Asserts an OpenAI-style 400 that names `param`.
fn assert_invalid(status: u16, body: &Value, param: &str) {
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], param, "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
}

#[test]
fn each_limit_refuses_with_400_naming_its_parameter() {
    let t = start_fake(FakeBehaviour::default(), |c| {
        c.limits.max_choices_per_request = 8;
        c.limits.max_stop_bytes = 16;
        c.limits.max_stop_token_ids = 4;
        c.limits.max_prompt_bytes = 64;
    });
    let cases = [
        (
            "/v1/completions",
            json!({"prompt": ["a", "b", "c"], "n": 3, "max_tokens": 1}),
            "n",
        ),
        (
            "/v1/completions",
            json!({"prompt": vec!["a"; 9], "max_tokens": 1}),
            "prompt",
        ),
        (
            "/v1/completions",
            json!({"prompt": [[1], [2], [3]], "n": 3, "max_tokens": 1}),
            "n",
        ),
        (
            "/v1/completions",
            json!({"prompt": "x".repeat(65), "max_tokens": 1}),
            "prompt",
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "stop": ["0123456789", "0123456"]}),
            "stop",
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "stop_token_ids": [1, 2, 3, 4, 5]}),
            "stop_token_ids",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "y".repeat(40)},
                                {"role": "user", "content": [{"type": "text", "text": "z".repeat(25)}]}]}),
            "messages",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "hi"}], "n": 9, "max_tokens": 1}),
            "n",
        ),
    ];
    for (path, body, param) in cases {
        let (status, answer) = t.post(path, &body);
        assert_invalid(status, &answer, param);
    }
    // At the limits, the same requests are served.
    let at_limits = [
        (
            "/v1/completions",
            json!({"prompt": ["a", "b"], "n": 4, "max_tokens": 1}),
        ),
        ("/v1/completions", json!({"prompt": "x".repeat(64), "max_tokens": 1})),
        (
            "/v1/completions",
            json!({"prompt": "x", "max_tokens": 1, "stop": ["01234567", "01234567"]}),
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "max_tokens": 1, "stop_token_ids": [1, 2, 3, 4]}),
        ),
    ];
    for (path, body) in at_limits {
        let (status, answer) = t.post(path, &body);
        assert_eq!(status, 200, "{body} -> {answer}");
    }
}

#[test]
fn the_context_is_clamped_to_a_small_cache_and_longer_requests_are_400() {
    // 8 blocks of 16: the cache holds 128 tokens for one sequence, less than the 256 context.
    let t = start_fake(FakeBehaviour::default(), |c| {
        c.engine.num_gpu_blocks_override = 8;
        c.engine.block_size = 16;
    });
    let (_, models) = t.get_text("/v1/models");
    let models: Value = serde_json::from_str(&models).expect("json");
    assert_eq!(models["data"][0]["max_model_len"], 128, "{models}");
    let (status, body) = t.post(
        "/v1/completions",
        &json!({"prompt": "hello", "max_tokens": 200, "ignore_eos": true}),
    );
    assert_invalid(status, &body, "max_tokens");
    let (status, body) = t.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 200}),
    );
    assert_invalid(status, &body, "max_completion_tokens");
    // Without max_tokens, chat asks for the rest of the (clamped) context and is served.
    let (status, body) = t.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "ignore_eos": true}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["finish_reason"], "length", "{body}");
    // Every later request is still served: nothing is stuck behind the long one.
    let (status, body) = t.post("/v1/completions", &json!({"prompt": "again", "max_tokens": 4}));
    assert_eq!(status, 200, "{body}");
}

#[test]
fn an_explicit_context_larger_than_the_cache_refuses_to_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model_path = write_tiny_model(dir.path(), TinyModelSpec::default()).expect("tiny model");
    let mut config = Config::default();
    config.model.path = model_path.display().to_string();
    config.engine.num_gpu_blocks_override = 8;
    config.engine.max_model_len = 200;
    let files = open_model(&model_path).expect("open");
    let vocab = files.config.vocab_size as u32;
    let err = match prepare_engine(
        &config,
        files,
        "tiny".into(),
        FakeExecutor::new(vocab, FakeBehaviour::default()),
    ) {
        Ok(_) => panic!("a 200-token context on a 128-token cache must be refused"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("--max-model-len") && err.contains("--kv-cache-memory"),
        "{err}"
    );
}

#[test]
fn a_burst_beyond_the_queue_gets_only_200s_and_429s_with_retry_after() {
    const MAX_WAITING: usize = 16;
    let slow = FakeBehaviour {
        step_delay: Duration::from_millis(2),
        ..Default::default()
    };
    let t = start_fake(slow, |c| {
        c.engine.max_waiting = MAX_WAITING;
        c.engine.max_num_seqs = 4;
    });
    let outcomes: Vec<(u16, Option<String>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..5 * MAX_WAITING)
            .map(|i| {
                let t = &t;
                scope.spawn(move || {
                    let resp = t
                        .client
                        .post(t.server.url("/v1/completions"))
                        .json(&json!({"prompt": format!("burst {i}"), "max_tokens": 16, "ignore_eos": true}))
                        .send()
                        .expect("every request gets an answer, none is dropped");
                    let status = resp.status().as_u16();
                    let retry = resp
                        .headers()
                        .get("retry-after")
                        .map(|v| v.to_str().expect("ascii").to_owned());
                    let body: Value = resp.json().expect("json body");
                    if status == 429 {
                        assert_eq!(body["error"]["type"], "rate_limit_exceeded", "{body}");
                    }
                    (status, retry)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    let served = outcomes.iter().filter(|(s, _)| *s == 200).count();
    let refused: Vec<_> = outcomes.iter().filter(|(s, _)| *s == 429).collect();
    assert_eq!(served + refused.len(), outcomes.len(), "only 200 and 429: {outcomes:?}");
    assert!(
        served >= MAX_WAITING,
        "at least the queue's worth is served: {outcomes:?}"
    );
    assert!(
        !refused.is_empty(),
        "5x the queue at once must overflow it: {outcomes:?}"
    );
    for (_, retry) in refused {
        let retry = retry.as_deref().expect("429 carries Retry-After");
        assert!(retry.parse::<u32>().is_ok_and(|s| s >= 1), "integer seconds: {retry}");
    }
    t.wait_for_load(|l| l["running"] == 0 && l["waiting"] == 0 && l["kv_cache_usage"] == 0.0);
}

#[test]
fn a_tiny_model_server_serves_after_a_refused_burst() {
    // The real tiny model, not the fake: limits apply before the model is involved.
    let t = start_tiny(|c| c.limits.max_choices_per_request = 2);
    let (status, body) = t.post("/v1/completions", &json!({"prompt": ["a", "b"], "n": 2}));
    assert_invalid(status, &body, "n");
    let (status, body) = t.post("/v1/completions", &json!({"prompt": ["a", "b"], "max_tokens": 2}));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"].as_array().map(Vec::len), Some(2), "{body}");
}
