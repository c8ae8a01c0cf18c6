//! One engine of `--data-parallel-size 2` faults alone (issue 46, item 2), on a real server
//! whose engines run the fake executor, the fault injected into engine 1 only: its
//! `vllm:engine_healthy` drops while engine 0's stays 1, requests keep succeeding on engine 0,
//! engine 1's in-flight requests fail instead of hanging, a request pinned to it is a 503
//! naming its rank, it rejoins after its restart; dead for good (restarts exhausted, or a
//! hung step) it stays out while the server stays live and ready. The per-engine counters sum
//! to what the clients saw and the gauges return to 0.

use std::thread;
use std::time::Duration;

use kiln::engine::step::StepStage;
use kiln::executor::fake::FakeBehaviour;
use serde_json::{Value, json};

use crate::common::wait::wait_until;
use crate::common::{Tiny, metric_value, scrape_until, start_fake_engines};

/// A prompt token that makes engine 1's fake executor fault.
const POISON: u32 = 200;

fn engine_label(engine: usize) -> String {
    format!("engine=\"{engine}\"")
}

fn healthy(metrics: &str, engine: usize) -> Option<f64> {
    metric_value(metrics, "vllm:engine_healthy", &engine_label(engine))
}

/// The sum of `name`'s samples on `engine` (every other label summed over).
fn engine_sum(metrics: &str, name: &str, engine: usize) -> f64 {
    crate::common::metric_sum(metrics, name, &engine_label(engine))
}

fn complete(t: &Tiny, body: Value, rank: Option<usize>) -> (u16, Value) {
    let mut request = t.client.post(t.server.url("/v1/completions")).json(&body);
    if let Some(rank) = rank {
        request = request.header("X-data-parallel-rank", rank.to_string());
    }
    let response = request.send().expect("request");
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

fn json_of(t: &Tiny, path: &str) -> (u16, Value) {
    let (status, text) = t.get_text(path);
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Every report that names engine 1's state says `state`, and engine 0's says ready.
fn assert_reports(t: &Tiny, state: &str) {
    let (status, ready) = json_of(t, "/ready");
    assert_eq!(status, 200, "engine 0 serves: {ready}");
    assert_eq!(ready["status"], "ready", "{ready}");
    assert_eq!(ready["engines"][0]["status"], "ready", "{ready}");
    assert_eq!(ready["engines"][1]["status"], state, "{ready}");
    let (status, health) = json_of(t, "/health");
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["engines"][1]["status"], state, "{health}");
    let (_, load) = json_of(t, "/load");
    assert_eq!(load["engines"][1]["status"], state, "{load}");
    assert_eq!(load["engines"][0]["engine"], 0, "{load}");
    assert!(load["running"].is_u64(), "the total stays at the top: {load}");
    let (_, info) = json_of(t, "/get_server_info");
    assert_eq!(info["dp_ranks"][1]["status"], state, "{info}");
    let (_, loads) = json_of(t, "/v1/loads");
    assert_eq!(loads["loads"][1]["status"], state, "{loads}");
    let (_, get_load) = json_of(t, "/get_load");
    assert_eq!(get_load["dp_ranks"][1]["status"], state, "{get_load}");
    assert!(get_load["load"].is_u64(), "{get_load}");
}

/// A request pinned to rank 1 is refused with a 503 that names the rank.
fn assert_pinned_refused(t: &Tiny) {
    let (status, body) = complete(t, json!({"prompt": [1, 2, 3], "max_tokens": 2}), Some(1));
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["type"], "service_unavailable", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("rank 1"), "{body}");
    let (status, body) = complete(
        t,
        json!({"prompt": [1, 2, 3], "max_tokens": 2, "data_parallel_rank": 1}),
        None,
    );
    assert_eq!(status, 503, "pinned in the body too: {body}");
}

/// Sends `n` unpinned requests; all succeed.
fn serve_unpinned(t: &Tiny, n: usize) {
    for seed in 0..n as u32 {
        let (status, body) = complete(t, json!({"prompt": [3 + seed, 4, 5], "max_tokens": 3}), None);
        assert_eq!(status, 200, "{body}");
    }
}

/// Waits until the engines' finished requests add up to `requests` and both engines' running
/// and waiting gauges read 0; returns that scrape.
fn settled(t: &Tiny, requests: f64) -> String {
    scrape_until(t, |m| {
        let finished: f64 = (0..2).map(|e| engine_sum(m, "vllm:request_success_total", e)).sum();
        let busy: f64 = (0..2)
            .map(|e| engine_sum(m, "vllm:num_requests_running", e) + engine_sum(m, "vllm:num_requests_waiting", e))
            .sum();
        finished == requests && busy == 0.0
    })
}

fn errors_on(metrics: &str, engine: usize) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| l.starts_with("vllm:request_success_total{"))
        .find(|l| l.contains(&engine_label(engine)) && l.contains("finished_reason=\"error\""))
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
}

#[test]
fn engine_1_restarts_alone_fails_its_own_requests_and_rejoins() {
    let faulty = FakeBehaviour {
        panic_on_token: Some(POISON),
        panic_stage: StepStage::Execute,
        step_delay: Duration::from_millis(50),
        reset_delay: Duration::from_secs(3),
        ..Default::default()
    };
    let t = start_fake_engines(vec![FakeBehaviour::default(), faulty], |_| {});
    let m = t.get_text("/metrics").1;
    assert_eq!((healthy(&m, 0), healthy(&m, 1)), (Some(1.0), Some(1.0)));
    let mut reached_engines = 0.0;
    thread::scope(|s| {
        // A long request in flight on engine 1, then the poisoned one beside it.
        let long = s.spawn(|| {
            complete(
                &t,
                json!({"prompt": [5], "max_tokens": 40, "ignore_eos": true}),
                Some(1),
            )
        });
        scrape_until(&t, |m| engine_sum(m, "vllm:num_requests_running", 1) == 1.0);
        let poisoned = s.spawn(|| complete(&t, json!({"prompt": [1, POISON, 3], "max_tokens": 3}), Some(1)));
        let m = scrape_until(&t, |m| healthy(m, 1) == Some(0.0));
        assert_eq!(healthy(&m, 0), Some(1.0), "engine 0 stays healthy");
        assert_reports(&t, "restarting");
        assert_pinned_refused(&t);
        // Engine 0 serves while engine 1 restarts.
        serve_unpinned(&t, 4);
        assert_eq!(
            healthy(&t.get_text("/metrics").1, 1),
            Some(0.0),
            "engine 1 was still restarting while engine 0 served"
        );
        for (what, request) in [("in flight", long), ("poisoned", poisoned)] {
            let (status, body) = request.join().expect("request");
            assert_eq!(status, 500, "the {what} request on engine 1 fails: {body}");
            assert_eq!(body["error"]["type"], "server_error", "{body}");
        }
        reached_engines += 6.0;
    });
    let m = scrape_until(&t, |m| healthy(m, 1) == Some(1.0));
    assert_eq!(healthy(&m, 0), Some(1.0));
    assert_eq!(json_of(&t, "/ready").1["engines"][1]["status"], "ready");
    // Engine 1 serves again, pinned and chosen.
    let (status, body) = complete(&t, json!({"prompt": [7, 8, 9], "max_tokens": 3}), Some(1));
    assert_eq!(status, 200, "{body}");
    serve_unpinned(&t, 6);
    reached_engines += 7.0;
    let m = settled(&t, reached_engines);
    assert_eq!(
        metric_value(&m, "kiln_engine_restarts_total", &engine_label(1)),
        Some(1.0)
    );
    assert_eq!(
        metric_value(&m, "kiln_engine_restarts_total", &engine_label(0)),
        Some(0.0),
        "engine 0 never restarted"
    );
    assert_eq!(errors_on(&m, 1), Some(2.0), "engine 1's two requests failed");
    assert_eq!(errors_on(&m, 0).unwrap_or(0.0), 0.0, "nothing failed on engine 0");
    assert!(
        engine_sum(&m, "vllm:request_success_total", 1) > 3.0,
        "unpinned requests reach engine 1 again after its restart"
    );
}

#[test]
fn engine_1_dead_for_good_stays_out_while_the_server_serves_through_engine_0() {
    let faulty = FakeBehaviour {
        panic_on_token: Some(POISON),
        panic_stage: StepStage::Execute,
        panics_in_reset: 10,
        ..Default::default()
    };
    let t = start_fake_engines(vec![FakeBehaviour::default(), faulty], |c| {
        c.engine.max_engine_restarts = 2;
    });
    let (status, body) = complete(&t, json!({"prompt": [1, POISON, 3], "max_tokens": 3}), Some(1));
    assert_eq!(status, 500, "{body}");
    let m = scrape_until(&t, |m| healthy(m, 1) == Some(0.0));
    assert_eq!(healthy(&m, 0), Some(1.0));
    assert_reports(&t, "dead");
    assert_pinned_refused(&t);
    serve_unpinned(&t, 8);
    let m = settled(&t, 9.0);
    assert_eq!(
        engine_sum(&m, "vllm:request_success_total", 0),
        8.0,
        "every later request ran on engine 0"
    );
    assert_eq!(
        metric_value(&m, "kiln_engine_restarts_total", &engine_label(1)),
        Some(2.0)
    );
    assert_eq!(healthy(&m, 1), Some(0.0), "dead stays out");
    assert_eq!(t.get_text("/health").0, 200, "the server stays live");
}

#[test]
fn a_hung_step_kills_only_its_engine() {
    let hangs = FakeBehaviour {
        stall_on_token: Some((POISON, Duration::from_secs(2))),
        ..Default::default()
    };
    let t = start_fake_engines(vec![FakeBehaviour::default(), hangs], |c| {
        c.engine.step_timeout_s = 0.3;
    });
    thread::scope(|s| {
        let stalled = s.spawn(|| complete(&t, json!({"prompt": [1, POISON, 3], "max_tokens": 3}), Some(1)));
        wait_until("engine 1 dead", || {
            json_of(&t, "/ready").1["engines"][1]["status"] == "dead"
        });
        assert_eq!(healthy(&t.get_text("/metrics").1, 0), Some(1.0));
        assert_eq!(t.get_text("/health").0, 200, "engine 0 lives");
        serve_unpinned(&t, 3);
        let (status, body) = stalled.join().expect("request");
        assert_eq!(status, 500, "the hung engine's request fails: {body}");
    });
    settled(&t, 4.0);
}
