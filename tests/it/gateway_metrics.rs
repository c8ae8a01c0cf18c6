//! The inference gateway's view of kiln: the Gateway API Inference Extension's endpoint
//! picker (and llm-d's) scrape `/metrics` every 50 ms with the classic text parser, take the
//! first series of `vllm:num_requests_waiting`, `vllm:num_requests_running` and
//! `vllm:kv_cache_usage_perc`, and read `block_size` / `num_gpu_blocks` from
//! `vllm:cache_config_info` as integers. tests/python/gateway_metrics_reader.py reads them
//! that way (prometheus_client's parser); `promtool check metrics` parses the same scrape
//! with Go's expfmt text parser, the one the picker links. `.ci/run` sets `KILN_TEST_PYTHON`
//! (with prometheus-client) and `KILN_TEST_PROMTOOL`.

use std::process::Command;
use std::time::Duration;

use kiln::executor::fake::FakeBehaviour;
use serde_json::{Value, json};

use crate::common::prometheus_server::promtool_check_metrics;
use crate::common::{Tiny, start_fake, tool};

/// The name the fake executor's server serves its model under.
const MODEL: &str = "tiny-llama";
const BLOCK_SIZE: usize = 16;
const GPU_BLOCKS: usize = 64;
const MAX_NUM_SEQS: usize = 2;
const REQUESTS: usize = 6;

/// `count` scrapes of `url`, 50 ms apart, as the picker reads them.
fn picker_reads(url: &str, count: usize) -> Vec<Value> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/gateway_metrics_reader.py");
    let out = Command::new(tool("KILN_TEST_PYTHON"))
        .args([script, url, &count.to_string(), "50"])
        .output()
        .expect("run gateway_metrics_reader.py");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let reads: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(reads.len(), count);
    reads
}

/// What Go's expfmt text parser reports about one scrape (via promtool): parse errors only,
/// lint findings (vLLM's colon names) are not errors for the picker.
fn go_parse_errors(exposition: &str) -> Vec<String> {
    let text = promtool_check_metrics(exposition);
    text.lines()
        .filter(|l| l.contains("error while linting") || l.contains("parsing error"))
        .map(str::to_string)
        .collect()
}

/// Starts kiln (fake executor, slowed down, serving MODEL); `metrics_port` moves /metrics to
/// a listener of its own.
fn start(metrics_port: Option<u16>) -> Tiny {
    let behaviour = FakeBehaviour {
        step_delay: Duration::from_millis(20),
        ..FakeBehaviour::default()
    };
    start_fake(behaviour, |c| {
        c.engine.block_size = BLOCK_SIZE;
        c.engine.num_gpu_blocks_override = GPU_BLOCKS;
        c.engine.max_num_seqs = MAX_NUM_SEQS;
        if let Some(port) = metrics_port {
            c.telemetry.metrics_listen = format!("127.0.0.1:{port}");
        }
    })
}

fn assert_one_series_per_model(read: &Value) {
    assert!(read.get("error").is_none(), "a scrape the picker could not use: {read}");
    for (family, by_model) in read["series"].as_object().expect("series") {
        assert_eq!(by_model, &json!({MODEL: 1}), "{family}: series by model_name");
    }
    assert_eq!(read["block_size"], json!(BLOCK_SIZE));
    assert_eq!(read["num_gpu_blocks"], json!(GPU_BLOCKS));
}

fn check_port(metrics_port: Option<u16>) {
    let t = start(metrics_port);
    let url = match metrics_port {
        Some(port) => format!("http://127.0.0.1:{port}/metrics"),
        None => t.server.url("/metrics"),
    };
    // Six long requests, two running at a time: the picker must see 2 running and 4 waiting.
    let senders: Vec<_> = (0..REQUESTS)
        .map(|i| {
            let (client, url) = (t.client.clone(), t.server.url("/v1/completions"));
            std::thread::spawn(move || {
                let body = json!({"model": MODEL, "prompt": format!("p{i}"), "max_tokens": 100, "ignore_eos": true});
                client.post(url).json(&body).send().expect("request").status().as_u16()
            })
        })
        .collect();
    let waiting = (REQUESTS - MAX_NUM_SEQS) as u64;
    t.wait_for_load(|l| l["running"] == json!(MAX_NUM_SEQS) && l["waiting"] == json!(waiting));
    let busy = picker_reads(&url, 10);
    for read in &busy {
        assert_one_series_per_model(read);
    }
    // The first wave runs for 2 s (100 steps of 20 ms): the first scrapes see it.
    assert_eq!(busy[0]["running"].as_f64(), Some(MAX_NUM_SEQS as f64), "{}", busy[0]);
    assert_eq!(busy[0]["waiting"].as_f64(), Some(waiting as f64), "{}", busy[0]);
    let usage = busy[0]["kv_cache_usage"].as_f64().expect("usage");
    assert!(usage > 0.0 && usage <= 1.0, "{}", busy[0]);
    let text = t.client.get(&url).send().expect("scrape").text().expect("text");
    assert_eq!(
        go_parse_errors(&text),
        Vec::<String>::new(),
        "Go's text parser refuses the busy exposition"
    );

    for sender in senders {
        assert_eq!(sender.join().expect("sender"), 200);
    }
    t.wait_for_load(|l| l["running"] == json!(0) && l["waiting"] == json!(0));
    let idle = picker_reads(&url, 1);
    assert_one_series_per_model(&idle[0]);
    for key in ["running", "waiting", "kv_cache_usage"] {
        assert_eq!(idle[0][key].as_f64(), Some(0.0), "{key} when idle: {}", idle[0]);
    }
}

#[test]
#[ignore = "needs prometheus-client (KILN_TEST_PYTHON) and promtool (KILN_TEST_PROMTOOL); .ci/run provides them"]
fn the_endpoint_picker_reads_one_series_per_model_with_integer_labels_on_the_public_port() {
    check_port(None);
}

#[test]
#[ignore = "needs prometheus-client (KILN_TEST_PYTHON) and promtool (KILN_TEST_PROMTOOL); .ci/run provides them"]
fn the_endpoint_picker_reads_one_series_per_model_with_integer_labels_on_the_metrics_port() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    check_port(Some(port));
}
