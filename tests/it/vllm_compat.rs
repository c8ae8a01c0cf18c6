//! vLLM compatibility beyond the names: prometheus-fastapi-instrumentator's HTTP families
//! and the prompt tokens served from the prefix cache, in responses and in the counters.

use serde_json::json;

use crate::common::{Tiny, metric_value, scrape_until, start_tiny};

/// The value of the one series of `name` carrying every label in `labels`.
fn series(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse().ok())
        .collect();
    assert!(
        matching.len() <= 1,
        "{name} {labels:?} matches {} series",
        matching.len()
    );
    matching.first().copied()
}

fn sum_over(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[test]
fn the_instrumentators_http_families_group_statuses_and_skip_vllms_excluded_handlers() {
    let t = start_tiny(|_| {});
    let (s, _) = t.post("/v1/completions", &json!({"prompt": "abc", "max_tokens": 2}));
    assert_eq!(s, 200);
    let (s, _) = t.post("/v1/completions", &json!({"prompt": "abc", "max_tokens": -1}));
    assert_eq!(s, 400);
    for path in ["/v1/models", "/health", "/version", "/load", "/no/such/path"] {
        t.get_text(path);
    }
    let requests = "http_requests_total";
    let text = scrape_until(&t, |m| {
        series(m, requests, &[("handler", "none")]).is_some()
            && series(m, requests, &[("handler", "/v1/models")]).is_some()
    });
    let completions = [("handler", "/v1/completions"), ("method", "POST")];
    let with = |status| [completions[0], completions[1], ("status", status)];
    assert_eq!(series(&text, requests, &with("2xx")), Some(1.0), "{text}");
    assert_eq!(series(&text, requests, &with("4xx")), Some(1.0));
    let unmatched = [("handler", "none"), ("method", "GET"), ("status", "4xx")];
    assert_eq!(series(&text, requests, &unmatched), Some(1.0));
    for excluded in ["/health", "/version", "/load", "/metrics"] {
        assert!(
            !text.contains(&format!("handler=\"{excluded}\"")),
            "{excluded} is recorded:\n{text}"
        );
    }
    // Three recorded requests: the two completions and /v1/models, plus the unmatched path.
    assert_eq!(sum_over(&text, requests), 4.0);
    let duration = "http_request_duration_seconds_count";
    assert_eq!(series(&text, duration, &completions), Some(2.0));
    assert!(text.contains("# TYPE http_request_duration_seconds histogram"));
    assert!(
        text.contains("http_request_duration_seconds_bucket{handler=\"/v1/completions\",method=\"POST\",le=\"0.1\"}")
    );
    assert_eq!(
        metric_value(&text, "http_request_duration_highr_seconds_count", ""),
        Some(4.0)
    );
    let size = "http_request_size_bytes_count";
    assert_eq!(series(&text, size, &[("handler", "/v1/completions")]), Some(2.0));
    let body_bytes = series(&text, "http_request_size_bytes_sum", &[("handler", "/v1/completions")]);
    assert!(body_bytes.is_some_and(|b| b > 40.0), "{body_bytes:?}");
    let sent = series(&text, "http_response_size_bytes_sum", &[("handler", "/v1/models")]);
    assert!(sent.is_some_and(|b| b > 0.0), "{sent:?}");
}

fn cached_tokens(usage: &serde_json::Value) -> u64 {
    usage["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or_else(|| panic!("no cached_tokens in {usage}"))
}

/// Posts `prompt` and returns (prompt tokens, cached tokens) from its usage.
fn complete(t: &Tiny, prompt: &str) -> (u64, u64) {
    let (s, v) = t.post("/v1/completions", &json!({"prompt": prompt, "max_tokens": 2}));
    assert_eq!(s, 200, "{v}");
    (
        v["usage"]["prompt_tokens"].as_u64().expect("prompt_tokens"),
        cached_tokens(&v["usage"]),
    )
}

#[test]
fn a_repeated_prompt_reports_its_cached_tokens_in_usage_and_in_the_counters() {
    let t = start_tiny(|c| c.engine.enable_prefix_caching = true);
    let prompt = "a long shared system prompt, the same every time ".repeat(3);
    let (prompt_tokens, first) = complete(&t, &prompt);
    assert!(
        prompt_tokens > 32,
        "{prompt_tokens} prompt tokens: make the prompt longer"
    );
    assert_eq!(first, 0, "nothing cached yet");
    let (_, second) = complete(&t, &prompt);
    assert!(
        second >= 16 && second < prompt_tokens && second % 16 == 0,
        "{second} of {prompt_tokens}"
    );
    // Streamed, with the usage chunk.
    let events = t.stream(
        "/v1/completions",
        &json!({"prompt": prompt, "max_tokens": 2, "stream": true, "stream_options": {"include_usage": true}}),
    );
    let usage_chunk = events
        .iter()
        .filter_map(|e| serde_json::from_str::<serde_json::Value>(e).ok())
        .find(|v| !v["usage"].is_null())
        .expect("a usage chunk");
    let streamed = cached_tokens(&usage_chunk["usage"]);
    assert_eq!(streamed, second);

    let cached = (second + streamed) as f64;
    let text = scrape_until(&t, |m| {
        metric_value(m, "vllm:e2e_request_latency_seconds_count", "") == Some(3.0)
    });
    assert_eq!(metric_value(&text, "vllm:prompt_tokens_cached_total", ""), Some(cached));
    assert_eq!(metric_value(&text, "vllm:prefix_cache_hits_total", ""), Some(cached));
    assert_eq!(
        metric_value(&text, "vllm:prefix_cache_queries_total", ""),
        Some(3.0 * prompt_tokens as f64)
    );
    let by_source = "vllm:prompt_tokens_by_source_total";
    assert_eq!(series(&text, by_source, &[("source", "local_cache_hit")]), Some(cached));
    assert_eq!(
        Some(sum_over(&text, by_source)),
        metric_value(&text, "vllm:prompt_tokens_total", ""),
        "the sources add up to the prompt tokens"
    );
    let computed = "vllm:request_prefill_kv_computed_tokens_sum";
    assert_eq!(
        metric_value(&text, computed, ""),
        Some(3.0 * prompt_tokens as f64 - cached)
    );
}
