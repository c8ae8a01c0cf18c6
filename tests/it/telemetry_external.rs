//! Telemetry against real external parts: a Prometheus server scraping kiln, `promtool`
//! linting its exposition, and OTLP push from a running kiln into `oteltap`.
//! `.ci/run` installs them and sets `KILN_TEST_PROMETHEUS`, `KILN_TEST_PROMTOOL` and
//! `KILN_TEST_OTELTAP`.

use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::common::process::free_port;
use crate::common::prometheus_server::{PrometheusServer, promtool_check_metrics};
use crate::common::wait::{wait_for, wait_until};
use crate::common::{start_tiny, tool};

/// Kills the child when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs a PromQL instant query; `None` until it returns a sample.
fn promql(client: &reqwest::blocking::Client, port: u16, query: &str) -> Option<f64> {
    let resp: Value = client
        .get(format!("http://127.0.0.1:{port}/api/v1/query"))
        .query(&[("query", query)])
        .send()
        .ok()?
        .json()
        .ok()?;
    resp["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

#[test]
#[ignore = "needs the prometheus server (KILN_TEST_PROMETHEUS); .ci/run provides it"]
fn a_real_prometheus_scrapes_the_request_and_token_totals() {
    let t = start_tiny(|_| {});
    let prometheus = PrometheusServer::start("kiln", &[t.server.addr.to_string()]);
    let port = prometheus.port;
    let requests = 6;
    let max_tokens = 5;
    for i in 0..requests {
        let (s, _) = t.post(
            "/v1/completions",
            &json!({"prompt": format!("n{i}"), "max_tokens": max_tokens, "ignore_eos": true}),
        );
        assert_eq!(s, 200);
    }
    let total = "sum(vllm:request_success_total{job=\"kiln\"})";
    wait_until(&format!("Prometheus to see {requests} requests"), || {
        promql(&t.client, port, total) == Some(requests as f64)
    });
    assert_eq!(
        promql(&t.client, port, "sum(vllm:generation_tokens_total)"),
        Some((requests * max_tokens) as f64)
    );
    let p50 = promql(
        &t.client,
        port,
        "histogram_quantile(0.5, sum by (le) (vllm:time_to_first_token_seconds_bucket))",
    )
    .expect("median TTFT");
    assert!(p50 > 0.0 && p50 < 10.0, "median time to first token {p50}");
}

/// `promtool check metrics` output for one scrape of a server with `prefix`.
fn promtool_findings(prefix: &str) -> String {
    let t = start_tiny(|c| c.telemetry.engine_prefix = prefix.into());
    let (s, _) = t.post(
        "/v1/completions",
        &json!({"prompt": "abc", "max_tokens": 3, "ignore_eos": true}),
    );
    assert_eq!(s, 200);
    let (_, text) = t.get_text("/metrics");
    promtool_check_metrics(&text)
}

#[test]
#[ignore = "needs promtool (KILN_TEST_PROMTOOL); .ci/run provides it"]
fn promtool_finds_nothing_with_a_lint_clean_prefix_and_only_vllm_naming_with_vllm() {
    let clean = promtool_findings("kiln_");
    assert!(clean.trim().is_empty(), "promtool findings with kiln_:\n{clean}");
    let vllm = promtool_findings("vllm:");
    let findings: Vec<&str> = vllm.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        findings
            .iter()
            .any(|l| l.ends_with("metric names should not contain ':'")),
        "{vllm}"
    );
    // vLLM's own names (METRICS.md's contract) carry three more findings; nothing else may.
    let vllm_names = [
        "vllm:avg_prompt_throughput_toks_per_s metric names should not contain abbreviated units",
        "vllm:avg_generation_throughput_toks_per_s metric names should not contain abbreviated units",
        "vllm:iteration_tokens_total non-counter metrics should not have \"_total\" suffix",
    ];
    for line in findings {
        let colon = line.starts_with("vllm:") && line.ends_with("metric names should not contain ':'");
        assert!(colon || vllm_names.contains(&line), "unexpected finding: {line}");
    }
}

#[test]
#[ignore = "needs oteltap (KILN_TEST_OTELTAP); .ci/run provides it"]
fn a_running_kiln_pushes_engine_genai_and_http_metrics_over_otlp() {
    let port = free_port();
    let t = start_tiny(|c| {
        c.telemetry.otlp_endpoint = format!("http://127.0.0.1:{port}/v1/metrics");
        c.telemetry.otlp_interval_s = 0.5;
    });
    let (s, _) = t.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}),
    );
    assert_eq!(s, 200);
    for pattern in [
        "^vllm:num_requests_running$",
        "^gen_ai\\.server\\.request\\.duration$",
        "^http\\.server\\.request\\.duration$",
    ] {
        // The collector starts after kiln: export must resume once it is there.
        let mut tap = Process(
            Command::new(tool("KILN_TEST_OTELTAP"))
                .args(["--port", &port.to_string(), "--await-metric", pattern])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("oteltap"),
        );
        let status = wait_for(&format!("{pattern} over OTLP"), || {
            tap.0.try_wait().expect("wait").ok_or("oteltap still waiting")
        });
        assert!(status.success(), "oteltap exited with {status} waiting for {pattern}");
    }
}
