//! vLLM's own Grafana dashboards against kiln: every in-scope panel query of
//! `vllm-dashboards/panel-queries.json` (shared folder) runs through a real Prometheus that
//! scraped kiln under a little traffic (prefix caching on, one abort) and must return data.
//! Needs `KILN_TEST_PROMETHEUS` (set by `.ci/run`) and the shared folder (`KILN_SHARED_DIR`).

use std::io::Read;
use std::time::Duration;

use kiln::executor::fake::FakeBehaviour;
use serde_json::{Value, json};

use crate::common::prometheus_server::PrometheusServer;
use crate::common::wait::wait_for;
use crate::common::{Tiny, start_fake};

/// Families of features kiln does not have (the shared README's list); a panel that reads
/// one of them is out of scope, for the reason given.
const OUT_OF_SCOPE: &[(&str, &str)] = &[
    ("vllm:nixl_", "NIXL transfers belong to disaggregated prefill"),
    ("vllm:kv_offload_", "KV offload connectors"),
    ("vllm:simple_kv_offload_", "the simple KV offload connector"),
    ("vllm:external_prefix_cache_", "an external KV cache (KV transfer)"),
    ("vllm:num_requests_kv_fetch_by_stage", "external KV transfer stages"),
    ("vllm:mm_cache_", "multimodal inputs"),
    ("vllm:sleep_mode_", "sleep mode"),
    ("vllm:rl_weight_", "RL weight updates"),
    ("vllm:spec_decode_", "speculative decoding"),
    ("vllm:lora_", "LoRA adapters"),
];

/// The panels left out, by their index in `panel-queries.json`, as of the stored version
/// (checked against `OUT_OF_SCOPE`, so a new version of the file is noticed).
const EXCLUDED_PANELS: &[usize] = &[
    64, 65, 112, 113, 114, 115, 137, 138, 151, 152, 154, 155, 156, 157, 158, 159, 160, 161, 162, 163, 164, 165, 166,
    167, 168, 169, 170, 171, 172, 173, 174, 175, 176, 177, 178, 179, 180, 181, 182, 183, 184, 185, 186, 187, 188, 189,
    190, 191, 192, 193,
];

const MODEL: &str = "tiny-llama";
/// `$__rate_interval`, `$__range`: a window that covers every scrape of the test.
const WINDOW: &str = "2m";

/// Why a panel is out of scope, or `None` when it must return data.
pub(crate) fn exclusion(expr: &str) -> Option<&'static str> {
    OUT_OF_SCOPE
        .iter()
        .find(|(family, _)| expr.contains(family))
        .map(|(_, why)| *why)
}

/// Fills the dashboards' variables as Grafana does with "All" selected for the multi-value
/// ones (`=~"$var"` → `.*`) and the one value for `="$var"`.
fn fill_variables(expr: &str, instance: &str) -> String {
    fill_variables_for(expr, MODEL, instance)
}

/// [`fill_variables`] for the model `model`.
pub(crate) fn fill_variables_for(expr: &str, model: &str, instance: &str) -> String {
    let mut out = expr.to_owned();
    for (var, value) in [
        ("job", "kiln"),
        ("model_name", model),
        ("instance", instance),
        ("engine", "0"),
        ("ttft_slo", "1.0"),
        ("tpot_slo", "0.1"),
    ] {
        out = out.replace(&format!("=~\"${var}\""), "=~\".*\"");
        out = out.replace(&format!("=\"${var}\""), &format!("=\"{value}\""));
    }
    for (var, value) in [
        ("$__rate_interval", WINDOW),
        ("$__range", WINDOW),
        ("$__interval", "1s"),
    ] {
        out = out.replace(var, value);
    }
    assert!(!out.contains('$'), "an unfilled variable in {out}");
    out
}

/// Runs an instant query: the response body, or `None` while Prometheus is not answering.
fn try_query(t: &Tiny, port: u16, query: &str) -> Option<Value> {
    t.client
        .get(format!("http://127.0.0.1:{port}/api/v1/query"))
        .query(&[("query", query)])
        .send()
        .and_then(|r| r.json())
        .ok()
}

/// The result vector of an instant query; fails the test when Prometheus refuses it.
fn instant_query(t: &Tiny, port: u16, query: &str) -> Value {
    let resp = try_query(t, port, query).unwrap_or(Value::Null);
    assert!(resp["status"] == "success", "Prometheus refused {query}: {resp}");
    resp["data"]["result"].clone()
}

/// Waits until Prometheus (perhaps still starting) has scraped `want` finished requests.
fn wait_for_scraped_requests(t: &Tiny, port: u16, want: usize) {
    let query = "sum(vllm:request_success_total{job=\"kiln\"})";
    wait_for(&format!("Prometheus to see {want} requests"), || {
        let seen =
            try_query(t, port, query).and_then(|v| v["data"]["result"][0]["value"][1].as_str()?.parse::<f64>().ok());
        if seen == Some(want as f64) {
            Ok(())
        } else {
            Err(format!("{seen:?}"))
        }
    });
}

/// One round of traffic: completions sharing a long prefix (prefix-cache hits), a chat, a
/// stream; returns the number of requests it finished.
fn traffic_round(t: &Tiny, round: usize) -> usize {
    let shared = "the quick brown fox jumps over the lazy dog ".repeat(6);
    for i in 0..3 {
        let body = json!({"prompt": format!("{shared} round {round} item {i}"), "max_tokens": 6, "ignore_eos": true});
        let (s, v) = t.post("/v1/completions", &body);
        assert_eq!(s, 200, "{v}");
    }
    let chat = json!({"messages": [{"role": "user", "content": format!("hello {round}")}], "max_tokens": 4});
    let (s, v) = t.post("/v1/chat/completions", &chat);
    assert_eq!(s, 200, "{v}");
    let events = t.stream(
        "/v1/completions",
        &json!({"prompt": format!("stream {round}"), "max_tokens": 5, "ignore_eos": true, "stream": true}),
    );
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let (s, _) = t.get_text("/v1/models");
    assert_eq!(s, 200);
    5
}

/// A streamed request whose client leaves after its first token: one abort.
fn aborted_request(t: &Tiny) -> usize {
    let mut stream = t
        .client
        .post(t.server.url("/v1/completions"))
        .json(&json!({"prompt": "leave early", "max_tokens": 200, "ignore_eos": true, "stream": true}))
        .send()
        .expect("stream");
    let mut seen = Vec::new();
    let mut chunk = [0u8; 256];
    while seen.windows(6).filter(|w| w == b"data: ").count() < 1 {
        let n = stream.read(&mut chunk).expect("stream bytes");
        assert!(n > 0, "the stream ended early");
        seen.extend_from_slice(&chunk[..n]);
    }
    drop(stream);
    1
}

/// The panels of `vllm-dashboards/panel-queries.json` (shared folder), each with its `expr`.
pub(crate) fn panels() -> Vec<Value> {
    let path = kiln::testing::real_model::shared_dir().join("vllm-dashboards/panel-queries.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let panels: Value = serde_json::from_str(&text).expect("panel-queries.json");
    panels["panels"].as_array().expect("panels").clone()
}

#[test]
#[ignore = "needs the prometheus server (KILN_TEST_PROMETHEUS) and the shared folder; .ci/run provides both"]
fn every_in_scope_panel_of_vllms_dashboards_returns_data() {
    let panels = panels();

    // The exclusions, panel by panel: exactly the panels reading an out-of-scope family.
    let excluded: Vec<usize> = (0..panels.len())
        .filter(|&i| exclusion(panels[i]["expr"].as_str().expect("expr")).is_some())
        .collect();
    assert_eq!(excluded, EXCLUDED_PANELS, "the out-of-scope panels changed");

    let slow = FakeBehaviour {
        step_delay: Duration::from_millis(2),
        ..Default::default()
    };
    let t = start_fake(slow, |c| {
        c.engine.enable_prefix_caching = true;
        // A small cache, so each round evicts cached blocks (the residency histograms).
        c.engine.num_gpu_blocks_override = 16;
        c.telemetry.kv_cache_metrics = true;
        c.telemetry.kv_cache_metrics_sample = 1.0;
        c.telemetry.enable_mfu_metrics = true;
    });
    let addr = t.server.addr.to_string();
    let prometheus = PrometheusServer::start("kiln", std::slice::from_ref(&addr));
    let port = prometheus.port;

    // Two rounds, each scraped before the next: every counter and histogram then rises
    // between two scrapes, so rates (and the `rate(...) > 0` denominators) have data.
    let mut finished = traffic_round(&t, 0);
    wait_for_scraped_requests(&t, port, finished);
    finished += traffic_round(&t, 1) + aborted_request(&t);
    wait_for_scraped_requests(&t, port, finished);
    let aborts = instant_query(&t, port, "sum(vllm:request_success_total{finished_reason=\"abort\"})");
    assert_eq!(aborts[0]["value"][1], "1", "one abort");

    let mut empty = Vec::new();
    for (i, panel) in panels.iter().enumerate() {
        let expr = panel["expr"].as_str().expect("expr");
        if let Some(why) = exclusion(expr) {
            eprintln!("panel {i} out of scope ({why}): {expr}");
            continue;
        }
        let query = fill_variables(expr, &addr);
        let result = instant_query(&t, port, &query);
        if result.as_array().is_none_or(Vec::is_empty) {
            empty.push(format!("panel {i} ({}): {query}", panel["dashboard"]));
        }
    }
    assert!(
        empty.is_empty(),
        "{} in-scope panels return no data:\n{}",
        empty.len(),
        empty.join("\n")
    );
}

#[test]
fn variables_are_filled_as_grafanas_all_and_single_values() {
    let expr = r#"sum(rate(x{job=~"$job", model_name=~"$model_name", le="$ttft_slo"}[$__rate_interval])) / last_over_time(y{engine="$engine"}[$__range])"#;
    assert_eq!(
        fill_variables(expr, "127.0.0.1:1"),
        r#"sum(rate(x{job=~".*", model_name=~".*", le="1.0"}[2m])) / last_over_time(y{engine="0"}[2m])"#
    );
    assert_eq!(
        exclusion("rate(vllm:nixl_xfer_time_seconds_sum[1m])"),
        Some(OUT_OF_SCOPE[0].1)
    );
    assert_eq!(exclusion("vllm:num_requests_running"), None);
}
