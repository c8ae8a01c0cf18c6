//! OTLP push reads the one record `/metrics` reads (issue 48, item 4): what a real receiver
//! (oteltap, `KILN_TEST_OTELTAP`, one NDJSON line per metric) gets equals what `/metrics`
//! shows: explicit-bucket counts equal the classic buckets, exponential buckets equal the
//! native ones at the same scale, delta points count the observations between two exports,
//! and the exemplars of traced requests arrive with their trace and span ids.

use std::time::Duration;

use kiln::engine::trace_context::TraceContext;
use kiln::otlp::{OtlpConfig, OtlpProtocol, OtlpTemporality};
use kiln::stats::exporter::{Telemetry, TelemetryConfig, build_telemetry_with_readers, render_metrics};
use kiln::stats::otlp_push::build_otlp_reader;
use kiln::stats::push_histograms::HistogramAggregation;
use prometheus::proto::LabelPair;
use serde_json::Value;

use super::push::{record_traced, telemetry_config};
use crate::common::oteltap::Oteltap;
use crate::common::process::free_port;
use crate::common::wait::wait_for;

const E2E: &str = "vllm:e2e_request_latency";

/// kiln pushing to oteltap on `port` at the flushes only (an hour's interval).
fn pushing(port: u16, temporality: OtlpTemporality, aggregation: HistogramAggregation) -> Telemetry {
    let mut cfg = OtlpConfig::new(
        format!("http://127.0.0.1:{port}/v1/metrics"),
        OtlpProtocol::HttpProtobuf,
    );
    cfg.interval = Duration::from_secs(3600);
    cfg.timeout = Duration::from_secs(2);
    cfg.temporality = temporality;
    let reader = build_otlp_reader(&cfg, Default::default()).unwrap();
    let telemetry = TelemetryConfig {
        push_histograms: aggregation,
        ..telemetry_config("store-push")
    };
    build_telemetry_with_readers(&telemetry, vec![reader]).unwrap()
}

fn flush(t: &Telemetry) {
    t.provider.as_ref().unwrap().force_flush().unwrap();
}

fn trace(n: u8) -> TraceContext {
    TraceContext {
        trace_id: [0xa0 + n; 16],
        span_id: [n; 8],
    }
}

/// A JSON number or a protobuf-JSON 64-bit integer string.
fn number(v: &Value) -> f64 {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("not a number: {v}"))
}

fn numbers(v: &Value) -> Vec<u64> {
    v.as_array()
        .map_or_else(Vec::new, |a| a.iter().map(|x| number(x) as u64).collect())
}

/// Each received metric named `name` with data `kind` (`histogram`, `exponentialHistogram`),
/// in arrival order: its data.
fn received(tap: &Oteltap, name: &str, kind: &str) -> Vec<Value> {
    tap.received()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["name"] == name)
        .filter_map(|m| m.get(kind).cloned())
        .collect()
}

/// The single data point of the latest `name` received once `ready` holds for it.
fn point(tap: &Oteltap, name: &str, kind: &str, ready: impl Fn(&Value) -> bool) -> Value {
    wait_for(&format!("{name} ({kind}) at oteltap"), || {
        let all = received(tap, name, kind);
        match all.last().map(|h| h["dataPoints"][0].clone()) {
            Some(p) if ready(&p) => Ok(p),
            other => Err(format!("{other:?}")),
        }
    })
}

/// OTLP/JSON writes ids as hex, protobuf's JSON mapping as base64: either is the id.
fn same_id(received: &Value, id: &[u8]) -> bool {
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let text = received.as_str().unwrap_or_default();
    text.eq_ignore_ascii_case(&hex) || text == base64(id)
}

fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `/metrics`' classic buckets of the e2e histogram, de-cumulated (the `+Inf` one last).
fn classic_buckets(t: &Telemetry) -> Vec<u64> {
    let text = render_metrics(&t.registry).unwrap();
    let cumulative: Vec<u64> = text
        .lines()
        .filter(|l| l.starts_with("vllm:e2e_request_latency_seconds_bucket{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64)
        .collect();
    let mut previous = 0;
    cumulative
        .iter()
        .map(|c| {
            let own = c - previous;
            previous = *c;
            own
        })
        .collect()
}

#[test]
#[ignore = "needs oteltap (KILN_TEST_OTELTAP)"]
fn explicit_push_equals_the_classic_buckets_and_carries_the_exemplars() {
    let port = free_port();
    let tap = Oteltap::start(port);
    let t = pushing(port, OtlpTemporality::Cumulative, HistogramAggregation::Explicit);
    let instruments = t.instruments.clone().unwrap();
    record_traced(&instruments, 3, Some(trace(1)));
    record_traced(&instruments, 3, None);
    flush(&t);
    let p = point(&tap, E2E, "histogram", |p| number(&p["count"]) == 2.0);
    let classic = classic_buckets(&t);
    assert_eq!(classic.iter().sum::<u64>(), 2, "{classic:?}");
    assert_eq!(numbers(&p["bucketCounts"]), classic, "{p}");
    assert_eq!(p["explicitBounds"].as_array().map(Vec::len), Some(classic.len() - 1));
    let exemplars = p["exemplars"].as_array().cloned().unwrap_or_default();
    assert_eq!(exemplars.len(), 1, "the traced request's latency: {p}");
    let e = &exemplars[0];
    assert!(same_id(&e["traceId"], &trace(1).trace_id), "{e}");
    assert!(same_id(&e["spanId"], &trace(1).span_id), "{e}");
    // The oneof `value`, flattened or nested, depending on the receiver's JSON writer.
    let value = e.get("asDouble").or_else(|| e["value"].get("asDouble"));
    assert_eq!(value.and_then(Value::as_f64), Some(1.25), "{e}");
    t.shutdown().unwrap();
}

#[test]
#[ignore = "needs oteltap (KILN_TEST_OTELTAP)"]
fn exponential_push_carries_the_native_buckets_at_the_stores_scale() {
    let port = free_port();
    let tap = Oteltap::start(port);
    let t = pushing(port, OtlpTemporality::Cumulative, HistogramAggregation::Exponential);
    let instruments = t.instruments.clone().unwrap();
    for _ in 0..3 {
        record_traced(&instruments, 3, None);
    }
    flush(&t);
    let p = point(&tap, E2E, "exponentialHistogram", |p| number(&p["count"]) == 3.0);
    // What `/metrics`' protobuf exposition reads: the store's snapshot of the series.
    let label = |name: &str, value: &str| {
        let mut l = LabelPair::default();
        l.set_name(name.to_owned());
        l.set_value(value.to_owned());
        l
    };
    let snapshot = t.exemplars.snapshot();
    let labels = [label("engine", "0"), label("model_name", "smollm2")];
    let native = &snapshot
        .series("vllm:e2e_request_latency_seconds", &labels)
        .expect("the e2e series on /metrics")
        .native;
    let scale = p.get("scale").map_or(0.0, number) as i32;
    assert_eq!(scale, native.schema(), "{p}");
    let buckets: Vec<(i32, u64)> = native.positive_buckets().collect();
    let offset = p["positive"].get("offset").map_or(0.0, number) as i32;
    assert_eq!(
        offset,
        buckets[0].0 - 1,
        "Prometheus bucket i is OTLP bucket i - 1: {p}"
    );
    let pushed: Vec<(i32, u64)> = numbers(&p["positive"]["bucketCounts"])
        .into_iter()
        .enumerate()
        .filter(|(_, c)| *c > 0)
        .map(|(i, c)| (offset + i as i32 + 1, c))
        .collect();
    assert_eq!(pushed, buckets, "{p}");
    t.shutdown().unwrap();
}

#[test]
#[ignore = "needs oteltap (KILN_TEST_OTELTAP)"]
fn delta_push_counts_the_observations_between_two_exports() {
    let port = free_port();
    let tap = Oteltap::start(port);
    for (aggregation, kind) in [
        (HistogramAggregation::Explicit, "histogram"),
        (HistogramAggregation::Exponential, "exponentialHistogram"),
    ] {
        let t = pushing(port, OtlpTemporality::Delta, aggregation);
        let instruments = t.instruments.clone().unwrap();
        let before = received(&tap, E2E, kind).len();
        record_traced(&instruments, 3, Some(trace(2)));
        flush(&t);
        wait_for(&format!("{kind}: the first delta"), || {
            let n = received(&tap, E2E, kind).len();
            if n > before { Ok(()) } else { Err(n) }
        });
        for _ in 0..2 {
            record_traced(&instruments, 3, None);
        }
        flush(&t);
        let counts = wait_for(&format!("{kind}: two deltas"), || {
            let all = received(&tap, E2E, kind);
            match all.get(before..) {
                Some(new) if new.len() >= 2 => Ok(new.to_vec()),
                _ => Err(all.len()),
            }
        });
        let count = |h: &Value| number(&h["dataPoints"][0]["count"]);
        assert_eq!((count(&counts[0]), count(&counts[1])), (1.0, 2.0), "{kind}: {counts:?}");
        // The enum by name or by number (DELTA is 1 in the proto; oteltap writes the number).
        let temporality = &counts[1]["aggregationTemporality"];
        assert!(
            *temporality == "AGGREGATION_TEMPORALITY_DELTA" || temporality.as_i64() == Some(1),
            "{kind}: {temporality}"
        );
        let exemplars = |h: &Value| h["dataPoints"][0]["exemplars"].as_array().map_or(0, Vec::len);
        assert_eq!(exemplars(&counts[0]), 1, "{kind}: the traced request's");
        assert_eq!(exemplars(&counts[1]), 0, "{kind}: none traced since");
        t.shutdown().unwrap();
    }
}
