//! The per-adapter families (`kiln_lora_*`, METRICS.md "LoRA adapters") on the real server,
//! scraped by a real Prometheus (`KILN_TEST_PROMETHEUS`): one with native histograms and one
//! reading text. Requests through two start-up adapters, the base model and an adapter loaded
//! and unloaded at run time: every per-adapter count sums to the family without `lora_name`,
//! each request is observed once under its adapter, and the run-time changes are counted.

use kiln::config::{Config, LoraModule};
use serde_json::{Value, json};

use crate::arch_parity::{fixture, read_reference};
use crate::common::prometheus_server::PrometheusServer;
use crate::common::wait::wait_for;
use crate::common::{Tiny, start_model};

fn adapter_path(name: &str) -> String {
    crate::lora::adapter_dir("llama", name).display().to_string()
}

fn served(c: &mut Config) {
    c.engine.kv_cache_memory = "8MiB".into();
    c.lora.enable_lora = true;
    c.lora.allow_runtime_lora_updating = true;
    c.lora.max_loras = 2;
    c.lora.max_cpu_loras = 3;
    c.lora.lora_modules = ["all", "mlp"]
        .map(|name| LoraModule {
            name: name.into(),
            path: adapter_path(name),
            base_model_name: None,
        })
        .to_vec();
}

fn complete(t: &Tiny, model: &str) {
    let prompt = &read_reference(&fixture("llama"))["f32"][0]["prompt_ids"];
    let body = json!({"model": model, "prompt": prompt, "max_tokens": 4, "temperature": 0, "ignore_eos": true});
    let (status, out) = t.post("/v1/completions", &body);
    assert_eq!(status, 200, "{model}: {out}");
}

fn post(t: &Tiny, path: &str, body: Value) -> u16 {
    let resp = t.client.post(t.server.url(path)).json(&body).send().expect("request");
    resp.status().as_u16()
}

/// Waits until Prometheus has `query` equal to `want`.
fn wait_value(prometheus: &PrometheusServer, t: &Tiny, query: &str, want: f64) {
    wait_for(&format!("{query} = {want}"), || {
        match prometheus.scalar(&t.client, query) {
            Some(v) if v == want => Ok(()),
            seen => Err(format!("{seen:?}")),
        }
    });
}

#[test]
#[ignore = "needs the prometheus server (KILN_TEST_PROMETHEUS); .ci/run provides it"]
fn prometheus_sees_per_adapter_families_that_sum_to_the_totals() {
    let t = start_model(
        tempfile::tempdir().expect("tempdir"),
        fixture("llama").join("hf"),
        served,
    );
    let target = [t.server.addr.to_string()];
    let native = PrometheusServer::start_with_native_histograms("kiln", &target);
    let classic = PrometheusServer::start("kiln", &target);
    for prometheus in [&native, &classic] {
        prometheus.wait_ready(&t.client);
        wait_value(prometheus, &t, "up{job=\"kiln\"}", 1.0);
    }
    // From start: the base and both adapters, at zero, histograms included.
    for lora in ["", "all", "mlp"] {
        let labels = format!("{{lora_name=\"{lora}\",engine=\"0\"}}");
        wait_value(&classic, &t, &format!("kiln_lora_prompt_tokens_total{labels}"), 0.0);
        wait_value(
            &classic,
            &t,
            &format!("kiln_lora_e2e_request_latency_seconds_count{labels}"),
            0.0,
        );
        let running = format!("kiln_lora_requests{{lora_name=\"{lora}\",state=\"running\"}}");
        wait_value(&classic, &t, &running, 0.0);
    }
    wait_value(&classic, &t, "kiln_lora_adapter_loads_total{result=\"loaded\"}", 0.0);

    let requests = [("all", 2.0), ("mlp", 3.0), ("", 1.0), ("rs", 1.0)];
    let base = t.get_text("/v1/models").1;
    let base: Value = serde_json::from_str(&base).expect("models");
    let base = base["data"][0]["id"].as_str().expect("base id").to_owned();
    for (adapter, n) in &requests[..3] {
        let model: &str = if adapter.is_empty() { &base } else { adapter };
        (0..*n as usize).for_each(|_| complete(&t, model));
    }
    // A failed load, a run-time load, a request through it, its unload.
    let missing = json!({"lora_name": "gone", "lora_path": "/no/such/adapter"});
    assert_eq!(post(&t, "/v1/load_lora_adapter", missing), 404);
    let rs = json!({"lora_name": "rs", "lora_path": adapter_path("rs")});
    assert_eq!(post(&t, "/v1/load_lora_adapter", rs), 200);
    complete(&t, "rs");
    assert_eq!(post(&t, "/v1/unload_lora_adapter", json!({"lora_name": "rs"})), 200);

    let total: f64 = requests.iter().map(|(_, n)| n).sum();
    wait_value(&classic, &t, "sum(vllm:e2e_request_latency_seconds_count)", total);
    wait_value(&classic, &t, "sum(kiln_lora_e2e_request_latency_seconds_count)", total);
    for (lora, n) in requests {
        for family in ["e2e_request_latency", "time_to_first_token"] {
            let count = format!("kiln_lora_{family}_seconds_count{{lora_name=\"{lora}\"}}");
            wait_value(&classic, &t, &count, n);
            let native_count = format!("histogram_count(kiln_lora_{family}_seconds{{lora_name=\"{lora}\"}})");
            wait_value(&native, &t, &native_count, n);
        }
        // Four tokens each, every prompt of the same length.
        let generated = format!("kiln_lora_generation_tokens_total{{lora_name=\"{lora}\"}}");
        wait_value(&classic, &t, &generated, 4.0 * n);
    }
    for (family, total_family) in [
        ("kiln_lora_prompt_tokens_total", "vllm:prompt_tokens_total"),
        ("kiln_lora_generation_tokens_total", "vllm:generation_tokens_total"),
        (
            "kiln_lora_time_to_first_token_seconds_count",
            "vllm:time_to_first_token_seconds_count",
        ),
    ] {
        let totals = classic
            .scalar(&t.client, &format!("sum({total_family})"))
            .expect(total_family);
        wait_value(&classic, &t, &format!("sum({family})"), totals);
    }
    let sums = "sum(kiln_lora_e2e_request_latency_seconds_sum)";
    let by_adapter = classic.scalar(&t.client, sums).expect("per-adapter e2e sum");
    let all = classic
        .scalar(&t.client, "sum(vllm:e2e_request_latency_seconds_sum)")
        .expect("e2e sum");
    assert!((by_adapter - all).abs() <= 1e-9 * all, "{by_adapter} against {all}");
    // Idle: no request anywhere, the unloaded adapter's series at 0 with its totals kept.
    wait_value(&classic, &t, "sum(kiln_lora_requests)", 0.0);
    wait_value(&classic, &t, "count(kiln_lora_requests{lora_name=\"rs\"})", 2.0);
    // The run-time changes: one of each; two loads read files (the failed one too).
    for result in ["loaded", "failed", "unloaded"] {
        let query = format!("kiln_lora_adapter_loads_total{{result=\"{result}\"}}");
        wait_value(&classic, &t, &query, 1.0);
    }
    wait_value(&classic, &t, "kiln_lora_adapter_load_seconds_count", 2.0);
    wait_value(&native, &t, "histogram_count(kiln_lora_adapter_load_seconds)", 2.0);
}
