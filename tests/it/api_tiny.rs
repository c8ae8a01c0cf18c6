//! The real server on a tiny random-weight model: every endpoint, streaming, errors,
//! disconnects, and the engine gauges.

use std::io::Read;

use std::time::Duration;

use crate::common::{metric_value, scrape_until, start_fake, start_tiny};
use kiln::executor::fake::FakeBehaviour;
use serde_json::{Value, json};

fn completion_text(v: &Value) -> &str {
    v["choices"][0]["text"].as_str().expect("text")
}

#[test]
fn models_health_version_and_metrics_endpoints_answer() {
    let t = start_tiny(|_| {});
    let (status, body) = t.get_text("/v1/models");
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "tiny-llama");
    assert_eq!(t.get_text("/health").0, 200);
    let (status, body) = t.get_text("/version");
    assert_eq!(status, 200);
    assert!(body.contains(env!("CARGO_PKG_VERSION")));
    let resp = t.client.get(t.server.url("/metrics")).send().expect("metrics");
    assert_eq!(
        resp.headers()["content-type"].to_str().expect("ascii"),
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = resp.text().expect("body");
    for gauge in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:num_requests_swapped",
        "vllm:gpu_cache_usage_perc",
        "vllm:cpu_cache_usage_perc",
        "vllm:avg_prompt_throughput_toks_per_s",
        "vllm:avg_generation_throughput_toks_per_s",
    ] {
        assert!(
            metric_value(&text, gauge, "model_name=\"tiny-llama\"").is_some(),
            "{gauge} missing from /metrics:\n{text}"
        );
    }
}

#[test]
fn completion_greedy_is_deterministic_and_streaming_matches() {
    let t = start_tiny(|_| {});
    let body = json!({"prompt": "hello world", "max_tokens": 12, "temperature": 0, "ignore_eos": true});
    let (status, a) = t.post("/v1/completions", &body);
    assert_eq!(status, 200, "{a}");
    let (_, b) = t.post("/v1/completions", &body);
    assert_eq!(completion_text(&a), completion_text(&b));
    assert_eq!(a["object"], "text_completion");
    assert_eq!(a["usage"]["completion_tokens"], 12);
    assert_eq!(a["choices"][0]["finish_reason"], "length");
    // The tiny vocabulary is byte-level: "hello world" is 11 tokens at most.
    let prompt_tokens = a["usage"]["prompt_tokens"].as_u64().expect("usage");
    assert!((1..=11).contains(&prompt_tokens));

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let events = t.stream("/v1/completions", &streamed);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).expect("chunk json"))
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0).and_then(|ch| ch["text"].as_str()))
        .collect();
    assert_eq!(text, completion_text(&a));
    let usage = &chunks.last().expect("usage chunk")["usage"];
    assert_eq!(usage["completion_tokens"], 12);
    assert_eq!(usage["prompt_tokens"], prompt_tokens);
}

#[test]
fn chat_streaming_sends_role_then_content_then_finish() {
    let t = start_tiny(|_| {});
    let body = json!({
        "model": "tiny-llama",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "max_tokens": 8, "temperature": 0
    });
    let (status, full) = t.post("/v1/chat/completions", &body);
    assert_eq!(status, 200, "{full}");
    assert_eq!(full["object"], "chat.completion");
    let content = full["choices"][0]["message"]["content"]
        .as_str()
        .expect("content")
        .to_string();
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let events = t.stream("/v1/chat/completions", &streamed);
    let chunks: Vec<Value> = events
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).expect("json"))
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(chunks[0]["object"], "chat.completion.chunk");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, content);
    assert_eq!(
        chunks.last().expect("chunks")["choices"][0]["finish_reason"],
        full["choices"][0]["finish_reason"]
    );
}

#[test]
fn sampling_options_seed_n_logprobs_and_stop_strings() {
    let t = start_tiny(|_| {});
    let seeded = json!({"prompt": "abc", "max_tokens": 10, "temperature": 1.0, "seed": 42});
    let (_, a) = t.post("/v1/completions", &seeded);
    let (_, b) = t.post("/v1/completions", &seeded);
    assert_eq!(completion_text(&a), completion_text(&b));

    let (status, many) = t.post(
        "/v1/completions",
        &json!({"prompt": ["ab", "cd"], "n": 2, "max_tokens": 3, "ignore_eos": true}),
    );
    assert_eq!(status, 200, "{many}");
    let mut indices: Vec<u64> = many["choices"]
        .as_array()
        .expect("choices")
        .iter()
        .map(|c| c["index"].as_u64().expect("index"))
        .collect();
    indices.sort_unstable();
    assert_eq!(indices, vec![0, 1, 2, 3]);
    assert_eq!(many["usage"]["completion_tokens"], 12);

    let (_, lp) = t.post(
        "/v1/completions",
        &json!({"prompt": "abc", "max_tokens": 4, "temperature": 0, "logprobs": 3, "ignore_eos": true}),
    );
    let logprobs = &lp["choices"][0]["logprobs"];
    assert_eq!(logprobs["tokens"].as_array().expect("tokens").len(), 4);
    // A map keyed by token text: byte tokens that decode to the same text share a key.
    let top = logprobs["top_logprobs"][0].as_object().expect("map").len();
    assert!((1..=3).contains(&top), "{logprobs}");
    let first = logprobs["token_logprobs"][0].as_f64().expect("logprob");
    let best = logprobs["top_logprobs"][0]
        .as_object()
        .expect("map")
        .values()
        .map(|v| v.as_f64().expect("f64"))
        .fold(f64::MIN, f64::max);
    assert!(
        (first - best).abs() < 1e-4,
        "greedy token is the top-1: {first} vs {best}"
    );

    let (_, chat) = t.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 3, "temperature": 0, "logprobs": true, "top_logprobs": 2, "ignore_eos": true}),
    );
    assert_eq!(
        chat["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
            .as_array()
            .expect("top")
            .len(),
        2
    );

    // Cut the greedy text at a substring in its middle: the answer ends just before it.
    let (_, plain) = t.post(
        "/v1/completions",
        &json!({"prompt": "hello", "max_tokens": 16, "temperature": 0, "ignore_eos": true}),
    );
    let text = completion_text(&plain).to_string();
    let cut = text
        .char_indices()
        .nth(text.chars().count() / 2)
        .map(|(i, _)| i)
        .expect("non-empty text");
    let stop: String = text[cut..].chars().take(2).collect();
    let expected = &text[..text.find(&stop).expect("stop occurs")];
    let (_, stopped) = t.post(
        "/v1/completions",
        &json!({"prompt": "hello", "max_tokens": 16, "temperature": 0, "ignore_eos": true, "stop": [stop]}),
    );
    assert_eq!(completion_text(&stopped), expected);
    assert_eq!(stopped["choices"][0]["finish_reason"], "stop");
}

#[test]
fn bad_requests_get_openai_errors_never_500() {
    let t = start_tiny(|c| c.server.max_request_body_bytes = 4096);
    let check = |status: u16, body: &Value, want_status: u16, param: Option<&str>| {
        assert_eq!(status, want_status, "{body}");
        let err = &body["error"];
        assert!(err["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
        assert!(err["type"].is_string(), "{body}");
        if let Some(p) = param {
            assert_eq!(err["param"], p, "{body}");
        }
    };
    let (s, b) = t.post("/v1/completions", &json!({"prompt": "x", "temperature": 9}));
    check(s, &b, 400, Some("temperature"));
    let (s, b) = t.post("/v1/completions", &json!({"prompt": "x", "model": "gpt-5"}));
    check(s, &b, 404, None);
    let (s, b) = t.post("/v1/completions", &json!({"prompt": "x", "max_tokens": 100000}));
    check(s, &b, 400, None);
    assert_eq!(b["error"]["code"], "context_length_exceeded");
    let (s, b) = t.post("/v1/completions", &json!({"prompt": [[1, 2, 99999]]}));
    check(s, &b, 400, Some("prompt"));
    let (s, b) = t.post("/v1/chat/completions", &json!({"messages": []}));
    check(s, &b, 400, None);

    let raw = t
        .client
        .post(t.server.url("/v1/completions"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .expect("send");
    let status = raw.status().as_u16();
    check(status, &raw.json().expect("json"), 400, None);
    let huge = json!({"prompt": "y".repeat(10_000)});
    let (s, b) = t.post("/v1/completions", &huge);
    check(s, &b, 413, None);
    let (s, b) = t.get_text("/v2/nothing");
    check(s, &serde_json::from_str(&b).expect("json"), 404, None);
    let (s, b) = t.get_text("/v1/completions");
    check(s, &serde_json::from_str(&b).expect("json"), 405, None);
}

#[test]
fn a_dropped_stream_is_aborted_and_frees_its_blocks() {
    // 5 ms a step and 200 tokens: the request is certainly still running when dropped.
    let slow = FakeBehaviour {
        step_delay: Duration::from_millis(5),
        ..Default::default()
    };
    let t = start_fake(slow, |_| {});
    let body = json!({"prompt": "long", "max_tokens": 200, "ignore_eos": true, "stream": true});
    let mut resp = t
        .client
        .post(t.server.url("/v1/completions"))
        .json(&body)
        .send()
        .expect("send");
    let mut first = [0u8; 64];
    let n = resp.read(&mut first).expect("first bytes");
    assert!(n > 0);
    let busy = t.wait_for_load(|l| l["running"] == 1);
    assert!(busy["kv_cache_usage"].as_f64().expect("usage") > 0.0, "{busy}");
    drop(resp);
    let idle = t.wait_for_load(|l| l["running"] == 0 && l["kv_cache_usage"] == 0.0);
    assert_eq!(idle["running"], 0, "{idle}");
    assert_eq!(idle["kv_cache_usage"], 0.0, "{idle}");
    let abort = |m: &str| metric_value(m, "vllm:request_success_total", "finished_reason=\"abort\"");
    let metrics = scrape_until(&t, |m| abort(m) == Some(1.0));
    let aborted = abort(&metrics);
    assert_eq!(aborted, Some(1.0), "{metrics}");
}

#[test]
fn a_sequence_gives_the_same_greedy_output_alone_and_in_a_batch() {
    let t = start_tiny(|_| {});
    let target = json!({"prompt": "the quick brown fox", "max_tokens": 16, "temperature": 0, "ignore_eos": true});
    let (_, alone) = t.post("/v1/completions", &target);
    let others = [
        ("a", 40),
        ("bb bb bb bb", 30),
        ("a much longer prompt than the others, by far", 20),
    ];
    std::thread::scope(|scope| {
        let handles: Vec<_> = others
            .iter()
            .map(|(p, n)| {
                let t = &t;
                scope.spawn(move || {
                    t.post(
                        "/v1/completions",
                        &json!({"prompt": p, "max_tokens": n, "ignore_eos": true}),
                    )
                })
            })
            .collect();
        let (_, batched) = t.post("/v1/completions", &target);
        assert_eq!(completion_text(&batched), completion_text(&alone));
        for h in handles {
            assert_eq!(h.join().expect("thread").0, 200);
        }
    });
}

#[test]
fn chunked_prefill_gives_the_same_greedy_output_as_one_pass() {
    // 150 prompt tokens against a 32-token step budget: five chunks, four without logits.
    let prompt: Vec<u32> = (0..150).map(|i| 3 + (i * 7) % 250).collect();
    let body = json!({"prompt": prompt, "max_tokens": 12, "temperature": 0, "ignore_eos": true});
    let whole = start_tiny(|_| {});
    let (_, a) = whole.post("/v1/completions", &body);
    let chunked = start_tiny(|c| {
        c.engine.max_num_batched_tokens = 32;
        c.engine.max_num_seqs = 4;
    });
    let (status, b) = chunked.post("/v1/completions", &body);
    assert_eq!(status, 200, "{b}");
    assert_eq!(completion_text(&a), completion_text(&b));
    assert_eq!(b["usage"]["prompt_tokens"], 150);
}

#[test]
fn async_scheduling_gives_the_same_outputs_as_scheduling_after_each_step() {
    // Greedy, a penalty (which reads the generated tokens, the pending one included), and
    // seeded sampling (whose random stream is indexed by the number of generated tokens).
    let bodies = [
        json!({"prompt": "the quick brown fox", "max_tokens": 24, "temperature": 0, "ignore_eos": true}),
        json!({"prompt": "bb bb bb", "max_tokens": 24, "temperature": 0, "frequency_penalty": 1.5,
               "repetition_penalty": 1.3, "ignore_eos": true}),
        json!({"prompt": "a longer prompt, sampled", "max_tokens": 24, "temperature": 0.9, "top_p": 0.9,
               "seed": 1234, "n": 2, "presence_penalty": 0.7, "ignore_eos": true}),
    ];
    let run_all = |t: &crate::common::Tiny| -> Vec<Value> {
        std::thread::scope(|scope| {
            let handles: Vec<_> = bodies
                .iter()
                .map(|body| scope.spawn(move || t.post("/v1/completions", body)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    let (status, body) = h.join().expect("thread");
                    assert_eq!(status, 200, "{body}");
                    body["choices"].clone()
                })
                .collect()
        })
    };
    let after_each_step = run_all(&start_tiny(|c| c.engine.async_scheduling = false));
    let ahead = run_all(&start_tiny(|c| c.engine.async_scheduling = true));
    for (a, b) in after_each_step.iter().zip(&ahead) {
        assert_eq!(a, b);
    }
    let texts: Vec<&str> = after_each_step
        .iter()
        .flat_map(|choices| choices.as_array().expect("choices"))
        .map(|c| c["text"].as_str().expect("text"))
        .collect();
    assert_eq!(texts.len(), 4);
    assert!(texts.iter().all(|t| !t.is_empty()), "{texts:?}");
}
