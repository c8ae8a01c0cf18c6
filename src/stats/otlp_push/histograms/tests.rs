//! The store's series as OTLP points: bucket mapping, exemplars, deltas and a schema reduced
//! between two exports. The same conversion against real receivers: `tests/it/otlp/`.

use std::sync::Arc;

use opentelemetry::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::{ExponentialHistogramDataPoint, HistogramDataPoint};

use super::*;
use crate::engine::trace_context::TraceContext;
use crate::stats::histogram_store::{ExemplarHistogram, HistogramStore};
use crate::stats::native_buckets::bucket_index;

fn trace(n: u8) -> TraceContext {
    TraceContext {
        trace_id: [n; 16],
        span_id: [n; 8],
    }
}

fn ttft() -> ExemplarHistogram {
    ExemplarHistogram::described("vllm:time_to_first_token", "s", "TTFT.", vec![0.1, 1.0], true)
}

fn tokens() -> ExemplarHistogram {
    ExemplarHistogram::described("vllm:request_prompt_tokens", "{token}", "Prompt.", vec![10.0], false)
}

fn labels() -> [KeyValue; 2] {
    [KeyValue::new("model_name", "m"), KeyValue::new("engine", "0")]
}

fn pushed(store: &Arc<HistogramStore>, aggregation: HistogramAggregation, delta: bool) -> StoreHistograms {
    let pushed = PushedHistograms {
        store: store.clone(),
        aggregation,
    };
    StoreHistograms::new(pushed, delta, 1_000)
}

fn explicit_points(metrics: &[Metric], name: &str) -> Vec<HistogramDataPoint> {
    match metrics.iter().find(|m| m.name == name).and_then(|m| m.data.clone()) {
        Some(metric::Data::Histogram(h)) => h.data_points,
        other => panic!("{name}: {other:?}"),
    }
}

fn exponential_points(metrics: &[Metric], name: &str) -> Vec<ExponentialHistogramDataPoint> {
    match metrics.iter().find(|m| m.name == name).and_then(|m| m.data.clone()) {
        Some(metric::Data::ExponentialHistogram(h)) => h.data_points,
        other => panic!("{name}: {other:?}"),
    }
}

#[test]
fn explicit_points_are_the_classic_buckets_with_their_exemplars() {
    let store = Arc::new(HistogramStore::default());
    let push = pushed(&store, HistogramAggregation::Explicit, false);
    store.declare(&ttft(), &labels());
    store.record(&ttft(), &labels(), 0.05, None);
    store.record(&ttft(), &labels(), 0.5, Some(trace(7)));
    store.record(&ttft(), &labels(), 3.0, None);
    let metrics = push.metrics(5_000);
    let metric = &metrics[0];
    assert_eq!(
        (metric.name.as_str(), metric.unit.as_str()),
        ("vllm:time_to_first_token", "s")
    );
    assert_eq!(metric.description, "TTFT.");
    let points = explicit_points(&metrics, "vllm:time_to_first_token");
    assert_eq!(points.len(), 1, "one series, declared then observed");
    let p = &points[0];
    assert_eq!(p.bucket_counts, [1, 1, 1]);
    assert_eq!(p.explicit_bounds, [0.1, 1.0]);
    assert_eq!((p.count, p.sum), (3, Some(3.55)));
    assert_eq!((p.start_time_unix_nano, p.time_unix_nano), (1_000, 5_000));
    let keys: Vec<&str> = p.attributes.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["model_name", "engine"], "the attributes as recorded");
    assert_eq!(p.exemplars.len(), 1);
    let e = &p.exemplars[0];
    assert_eq!(
        (e.trace_id.as_slice(), e.span_id.as_slice()),
        (&[7u8; 16][..], &[7u8; 8][..])
    );
    assert_eq!(e.value, Some(exemplar::Value::AsDouble(0.5)));
}

#[test]
fn exponential_points_carry_the_native_buckets_one_index_lower() {
    let store = Arc::new(HistogramStore::default());
    let push = pushed(&store, HistogramAggregation::Exponential, false);
    let values = [1.0, 1.05, 2.0, 2.0, 0.3];
    for v in values {
        store.record(&ttft(), &labels(), v, None);
        // A classic-only family keeps native buckets too once exponential push reads it.
        store.record(&tokens(), &labels(), v * 10.0, None);
    }
    let metrics = push.metrics(2_000);
    for name in ["vllm:time_to_first_token", "vllm:request_prompt_tokens"] {
        let p = &exponential_points(&metrics, name)[0];
        assert_eq!((p.scale, p.count, p.zero_count), (3, 5, 0), "{name}");
        let positive = p.positive.clone().unwrap();
        let scale = if name.ends_with("tokens") { 10.0 } else { 1.0 };
        let first = values.iter().map(|v| bucket_index(v * scale, 3)).min().unwrap();
        assert_eq!(positive.offset, first - 1, "{name}");
        // Every value in OTLP bucket j holds (2^(j/8), 2^((j+1)/8)].
        for v in values {
            let j = bucket_index(v * scale, 3) - 1;
            let (lower, upper) = (2f64.powf(f64::from(j) / 8.0), 2f64.powf(f64::from(j + 1) / 8.0));
            assert!(
                lower < v * scale * (1.0 + 1e-12) && v * scale <= upper * (1.0 + 1e-12),
                "{v}"
            );
            assert!(positive.bucket_counts[(j - positive.offset) as usize] > 0, "{name} {v}");
        }
        assert_eq!(positive.bucket_counts.iter().sum::<u64>(), 5);
    }
    // `/metrics` still sees native buckets for the latency family only.
    assert_eq!(store.snapshot().series_count(), 1);
}

#[test]
fn delta_points_hold_what_came_since_the_last_export() {
    use crate::stats::otlp_push::now_ns;
    let store = Arc::new(HistogramStore::default());
    // Wall-clock times: an exemplar goes in the interval its timestamp falls in (a timestamp
    // kept as f64 seconds is exact to about 0.25 µs, so the first interval starts 1 ms back).
    let t0 = now_ns() - 1_000_000;
    let pushed_histograms = PushedHistograms {
        store: store.clone(),
        aggregation: HistogramAggregation::Explicit,
    };
    let push = StoreHistograms::new(pushed_histograms, true, t0);
    store.declare(&tokens(), &labels());
    store.record(&ttft(), &labels(), 0.5, Some(trace(1)));
    store.record(&ttft(), &labels(), 0.5, None);
    let t1 = now_ns();
    let first = push.metrics(t1);
    assert!(
        first.iter().all(|m| m.name != "vllm:request_prompt_tokens"),
        "a series with nothing in the interval is not sent"
    );
    let p = &explicit_points(&first, "vllm:time_to_first_token")[0];
    assert_eq!((p.count, p.bucket_counts.clone()), (2, vec![0, 2, 0]));
    assert_eq!((p.start_time_unix_nano, p.time_unix_nano), (t0, t1));
    assert_eq!(p.exemplars.len(), 1);
    std::thread::sleep(std::time::Duration::from_millis(2)); // well past t1 on the clock
    store.record(&ttft(), &labels(), 5.0, None);
    let t2 = now_ns();
    let second = push.metrics(t2);
    let p = &explicit_points(&second, "vllm:time_to_first_token")[0];
    assert_eq!((p.count, p.sum, p.bucket_counts.clone()), (1, Some(5.0), vec![0, 0, 1]));
    assert_eq!((p.start_time_unix_nano, p.time_unix_nano), (t1, t2));
    assert!(p.exemplars.is_empty(), "trace 1 was in the first interval");
    assert!(push.metrics(now_ns()).is_empty(), "nothing new");
}

#[test]
fn an_exponential_delta_across_a_schema_reduction_is_at_the_new_schema() {
    let store = Arc::new(HistogramStore::default());
    let push = pushed(&store, HistogramAggregation::Exponential, true);
    for v in [1.0, 1.05, 2.0] {
        store.record(&ttft(), &labels(), v, None);
    }
    let first = push.metrics(2_000);
    assert_eq!(exponential_points(&first, "vllm:time_to_first_token")[0].scale, 3);
    // 400 buckets' worth of values: the store's schema drops to 1 before the next export.
    for i in -200..200 {
        store.record(&ttft(), &labels(), 2f64.powf((f64::from(i) - 0.5) / 8.0), None);
    }
    let second = push.metrics(3_000);
    let p = &exponential_points(&second, "vllm:time_to_first_token")[0];
    assert_eq!((p.scale, p.count), (1, 400));
    let positive = p.positive.clone().unwrap();
    assert_eq!(positive.bucket_counts.iter().sum::<u64>(), 400);
    let native = store.export()[0].state.native.clone();
    assert_eq!(native.schema(), 1);
    let cumulative: u64 = native.positive_buckets().map(|(_, c)| c).sum();
    assert_eq!(cumulative, 403, "both exports together are the whole series");
}
