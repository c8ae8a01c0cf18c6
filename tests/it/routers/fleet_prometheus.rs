//! One Prometheus over the fleet: two kiln replicas on the default model behind vllm-router,
//! scraped with the router's own metrics endpoint by real Prometheus servers (one with native
//! histograms, one without, as the dashboards read classic buckets). Traffic goes through the
//! router with the `openai` client; then every in-scope panel of vLLM's dashboards answers over
//! the fleet, and the fleet-wide TTFT p99 Prometheus computes from kiln's native histograms
//! summed over the replicas agrees with the p99 the client measured, within one native
//! bucket and the client's own overhead.

use std::io::Read as _;

use kiln::testing::real_model::model_path;
use serde_json::json;

use super::fleet::{Fleet, Router, SHARED_PREFIX, router_args};
use crate::common::process::{KilnProcess, Launch, free_port};
use crate::common::prometheus_server::PrometheusServer;
use crate::common::wait::{wait_for, wait_until};
use crate::vllm_dashboards::{exclusion, fill_variables_for, panels};

const MODEL: &str = "fleet-model";
/// Measured requests, one at a time, the i-th prompt about 1 + 4 i words: time to first
/// token from a few tens of milliseconds to several hundred on the default model.
const REQUESTS: usize = 40;
const STEP_WORDS: &str = "4";
/// Schema 3: neighbouring native bucket bounds differ by this factor.
const BUCKET_RATIO: f64 = 1.090_507_732_665_257_7; // 2^(1/8)
/// What the client's measurement adds to kiln's TTFT: the router, HTTP, SSE framing and the
/// Python client on a loaded 2-CPU machine, in seconds.
const CLIENT_OVERHEAD_S: f64 = 0.15;
/// Covers every scrape of the test.
const WINDOW: &str = "10m";

/// A replica on the default model with every telemetry option the dashboards read, and a
/// cache of 16 blocks, so that blocks are evicted (the residency histograms).
fn launch(port: u16) -> KilnProcess {
    let mut launch = Launch {
        model: Some(model_path()),
        port: Some(port),
        ..Launch::default()
    }
    .arg("--served-model-name", MODEL)
    .arg("--max-num-seqs", "8")
    .arg("--num-gpu-blocks-override", "16")
    .arg("--kv-cache-metrics-sample", "1.0");
    launch
        .args
        .extend(["--kv-cache-metrics", "--enable-mfu-metrics"].map(String::from));
    launch.start()
}

/// The value after `flag` in `args`.
fn flag_value(args: &[String], flag: &str) -> String {
    let at = args.iter().position(|a| a == flag).expect("flag present");
    args[at + 1].clone()
}

/// A streamed request to `url` whose client leaves after its first event: one abort.
fn aborted_request(url: &str) {
    let mut stream = reqwest::blocking::Client::new()
        .post(format!("{url}/v1/completions"))
        .json(&json!({"prompt": "leave early", "max_tokens": 100, "ignore_eos": true, "stream": true}))
        .send()
        .expect("stream");
    let mut seen = Vec::new();
    let mut chunk = [0u8; 256];
    while !seen.windows(6).any(|w| w == b"data: ") {
        let n = stream.read(&mut chunk).expect("stream bytes");
        assert!(n > 0, "the stream ended early");
        seen.extend_from_slice(&chunk[..n]);
    }
}

/// The nearest-rank `q` quantile of `values`.
fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((q * sorted.len() as f64).ceil() as usize).max(1) - 1]
}

fn wait_for_finished(prometheus: &PrometheusServer, client: &reqwest::blocking::Client, want: f64) {
    wait_for(&format!("Prometheus to see {want} finished requests"), || {
        let seen = prometheus.scalar(client, "sum(vllm:request_success_total{job=\"kiln\"})");
        if seen == Some(want) {
            Ok(())
        } else {
            Err(format!("{seen:?}"))
        }
    });
}

#[test]
#[ignore = "needs vllm-router, prometheus, the openai client, the default model and the shared folder; .ci/run provides them"]
fn one_prometheus_over_the_fleet_answers_vllms_dashboards_and_the_clients_ttft_p99() {
    let fleet = Fleet::start_with(2, launch);
    let args = router_args(&[], &fleet, "round_robin");
    let router_metrics = format!("127.0.0.1:{}", flag_value(&args, "--prometheus-port"));
    let router = Router::start("KILN_TEST_VLLM_ROUTER", &args, free_port());
    let replicas: Vec<String> = fleet.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let router_target = [router_metrics];
    let jobs: [(&str, &[String]); 2] = [("kiln", &replicas), ("router", &router_target)];
    let native = PrometheusServer::start_jobs(&jobs, true);
    let classic = PrometheusServer::start_jobs(&jobs, false);
    let client = reqwest::blocking::Client::new();
    for prometheus in [&native, &classic] {
        prometheus.wait_ready(&client);
        wait_until("both replicas and the router scraped", || {
            prometheus.scalar(&client, "sum(up)") == Some(3.0)
        });
    }

    // A first round creates every series and is scraped, so that the measured round rises
    // between two scrapes; one request to each replica (round robin).
    router.traffic(&["ttft", "2", "1"]);
    for prometheus in [&native, &classic] {
        wait_for_finished(prometheus, &client, 2.0);
    }
    let measured = router.traffic(&["ttft", &REQUESTS.to_string(), STEP_WORDS]);
    let ttfts: Vec<f64> = serde_json::from_value(measured["ttfts"].clone()).expect("ttfts");
    // The panels also read prefix-cache hits and aborts.
    let shared = router.traffic(&["burst", "4", "1", "-", SHARED_PREFIX]);
    assert_eq!(shared["ok"], 4, "{shared}");
    aborted_request(&fleet.urls()[0]);
    let finished = (2 + REQUESTS + 4 + 1) as f64;
    for prometheus in [&native, &classic] {
        wait_for_finished(prometheus, &client, finished);
    }

    // Both replicas served, and the router's own series are in the same Prometheus.
    let per_replica = native.query(
        &client,
        "sum by (instance) (histogram_count(vllm:time_to_first_token_seconds{job=\"kiln\"}))",
    );
    assert_eq!(per_replica.len(), 2, "{per_replica:?}");
    // The router counts a request as its response ends, and Prometheus scrapes it on its own
    // schedule: wait for a scrape taken after the last one.
    wait_until("the router's processed requests scraped", || {
        classic
            .scalar(&client, "sum(vllm_router_processed_requests_total{job=\"router\"})")
            .is_some_and(|r| r >= (2 + REQUESTS + 4) as f64)
    });

    // Fleet-wide p99 from the native histograms, summed over the replicas.
    let query =
        format!("histogram_quantile(0.99, sum(rate(vllm:time_to_first_token_seconds{{job=\"kiln\"}}[{WINDOW}])))");
    let p99 = native.scalar(&client, &query).expect("a fleet p99");
    let client_p99 = quantile(&ttfts, 0.99);
    eprintln!("fleet TTFT p99: native histograms {p99:.4} s, the client's {client_p99:.4} s");
    assert!(
        p99 <= client_p99 * BUCKET_RATIO && p99 >= (client_p99 - CLIENT_OVERHEAD_S) / BUCKET_RATIO,
        "fleet p99 {p99:.4} s against the client's {client_p99:.4} s (all: {ttfts:?})"
    );

    // Every in-scope panel of vLLM's dashboards answers over the fleet (classic buckets).
    let instance = &replicas[0];
    let mut empty = Vec::new();
    for (i, panel) in panels().iter().enumerate() {
        let expr = panel["expr"].as_str().expect("expr");
        if exclusion(expr).is_some() {
            continue;
        }
        let query = fill_variables_for(expr, MODEL, instance).replace("[2m]", &format!("[{WINDOW}]"));
        if classic.query(&client, &query).is_empty() {
            empty.push(format!("panel {i} ({}): {query}", panel["dashboard"]));
        }
    }
    assert!(
        empty.is_empty(),
        "{} in-scope panels return no data over the fleet:\n{}",
        empty.len(),
        empty.join("\n")
    );
}
