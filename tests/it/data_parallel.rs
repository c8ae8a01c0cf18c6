//! `--data-parallel-size 2` on a real server (the tiny model, real sockets): requests spread
//! over both engines, pins by header and body are honoured, a rank the server lacks is a 400
//! naming it, every engine family carries `engine="0"` and `engine="1"`, the per-engine
//! counters sum to what the clients saw, and a repeated prefix goes to the engine that cached
//! it (its prefix hits, not the other's). The `-dp` spelling through the real binary too.

use serde_json::{Value, json};

use crate::common::process::Launch;
use crate::common::{Tiny, start_tiny};

/// The sum of `name`'s samples on `engine` (every other label summed over).
fn engine_sum(metrics: &str, name: &str, engine: usize) -> f64 {
    crate::common::metric_sum(metrics, name, &format!("engine=\"{engine}\""))
}

fn per_engine(t: &Tiny, name: &str) -> [f64; 2] {
    let metrics = t.get_text("/metrics").1;
    [engine_sum(&metrics, name, 0), engine_sum(&metrics, name, 1)]
}

/// Waits until the engines' finished requests add up to `requests`: the stats actor records
/// a request after its response goes out, so a scrape made at once may miss it.
fn settled(t: &Tiny, requests: f64) {
    crate::common::wait::wait_until("the stats actor to count every finished request", || {
        per_engine(t, "vllm:request_success_total").iter().sum::<f64>() == requests
    });
}

fn two_engines() -> Tiny {
    start_tiny(|c| {
        c.engine.data_parallel_size = 2;
        c.engine.block_size = 4;
        c.engine.enable_prefix_caching = true;
    })
}

/// A prompt of token ids no other prompt of these tests starts with.
fn prompt(seed: u32, len: u32) -> Vec<u32> {
    (0..len).map(|i| 3 + (seed * 7 + i * 13) % 200).collect()
}

fn complete(t: &Tiny, body: Value, rank_header: Option<&str>) -> (u16, Value) {
    let mut request = t.client.post(t.server.url("/v1/completions")).json(&body);
    if let Some(rank) = rank_header {
        request = request.header("X-data-parallel-rank", rank);
    }
    let response = request.send().expect("request");
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

#[test]
fn two_engines_spread_honour_pins_and_their_counters_sum_to_the_clients() {
    let t = two_engines();
    let info: Value = serde_json::from_str(&t.get_text("/get_server_info").1).expect("json");
    assert_eq!(info["dp_size"], 2, "{info}");
    let loads: Value = serde_json::from_str(&t.get_text("/v1/loads").1).expect("json");
    assert_eq!(loads["dp_rank_count"], 2, "{loads}");
    assert_eq!(loads["loads"][1]["dp_rank"], 1, "{loads}");
    let metrics = t.get_text("/metrics").1;
    for family in [
        "vllm:num_requests_running",
        "vllm:cache_config_info",
        "vllm:engine_healthy",
        "vllm:request_success_total",
        "vllm:time_to_first_token_seconds_count",
    ] {
        for engine in 0..2 {
            let label = format!("engine=\"{engine}\"");
            assert!(
                metrics
                    .lines()
                    .any(|l| l.starts_with(&format!("{family}{{")) && l.contains(&label)),
                "{family} has no {label} series"
            );
        }
    }

    let (mut prompt_tokens, mut generated, mut requests) = (0.0, 0.0, 0.0);
    let mut count = |body: &Value| {
        prompt_tokens += body["usage"]["prompt_tokens"].as_f64().expect("usage");
        generated += body["usage"]["completion_tokens"].as_f64().expect("usage");
        requests += 1.0;
    };
    // Pinned: three to rank 1 by header, two to rank 0 in the body.
    for seed in 0..3 {
        let (status, body) = complete(&t, json!({"prompt": prompt(seed, 9), "max_tokens": 3}), Some("1"));
        assert_eq!(status, 200, "{body}");
        count(&body);
    }
    for seed in 3..5 {
        let body = json!({"prompt": prompt(seed, 9), "max_tokens": 3, "data_parallel_rank": 0});
        let (status, body) = complete(&t, body, None);
        assert_eq!(status, 200, "{body}");
        count(&body);
    }
    settled(&t, 5.0);
    assert_eq!(per_engine(&t, "vllm:request_success_total"), [2.0, 3.0]);
    // Not pinned, no prefix in common: both engines get some.
    for seed in 5..11 {
        let (status, body) = complete(&t, json!({"prompt": prompt(seed, 7), "max_tokens": 2}), None);
        assert_eq!(status, 200, "{body}");
        count(&body);
    }
    settled(&t, requests);
    let success = per_engine(&t, "vllm:request_success_total");
    assert!(
        success[0] > 2.0 && success[1] > 3.0,
        "unpinned requests spread: {success:?}"
    );
    // Per-engine counters sum to what the clients saw.
    let sum = |name| per_engine(&t, name).iter().sum::<f64>();
    assert_eq!(sum("vllm:request_success_total"), requests);
    assert_eq!(sum("vllm:prompt_tokens_total"), prompt_tokens);
    assert_eq!(sum("vllm:generation_tokens_total"), generated);
    assert_eq!(sum("vllm:request_prompt_tokens_sum"), prompt_tokens);
    assert_eq!(sum("vllm:e2e_request_latency_seconds_count"), requests);
}

#[test]
fn a_rank_the_server_lacks_is_a_400_naming_it() {
    let t = two_engines();
    let (status, body) = complete(&t, json!({"prompt": "hi", "max_tokens": 1}), Some("2"));
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "X-data-parallel-rank", "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap_or("").contains("rank 2"),
        "{body}"
    );
    let (status, body) = complete(
        &t,
        json!({"prompt": "hi", "max_tokens": 1, "data_parallel_rank": 5}),
        None,
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "data_parallel_rank", "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap_or("").contains("rank 5"),
        "{body}"
    );
    assert_eq!(per_engine(&t, "vllm:request_success_total"), [0.0, 0.0], "nothing ran");
}

#[test]
fn a_repeated_prefix_goes_to_the_engine_that_cached_it() {
    let t = two_engines();
    let shared = prompt(40, 40);
    let (status, first) = complete(&t, json!({"prompt": shared, "max_tokens": 2}), None);
    assert_eq!(status, 200, "{first}");
    settled(&t, 1.0);
    let holder = if per_engine(&t, "vllm:request_success_total")[0] == 1.0 {
        0
    } else {
        1
    };
    let before = per_engine(&t, "vllm:prefix_cache_hits_total");
    for _ in 0..4 {
        let (status, body) = complete(&t, json!({"prompt": shared, "max_tokens": 2}), None);
        assert_eq!(status, 200, "{body}");
        let cached = body["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
        assert!(cached >= Some(36), "the repeat hit the cache: {body}");
    }
    settled(&t, 5.0);
    let success = per_engine(&t, "vllm:request_success_total");
    assert_eq!(
        success[holder], 5.0,
        "every repeat went to engine {holder}: {success:?}"
    );
    let after = per_engine(&t, "vllm:prefix_cache_hits_total");
    assert!(after[holder] - before[holder] >= 4.0 * 36.0, "{before:?} -> {after:?}");
    assert_eq!(after[1 - holder], before[1 - holder], "no hits on the other engine");
    // A flush empties both engines' caches.
    let (status, body) = t.post("/flush_cache", &json!({}));
    assert_eq!(status, 200, "{body}");
    let (_, body) = complete(&t, json!({"prompt": shared, "max_tokens": 2}), None);
    assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 0, "{body}");
}

#[test]
fn the_binary_takes_vllms_dp_spelling() {
    let kiln = Launch::default().arg("-dp", "2").start();
    let info: Value = kiln.get_json("/get_server_info");
    assert_eq!(info["dp_size"], 2, "{info}");
    let metrics = kiln
        .client
        .get(kiln.url("/metrics"))
        .send()
        .and_then(|r| r.text())
        .expect("metrics");
    assert!(metrics.contains("vllm:engine_healthy{engine=\"1\"} 1"), "{metrics}");
}
