//! vLLM's metrics to the letter (issue 48), on a real server: every family from start-up,
//! vLLM's `iteration_tokens_total` and `request_num_preemptions`, `cache_config_info`'s
//! labels, the `name[]` filter in every exposition format, `request_failure_total`,
//! `--custom-histogram-buckets`, the KV-block bounds and `engine_healthy`'s labels.

use kiln::executor::fake::FakeBehaviour;
use kiln::stats::prom_proto::MetricFamily;
use prost::Message as _;
use serde_json::json;

use crate::common::{Tiny, metric_value, scrape_until, start_fake, start_tiny};

const OPENMETRICS: &str = "application/openmetrics-text;version=1.0.0";
const PROTOBUF: &str = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited";

/// Every histogram whose labels are known at start: vLLM registers them at start.
const START_HISTOGRAMS: &[&str] = &[
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_inference_time_seconds",
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:request_params_max_tokens",
    "vllm:request_max_num_generation_tokens",
    "vllm:request_params_n",
    "vllm:request_num_preemptions",
    "vllm:request_prefill_kv_computed_tokens",
    "vllm:iteration_tokens_total",
    "vllm:kv_block_lifetime_seconds",
    "vllm:kv_block_idle_before_evict_seconds",
    "vllm:kv_block_reuse_gap_seconds",
    "kiln_step_duration_seconds",
];

/// `/metrics` with `query` and `accept`; the status must be 200.
fn scrape(t: &Tiny, query: &str, accept: &str) -> reqwest::blocking::Response {
    let resp = t
        .client
        .get(t.server.url(&format!("/metrics{query}")))
        .header("accept", accept)
        .send()
        .expect("scrape");
    assert_eq!(resp.status().as_u16(), 200);
    resp
}

fn decode(bytes: &[u8]) -> Vec<MetricFamily> {
    let mut buf = bytes;
    let mut out = Vec::new();
    while !buf.is_empty() {
        out.push(MetricFamily::decode_length_delimited(&mut buf).expect("a MetricFamily"));
    }
    out
}

/// The model name the server serves (the `model_name` label).
fn served_name(t: &Tiny) -> String {
    let (_, models) = t.get_text("/v1/models");
    let models: serde_json::Value = serde_json::from_str(&models).expect("models json");
    models["data"][0]["id"].as_str().expect("a model id").to_owned()
}

/// Sample lines (not comments) of an exposition.
fn sample_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).collect()
}

#[test]
fn every_family_is_exposed_at_zero_on_a_fresh_server_in_every_format() {
    let t = start_tiny(|c| c.telemetry.kv_cache_metrics = true);
    let text = t.get_text("/metrics").1;
    for family in START_HISTOGRAMS {
        let labels = "engine=\"0\",model_name=";
        assert_eq!(
            metric_value(&text, &format!("{family}_count"), labels),
            Some(0.0),
            "{family}_count{{{labels}}} in\n{text}"
        );
        assert_eq!(
            metric_value(&text, &format!("{family}_bucket"), "le=\"+Inf\""),
            Some(0.0)
        );
        assert_eq!(metric_value(&text, &format!("{family}_sum"), labels), Some(0.0));
    }
    // vLLM's KV-block bounds: a millisecond to 1800 s, no 3600 s bucket.
    let lifetime = "vllm:kv_block_lifetime_seconds_bucket";
    assert_eq!(metric_value(&text, lifetime, "le=\"1800.0\""), Some(0.0));
    assert_eq!(metric_value(&text, lifetime, "le=\"3600.0\""), None);
    // vLLM's fault-tolerance tests read engine_healthy with its engine label alone.
    let healthy: Vec<&str> = sample_lines(&text)
        .into_iter()
        .filter(|l| l.starts_with("vllm:engine_healthy"))
        .collect();
    assert_eq!(healthy, ["vllm:engine_healthy{engine=\"0\"} 1"]);
    // Admission happens before an engine is chosen: no engine label (vLLM PR #55812).
    let refusals: Vec<&str> = sample_lines(&text)
        .into_iter()
        .filter(|l| l.starts_with("vllm:admission_rejections_total"))
        .collect();
    assert_eq!(refusals.len(), 2, "{refusals:?}");
    assert!(refusals.iter().all(|l| !l.contains("engine=") && l.ends_with(" 0")));

    let om = scrape(&t, "", OPENMETRICS).text().expect("openmetrics");
    for family in START_HISTOGRAMS {
        assert_eq!(metric_value(&om, &format!("{family}_count"), ""), Some(0.0), "{family}");
    }
    // Protobuf: the latency histograms are native from the start (a schema, no buckets yet).
    let families = decode(&scrape(&t, "", PROTOBUF).bytes().expect("protobuf"));
    for family in START_HISTOGRAMS {
        let f = families.iter().find(|f| f.name == *family).expect(family);
        let h = f.metric[0].histogram.as_ref().expect("a histogram");
        assert_eq!(h.sample_count, 0, "{family}");
        assert!(!h.bucket.is_empty(), "{family} keeps its classic buckets");
    }
    let e2e = families
        .iter()
        .find(|f| f.name == "vllm:e2e_request_latency_seconds")
        .expect("e2e");
    let native = e2e.metric[0].histogram.as_ref().expect("histogram");
    assert!(native.zero_threshold > 0.0, "a native histogram from start");
}

#[test]
fn iteration_tokens_count_the_prompt_and_every_generated_token_as_vllm_does() {
    // vLLM's test_metrics_counts: ten requests of a 9-token prompt and 10 generated tokens.
    let t = start_tiny(|_| {});
    let prompt: Vec<u32> = (0..9).map(|i| 5 + i).collect();
    for _ in 0..10 {
        let body = json!({"prompt": prompt, "max_tokens": 10, "ignore_eos": true});
        let (status, body) = t.post("/v1/completions", &body);
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["usage"]["prompt_tokens"], 9, "{body}");
        assert_eq!(body["usage"]["completion_tokens"], 10, "{body}");
    }
    let text = scrape_until(&t, |m| {
        metric_value(m, "vllm:request_success_total", "finished_reason=\"length\"") == Some(10.0)
    });
    let v = |name: &str| metric_value(&text, name, "engine=\"0\"");
    assert_eq!(v("vllm:iteration_tokens_total_sum"), Some(190.0), "10 × (9 + 10)");
    assert_eq!(v("vllm:request_num_preemptions_count"), Some(10.0), "one per request");
    assert_eq!(v("vllm:request_num_preemptions_sum"), Some(0.0));
    assert_eq!(
        metric_value(&text, "vllm:request_num_preemptions_bucket", "le=\"1.0\""),
        Some(10.0)
    );
}

#[test]
fn cache_config_info_carries_vllms_size_and_concurrency_labels() {
    let t = start_tiny(|c| c.engine.max_model_len = 256);
    let text = t.get_text("/metrics").1;
    let info = sample_lines(&text)
        .into_iter()
        .find(|l| l.starts_with("vllm:cache_config_info{"))
        .expect("cache_config_info");
    let label = |name: &str| -> String {
        let start = info
            .find(&format!("{name}=\""))
            .unwrap_or_else(|| panic!("{name} in {info}"));
        let rest = &info[start + name.len() + 2..];
        rest[..rest.find('"').expect("closing quote")].to_owned()
    };
    let blocks: u64 = label("num_gpu_blocks").parse().expect("blocks");
    let block_size: u64 = label("block_size").parse().expect("block size");
    let size: u64 = label("kv_cache_size_tokens").parse().expect("size");
    assert_eq!(size, blocks * block_size);
    assert_eq!(metric_value(&text, "vllm:max_token_capacity", ""), Some(size as f64));
    // As many requests of the full context as the cache holds (vLLM's fraction).
    let (_, models) = t.get_text("/v1/models");
    let models: serde_json::Value = serde_json::from_str(&models).expect("models json");
    let context = models["data"][0]["max_model_len"].as_f64().expect("max_model_len");
    let concurrency: f64 = label("kv_cache_max_concurrency").parse().expect("concurrency");
    assert!(
        (concurrency - size as f64 / context).abs() < 1e-9,
        "{info} at {context}"
    );
}

#[test]
fn the_name_filter_selects_samples_as_prometheus_clients_do_in_every_format() {
    let t = start_tiny(|_| {});
    let waiting = scrape(&t, "?name[]=vllm:num_requests_waiting", "text/plain")
        .text()
        .expect("text");
    assert_eq!(
        sample_lines(&waiting),
        [format!(
            "vllm:num_requests_waiting{{engine=\"0\",model_name=\"{}\"}} 0",
            served_name(&t)
        )]
    );
    assert!(waiting.contains("# TYPE vllm:num_requests_waiting gauge\n"));
    // A histogram's family name selects nothing; its sample names select those samples.
    let by_family = scrape(&t, "?name[]=vllm:e2e_request_latency_seconds", "text/plain");
    assert_eq!(by_family.text().expect("text"), "");
    let query = "?name[]=vllm:e2e_request_latency_seconds_count&name%5B%5D=vllm:num_requests_running";
    let two = scrape(&t, query, "text/plain").text().expect("text");
    let lines = sample_lines(&two);
    assert_eq!(lines.len(), 2, "{two}");
    assert!(lines[0].starts_with("vllm:e2e_request_latency_seconds_count{"), "{two}");
    assert!(lines[1].starts_with("vllm:num_requests_running{"), "{two}");
    // An unknown name: nothing at all.
    assert_eq!(scrape(&t, "?name[]=no_such_metric", "text/plain").text().unwrap(), "");
    let om = scrape(&t, query, OPENMETRICS).text().expect("openmetrics");
    assert_eq!(sample_lines(&om).len(), 2, "{om}");
    assert!(om.ends_with("# EOF\n"));
    assert_eq!(
        scrape(&t, "?name[]=no_such_metric", OPENMETRICS).text().unwrap(),
        "# EOF\n"
    );
    // Protobuf carries whole families: those with a selected sample.
    let families = decode(&scrape(&t, query, PROTOBUF).bytes().expect("protobuf"));
    let names: Vec<&str> = families.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["vllm:e2e_request_latency_seconds", "vllm:num_requests_running"]);
    let none = scrape(&t, "?name[]=vllm:e2e_request_latency_seconds", PROTOBUF);
    assert!(none.bytes().expect("protobuf").is_empty());
}

#[test]
fn failed_requests_are_counted_by_stage_and_code() {
    // The fake answers each token with the next id: a prompt of [5, 6] gets 7 first, and
    // the step that runs 7 fails, after generation started.
    let failing = FakeBehaviour {
        fail_on_token: Some(7),
        ..Default::default()
    };
    let t = start_fake(failing, |_| {});
    let failures = |stage: &str, code: u16| {
        let text = t.get_text("/metrics").1;
        let labels = format!("code=\"{code}\",model_name=\"{}\",stage=\"{stage}\"", served_name(&t));
        metric_value(&text, "vllm:request_failure_total", &labels).unwrap_or(0.0)
    };
    // Refused in validation: input_processing, 400.
    let (status, _) = t.post("/v1/completions", &json!({"prompt": "a", "temperature": -1}));
    assert_eq!(status, 400);
    // Unmatched paths and probes are not requests for the model.
    assert_eq!(t.get_text("/no/such/path").0, 404);
    assert_eq!(t.get_text("/health").0, 200);
    // Failed by the engine after generation started: non_streaming, 500.
    let (status, body) = t.post(
        "/v1/completions",
        &json!({"prompt": [5, 6], "max_tokens": 5, "ignore_eos": true}),
    );
    assert_eq!(status, 500, "{body}");
    // A stream the engine fails after its 200 was sent: streaming, 500.
    let events = t.stream(
        "/v1/completions",
        &json!({"prompt": [5, 6], "max_tokens": 5, "ignore_eos": true, "stream": true}),
    );
    assert!(events.iter().any(|e| e.contains("\"error\"")), "{events:?}");
    scrape_until(&t, |m| {
        metric_value(m, "vllm:request_failure_total", "non_streaming").is_some()
            && metric_value(m, "vllm:request_failure_total", "stage=\"streaming\"").is_some()
    });
    assert_eq!(failures("streaming", 500), 1.0);
    assert_eq!(failures("input_processing", 400), 1.0);
    assert_eq!(failures("non_streaming", 500), 1.0);
    assert_eq!(failures("input_processing", 404), 0.0);
    assert_eq!(failures("input_processing", 500), 0.0);
}

#[test]
fn custom_histogram_buckets_replace_a_familys_classic_bounds_only() {
    let custom = r#"{"request_latency": [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0]}"#;
    let t = start_tiny(|c| c.telemetry.custom_histogram_buckets = custom.into());
    let (status, _) = t.post("/v1/completions", &json!({"prompt": "a", "max_tokens": 2}));
    assert_eq!(status, 200);
    let text = scrape_until(&t, |m| {
        metric_value(m, "vllm:e2e_request_latency_seconds_count", "") == Some(1.0)
    });
    let bounds = |family: &str| -> Vec<String> {
        sample_lines(&text)
            .into_iter()
            .filter(|l| l.starts_with(&format!("{family}_bucket{{")))
            .filter_map(|l| l.split("le=\"").nth(1)?.split('"').next().map(str::to_owned))
            .collect()
    };
    let listed = ["0.01", "0.05", "0.1", "0.25", "0.5", "1.0", "5.0", "30.0", "+Inf"];
    for family in [
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:request_prefill_time_seconds",
        "vllm:request_decode_time_seconds",
        "vllm:request_inference_time_seconds",
    ] {
        assert_eq!(bounds(family), listed, "{family}");
    }
    assert_eq!(bounds("vllm:time_to_first_token_seconds").len(), 23, "unlisted: vLLM's");
    // The native histogram keeps its schema: same exponential buckets as without the flag.
    let families = decode(&scrape(&t, "", PROTOBUF).bytes().expect("protobuf"));
    let e2e = families
        .iter()
        .find(|f| f.name == "vllm:e2e_request_latency_seconds")
        .expect("e2e");
    let h = e2e.metric[0].histogram.as_ref().expect("histogram");
    assert_eq!(h.bucket.iter().filter(|b| b.upper_bound.is_finite()).count(), 8);
    assert_eq!(h.sample_count, 1);
    assert!(!h.positive_span.is_empty(), "native buckets");
    assert!(h.schema > 0, "schema {}", h.schema);
}
