//! OTLP exponential histograms (issue 29, item 2): with `--otlp-histogram-aggregation
//! exponential` a real receiver (oteltap, `KILN_TEST_OTELTAP`) gets `ExponentialHistogram`
//! points for the latency histograms whose count and sum equal `/metrics`' classic histogram
//! of the same family, which keeps its `le` buckets.

use kiln::executor::fake::FakeBehaviour;
use serde_json::{Value, json};

use crate::common::oteltap::Oteltap;
use crate::common::process::free_port;
use crate::common::wait::wait_for;
use crate::common::{Tiny, metric_value, scrape_until, start_fake};

const REQUESTS: usize = 5;

/// `v[key]`, with `key` in protobuf JSON's camelCase or the proto's snake_case.
fn field<'a>(v: &'a Value, camel: &str, snake: &str) -> Option<&'a Value> {
    v.get(camel).or_else(|| v.get(snake))
}

/// Every object in `v` (at any depth) named `name` that carries `key` (camel, snake).
fn find<'a>(v: &'a Value, name: &str, key: (&str, &str), out: &mut Vec<&'a Value>) {
    match v {
        Value::Object(map) => {
            if map.get("name").and_then(Value::as_str) == Some(name) && field(v, key.0, key.1).is_some() {
                out.push(v);
            }
            map.values().for_each(|child| find(child, name, key, out));
        }
        Value::Array(items) => items.iter().for_each(|child| find(child, name, key, out)),
        _ => {}
    }
}

const EXPONENTIAL: (&str, &str) = ("exponentialHistogram", "exponential_histogram");
const EXPLICIT: (&str, &str) = ("histogram", "histogram");

/// A JSON number or a protobuf-JSON int64 string.
fn number(v: &Value) -> f64 {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The (count, sum, scale) of the latest `ExponentialHistogram` point of `name` received.
fn latest_exponential(received: &str, name: &str) -> Option<(f64, f64, i64)> {
    let mut found = Vec::new();
    let lines: Vec<Value> = received.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    for line in &lines {
        find(line, name, EXPONENTIAL, &mut found);
    }
    let metric = found.last()?;
    let histogram = field(metric, EXPONENTIAL.0, EXPONENTIAL.1)?;
    let point = field(histogram, "dataPoints", "data_points")?.as_array()?.last()?;
    Some((
        number(&point["count"]),
        number(&point["sum"]),
        point.get("scale").map_or(0, |s| number(s) as i64),
    ))
}

fn pushing(port: u16) -> Tiny {
    start_fake(FakeBehaviour::default(), |c| {
        c.telemetry.otlp_endpoint = format!("http://127.0.0.1:{port}/v1/metrics");
        c.telemetry.otlp_interval_s = 0.2;
        c.telemetry.otlp_timeout_s = 2.0;
        c.telemetry.otlp_histogram_aggregation = "exponential".into();
    })
}

#[test]
#[ignore = "needs oteltap (KILN_TEST_OTELTAP)"]
fn exponential_push_matches_the_classic_histogram_on_metrics() {
    let port = free_port();
    let tap = Oteltap::start(port);
    let t = pushing(port);
    for i in 0..REQUESTS {
        let body = json!({"prompt": [10 + i as u32, 11, 12], "max_tokens": 4 + i});
        assert_eq!(t.post("/v1/completions", &body).0, 200);
    }
    let count = "vllm:e2e_request_latency_seconds_count";
    let text = scrape_until(&t, |m| metric_value(m, count, "") == Some(REQUESTS as f64));
    let sum = metric_value(&text, "vllm:e2e_request_latency_seconds_sum", "").expect("sum");
    assert!(
        text.contains("vllm:e2e_request_latency_seconds_bucket{"),
        "the classic buckets stay on /metrics"
    );
    let (pushed_count, pushed_sum, scale) =
        wait_for(
            "an exponential e2e histogram of every request",
            || match latest_exponential(&tap.received(), "vllm:e2e_request_latency") {
                Some(p) if p.0 == REQUESTS as f64 => Ok(p),
                other => Err(format!("{other:?}")),
            },
        );
    assert_eq!(pushed_count, REQUESTS as f64);
    // Both sides summed the same f64 observations in the same order.
    assert!(
        (pushed_sum - sum).abs() <= 1e-9 * sum.max(1.0),
        "pushed {pushed_sum}, /metrics {sum}"
    );
    assert!((-10..=20).contains(&scale), "scale {scale}");
    // Token histograms go exponential too, and explicit ones do not reach the receiver.
    let received = tap.received();
    assert!(latest_exponential(&received, "vllm:request_generation_tokens").is_some());
    let lines: Vec<Value> = received.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let mut explicit = Vec::new();
    for line in &lines {
        find(line, "vllm:e2e_request_latency", EXPLICIT, &mut explicit);
    }
    assert!(explicit.is_empty(), "no explicit-bucket copy is pushed");
}
