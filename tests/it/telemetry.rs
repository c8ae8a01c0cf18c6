//! The METRICS.md contract, end to end through a real server: names, types, labels,
//! invariants, exposition, series bounds, load gauges, per-request figures, push over OTLP.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::time::Duration;

use kiln::executor::fake::FakeBehaviour;
use serde_json::{Value, json};

use crate::common::{Tiny, metric_value, scrape_until, start_fake, start_tiny};

/// `# TYPE` of every family in an exposition.
fn families(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect()
}

/// Every series (name + labels) of an exposition.
fn series(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.rsplit_once(' ').map(|(s, _)| s.to_string()))
        .collect()
}

fn sum_over(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

const ENGINE: &[(&str, &str)] = &[
    ("num_requests_running", "gauge"),
    ("num_requests_waiting", "gauge"),
    ("num_requests_swapped", "gauge"),
    ("kv_cache_usage_perc", "gauge"),
    ("gpu_cache_usage_perc", "gauge"),
    ("cpu_cache_usage_perc", "gauge"),
    ("avg_prompt_throughput_toks_per_s", "gauge"),
    ("avg_generation_throughput_toks_per_s", "gauge"),
    ("cache_config_info", "gauge"),
    ("prompt_tokens_total", "counter"),
    ("generation_tokens_total", "counter"),
    ("request_success_total", "counter"),
    ("num_preemptions_total", "counter"),
    ("prefix_cache_queries_total", "counter"),
    ("prefix_cache_hits_total", "counter"),
    ("admission_rejections_total", "counter"),
    ("time_to_first_token_seconds", "histogram"),
    ("inter_token_latency_seconds", "histogram"),
    ("request_time_per_output_token_seconds", "histogram"),
    ("e2e_request_latency_seconds", "histogram"),
    ("request_queue_time_seconds", "histogram"),
    ("request_prefill_time_seconds", "histogram"),
    ("request_decode_time_seconds", "histogram"),
    ("request_inference_time_seconds", "histogram"),
    ("request_prompt_tokens", "histogram"),
    ("request_generation_tokens", "histogram"),
    ("request_params_max_tokens", "histogram"),
    ("request_max_num_generation_tokens", "histogram"),
    ("request_params_n", "histogram"),
    ("request_num_preemptions", "histogram"),
    ("iteration_tokens_total", "histogram"),
];

const OTHERS: &[(&str, &str)] = &[
    ("gen_ai_server_request_duration_seconds", "histogram"),
    ("gen_ai_server_time_to_first_token_seconds", "histogram"),
    ("gen_ai_server_time_per_output_token_seconds", "histogram"),
    ("http_server_request_duration_seconds", "histogram"),
    ("http_server_active_requests", "gauge"),
    ("http_server_request_body_size_bytes", "histogram"),
    ("http_server_response_body_size_bytes", "histogram"),
    ("process_cpu_seconds_total", "counter"),
    ("process_resident_memory_bytes", "gauge"),
    ("process_virtual_memory_bytes", "gauge"),
    ("process_open_fds", "gauge"),
    ("process_max_fds", "gauge"),
    ("process_start_time_seconds", "gauge"),
    ("process_threads", "gauge"),
    ("target_info", "gauge"),
];

/// A mixed load: completions, chat, streaming, n=2, and one stream dropped mid-way.
/// Returns the number of engine requests it made.
fn mixed_load(t: &Tiny) -> usize {
    let (s, _) = t.post("/v1/completions", &json!({"prompt": "abc", "max_tokens": 5}));
    assert_eq!(s, 200);
    let (s, _) = t.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}),
    );
    assert_eq!(s, 200);
    let events = t.stream(
        "/v1/completions",
        &json!({"prompt": "abc", "max_tokens": 3, "stream": true}),
    );
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let (s, _) = t.post("/v1/completions", &json!({"prompt": "xy", "max_tokens": 2, "n": 2}));
    assert_eq!(s, 200);
    let mut dropped = t
        .client
        .post(t.server.url("/v1/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": "long"}], "max_tokens": 150, "stream": true}))
        .send()
        .expect("stream");
    // Past the role chunk to the first token: the request has finished its prefill, so the
    // prompt-token invariant of METRICS.md holds for it (a client gone sooner is aborted
    // before its prefill).
    let mut seen = Vec::new();
    let mut chunk = [0u8; 256];
    while seen.windows(6).filter(|w| w == b"data: ").count() < 2 {
        let n = dropped.read(&mut chunk).expect("stream bytes");
        assert!(n > 0, "the stream ended early");
        seen.extend_from_slice(&chunk[..n]);
    }
    drop(dropped);
    6
}

#[test]
fn the_metrics_contract_holds_after_a_mixed_load() {
    let slow = FakeBehaviour {
        step_delay: Duration::from_millis(2),
        ..Default::default()
    };
    let t = start_fake(slow, |_| {});
    let n = mixed_load(&t);
    let text = scrape_until(&t, |m| {
        metric_value(m, "vllm:e2e_request_latency_seconds_count", "").unwrap_or(0.0) >= n as f64
            && metric_value(m, "vllm:num_requests_running", "") == Some(0.0)
    });
    let types = families(&text);
    for (name, kind) in ENGINE {
        let full = format!("vllm:{name}");
        assert_eq!(types.get(&full).map(String::as_str), Some(*kind), "{full}:\n{text}");
    }
    for (name, kind) in OTHERS {
        assert_eq!(types.get(*name).map(String::as_str), Some(*kind), "{name}:\n{text}");
    }
    // Labels: engine series carry model_name and engine; no series carries otel_scope_*.
    // As vLLM's: engine health has its engine alone, and the API server's families
    // (admission, failures) their model alone.
    for s in series(&text).iter().filter(|s| s.starts_with("vllm:")) {
        let model = s.contains("model_name=\"tiny-llama\"");
        let engine = s.contains("engine=\"0\"");
        if s.starts_with("vllm:engine_healthy{") {
            assert!(engine && !model, "{s}");
        } else if s.starts_with("vllm:admission_rejections_total{") || s.starts_with("vllm:request_failure_total{") {
            assert!(model && !engine, "{s}");
        } else {
            assert!(model && engine, "{s}");
        }
    }
    assert!(!text.contains("otel_scope_"), "otel_scope labels leaked");
    assert!(text.lines().any(|l| l.starts_with("target_info{")
        && l.contains("service_name=\"kiln\"")
        && l.contains("service_version=")
        && l.contains("service_instance_id=")));
    assert!(text.contains("vllm:cache_config_info{block_size=\"16\""));
    assert!(
        text.contains("gen_ai_operation_name=\"chat\"") && text.contains("gen_ai_operation_name=\"text_completion\"")
    );
    assert!(text.contains("http_route=\"/v1/completions\""));

    // The invariants of METRICS.md.
    let success = sum_over(&text, "vllm:request_success_total");
    assert_eq!(success, n as f64, "request_success_total over reasons");
    assert_eq!(
        metric_value(&text, "vllm:e2e_request_latency_seconds_count", ""),
        Some(n as f64)
    );
    assert_eq!(
        metric_value(&text, "vllm:request_success_total", "finished_reason=\"abort\""),
        Some(1.0)
    );
    assert_eq!(
        metric_value(&text, "vllm:request_generation_tokens_sum", ""),
        metric_value(&text, "vllm:generation_tokens_total", "")
    );
    assert_eq!(
        metric_value(&text, "vllm:request_prompt_tokens_sum", ""),
        metric_value(&text, "vllm:prompt_tokens_total", "")
    );
    for gauge in [
        "num_requests_running",
        "num_requests_waiting",
        "num_requests_swapped",
        "kv_cache_usage_perc",
        "gpu_cache_usage_perc",
        "cpu_cache_usage_perc",
    ] {
        assert_eq!(metric_value(&text, &format!("vllm:{gauge}"), ""), Some(0.0), "{gauge}");
    }
}

#[test]
fn exposition_content_type_gzip_and_a_separate_listener() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let t = start_tiny(|c| c.telemetry.metrics_listen = format!("127.0.0.1:{port}"));
    let resp = t
        .client
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .header("accept-encoding", "gzip")
        .send()
        .expect("metrics");
    assert_eq!(resp.headers()["content-encoding"], "gzip");
    assert_eq!(
        resp.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let separate = t
        .client
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .send()
        .expect("metrics listener");
    assert_eq!(separate.status().as_u16(), 200);
    let (public, _) = t.get_text("/metrics");
    assert_eq!(
        public, 404,
        "with a listener of its own, /metrics leaves the public port"
    );
    assert!(separate.text().expect("text").contains("vllm:num_requests_running{"));
    let other = t
        .client
        .get(format!("http://127.0.0.1:{port}/v1/models"))
        .send()
        .expect("other path");
    assert_eq!(
        other.status().as_u16(),
        404,
        "the metrics listener serves only /metrics"
    );
}

#[test]
fn random_paths_and_methods_add_no_series() {
    let t = start_tiny(|_| {});
    // Warm up every (method, status, route) the random traffic can reach.
    let (_, _) = t.get_text("/metrics");
    for method in ["GET", "POST", "BREW", "PROPFIND", "DELETE"] {
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        t.client.request(m, t.server.url("/warmup")).send().expect("warm-up");
    }
    let before = series(&scrape_until(&t, |m| {
        metric_value(
            m,
            "http_server_request_duration_seconds_count",
            "http_request_method=\"DELETE\"",
        )
        .is_some()
            && metric_value(
                m,
                "http_server_request_duration_seconds_count",
                "http_route=\"/metrics\"",
            )
            .is_some()
    }));
    let mut rng = 0x2545F4914F6CDD1Du64;
    for i in 0..1000u64 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let method = ["GET", "POST", "BREW", "PROPFIND", "DELETE"][(rng % 5) as usize];
        let path = format!("/{:x}/{i}?q={}", rng, rng >> 3);
        let _ = t
            .client
            .request(
                reqwest::Method::from_bytes(method.as_bytes()).expect("method"),
                t.server.url(&path),
            )
            .send()
            .expect("request");
    }
    let after = series(&scrape_until(&t, |m| {
        metric_value(
            m,
            "http_server_request_duration_seconds_count",
            "http_request_method=\"_OTHER\"",
        )
        .unwrap_or(0.0)
            >= 200.0
    }));
    let new: Vec<_> = after.difference(&before).filter(|s| s.starts_with("http_")).collect();
    assert!(new.is_empty(), "new HTTP series from random traffic: {new:?}");
}

#[test]
fn gauges_show_running_and_queued_requests_under_load() {
    let slow = FakeBehaviour {
        step_delay: Duration::from_millis(10),
        ..Default::default()
    };
    let t = start_fake(slow, |c| c.engine.max_num_seqs = 2);
    std::thread::scope(|scope| {
        for _ in 0..5 {
            scope.spawn(|| {
                t.post(
                    "/v1/completions",
                    &json!({"prompt": "q", "max_tokens": 60, "ignore_eos": true}),
                )
            });
        }
        let busy = scrape_until(&t, |m| {
            metric_value(m, "vllm:num_requests_running", "") == Some(2.0)
                && metric_value(m, "vllm:num_requests_waiting", "").unwrap_or(0.0) >= 1.0
        });
        assert_eq!(
            metric_value(&busy, "vllm:num_requests_running", ""),
            Some(2.0),
            "{busy}"
        );
        assert!(metric_value(&busy, "vllm:num_requests_waiting", "").unwrap_or(0.0) >= 1.0);
        assert!(metric_value(&busy, "vllm:kv_cache_usage_perc", "").unwrap_or(0.0) > 0.0);
        let load = t.get_text("/load").1;
        let load: Value = serde_json::from_str(&load).expect("json");
        assert!(load["running"].as_u64().expect("running") <= 2);
    });
}

#[test]
fn a_full_queue_gets_429_with_retry_after_and_is_counted() {
    let slow = FakeBehaviour {
        step_delay: Duration::from_millis(10),
        ..Default::default()
    };
    let t = start_fake(slow, |c| {
        c.engine.max_num_seqs = 1;
        c.engine.max_waiting = 1;
    });
    let long = json!({"prompt": "q", "max_tokens": 100, "ignore_eos": true});
    std::thread::scope(|scope| {
        let first = scope.spawn(|| t.post("/v1/completions", &long));
        t.wait_for_load(|l| l["running"] == 1);
        let second = scope.spawn(|| t.post("/v1/completions", &long));
        t.wait_for_load(|l| l["waiting"] == 1);
        let resp = t
            .client
            .post(t.server.url("/v1/completions"))
            .json(&long)
            .send()
            .expect("third");
        assert_eq!(resp.status().as_u16(), 429);
        assert!(resp.headers().contains_key("retry-after"));
        let body: Value = resp.json().expect("json");
        assert!(body["error"]["message"].as_str().is_some());
        assert_eq!(first.join().expect("first").0, 200);
        assert_eq!(second.join().expect("second").0, 200);
    });
    let text = scrape_until(&t, |m| {
        metric_value(m, "vllm:admission_rejections_total", "reason=\"queue_full\"") == Some(1.0)
    });
    assert_eq!(
        metric_value(&text, "vllm:admission_rejections_total", "reason=\"queue_full\""),
        Some(1.0)
    );
}

#[test]
fn an_executor_panic_fails_its_batch_and_the_server_carries_on() {
    // Token 200 in a prompt makes the fake executor panic.
    let t = start_fake(
        FakeBehaviour {
            panic_on_token: Some(200),
            ..Default::default()
        },
        |_| {},
    );
    let (status, body) = t.post("/v1/completions", &json!({"prompt": [1, 200, 3], "max_tokens": 4}));
    assert_eq!(status, 500, "{body}");
    assert_eq!(body["error"]["type"], "server_error");
    let (status, _) = t.post("/v1/completions", &json!({"prompt": [1, 2, 3], "max_tokens": 4}));
    assert_eq!(status, 200);
    // The stats actor hears of the second request's end after its client does: wait for it.
    let text = scrape_until(&t, |m| {
        metric_value(m, "vllm:request_success_total", "finished_reason=\"error\"") == Some(1.0)
            && metric_value(m, "vllm:e2e_request_latency_seconds_count", "") == Some(2.0)
    });
    assert_eq!(
        metric_value(&text, "vllm:request_success_total", "finished_reason=\"error\""),
        Some(1.0)
    );
    assert_eq!(metric_value(&text, "vllm:kv_cache_usage_perc", ""), Some(0.0));
}

#[test]
fn per_request_metrics_and_the_load_header() {
    let t = start_tiny(|c| c.server.enable_per_request_metrics = true);
    let (_, body) = t.post(
        "/v1/completions",
        &json!({"prompt": "abc", "max_tokens": 6, "ignore_eos": true}),
    );
    let m = &body["choices"][0]["metrics"];
    let ttft = m["time_to_first_token_s"].as_f64().expect("ttft");
    let e2e = m["e2e_s"].as_f64().expect("e2e");
    let decode = m["decode_s"].as_f64().expect("decode");
    let itl = m["mean_inter_token_latency_s"].as_f64().expect("itl");
    assert!(ttft > 0.0 && ttft <= e2e && decode <= e2e, "{m}");
    assert!(
        (itl * 5.0 - decode).abs() < 1e-9,
        "mean ITL is decode / (generated − 1): {m}"
    );
    assert!(m["output_tokens_per_s"].as_f64().expect("tps") > 0.0);
    let resp = t
        .client
        .get(t.server.url("/v1/models"))
        .header("endpoint-load-metrics-format", "TEXT")
        .send()
        .expect("models");
    let header = resp.headers()["endpoint-load-metrics"]
        .to_str()
        .expect("ascii")
        .to_string();
    assert!(
        header.starts_with("TEXT named_metrics.num_requests_running=0"),
        "{header}"
    );
    let plain = t.client.get(t.server.url("/v1/models")).send().expect("models");
    assert!(!plain.headers().contains_key("endpoint-load-metrics"));
    let off = start_tiny(|_| {});
    let (_, body) = off.post("/v1/completions", &json!({"prompt": "abc", "max_tokens": 2}));
    assert!(body["choices"][0].get("metrics").is_none());
}

#[test]
fn telemetry_can_be_switched_off() {
    let t = start_tiny(|c| c.telemetry.enabled = false);
    let (s, _) = t.post("/v1/completions", &json!({"prompt": "abc", "max_tokens": 2}));
    assert_eq!(s, 200);
    let (_, text) = t.get_text("/metrics");
    assert!(!text.contains("vllm:"), "{text}");
}

#[test]
fn a_lint_clean_prefix_replaces_vllm() {
    let t = start_tiny(|c| c.telemetry.engine_prefix = "kiln_".into());
    let (_, text) = t.get_text("/metrics");
    assert!(text.contains("kiln_num_requests_running{"));
    assert!(!text.contains("vllm:"));
}

#[test]
fn a_prompt_that_can_never_fit_the_cache_gets_400_at_the_door() {
    // 4 blocks of 16 tokens: the context (256) is clamped to the cache's 64 tokens, so a
    // 100-token prompt is refused by the API before it reaches the engine's admission.
    let t = start_fake(FakeBehaviour::default(), |c| c.engine.num_gpu_blocks_override = 4);
    let prompt: Vec<u32> = (0..100).map(|i| 3 + i % 200).collect();
    let (status, body) = t.post("/v1/completions", &json!({"prompt": prompt, "max_tokens": 4}));
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "prompt");
    assert_eq!(body["error"]["code"], "context_length_exceeded", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("64 tokens")),
        "{body}"
    );
}
