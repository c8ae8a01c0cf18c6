use prost::Message as _;

use super::*;
use crate::engine::trace_context::TraceContext;
use crate::engine::types::FinishReason;
use crate::stats::data::{IterationStats, Observation, SchedulerStats};
use crate::stats::exporter::build_telemetry;
use crate::stats::exporter::test_support::{config, finished};
use crate::stats::native_buckets::bucket_index;

const TRACE: TraceContext = TraceContext {
    trace_id: [0x4b; 16],
    span_id: [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef],
};

/// Every message of a delimited stream, as a decoder reads them.
fn decode_all(mut bytes: &[u8]) -> Vec<MetricFamily> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        out.push(MetricFamily::decode_length_delimited(&mut bytes).expect("a whole message"));
    }
    out
}

fn after_a_step(ttfts: &[f64]) -> Vec<MetricFamily> {
    let t = build_telemetry(&config("vllm:")).unwrap();
    let mut ttft: Vec<Observation> = ttfts.iter().map(|v| Observation::from(*v)).collect();
    ttft[0] = Observation::new(ttfts[0], Some(TRACE));
    let iteration = IterationStats {
        num_batched_tokens: 7,
        time_to_first_token_s: ttft,
        finished: vec![finished(FinishReason::Stop, 3)],
        ..Default::default()
    };
    t.instruments
        .as_ref()
        .unwrap()
        .record_step_for_test(&SchedulerStats::default(), &iteration);
    decode_all(&encode_protobuf(&t.registry.gather(), &t.exemplars.snapshot()))
}

fn family<'a>(families: &'a [MetricFamily], name: &str) -> &'a MetricFamily {
    families
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("{name} missing"))
}

#[test]
fn latency_histograms_carry_native_buckets_beside_the_classic_ones() {
    let ttfts = [0.9, 0.03, 0.031, 0.5, 12.0];
    let families = after_a_step(&ttfts);
    let ttft = family(&families, "vllm:time_to_first_token_seconds");
    assert_eq!(ttft.r#type, MetricType::Histogram as i32);
    let h = ttft.metric[0].histogram.as_ref().expect("a histogram");
    assert_eq!(h.sample_count, 5);
    assert!((h.sample_sum - ttfts.iter().sum::<f64>()).abs() < 1e-9);
    // Classic buckets as on the text format: cumulative, ending at the largest bound.
    assert!(h.bucket.len() > 5, "{:?}", h.bucket);
    assert!(
        h.bucket
            .windows(2)
            .all(|w| w[0].cumulative_count <= w[1].cumulative_count)
    );
    // Native: schema 3, a non-zero zero threshold, and buckets that decode to the values.
    assert_eq!((h.schema, h.zero_count), (3, 0));
    assert!(h.zero_threshold > 0.0);
    let mut index = 0i32;
    let mut count = 0i64;
    let mut decoded = Vec::new();
    let mut deltas = h.positive_delta.iter();
    for span in &h.positive_span {
        index += span.offset;
        for _ in 0..span.length {
            count += deltas.next().expect("a delta per bucket");
            decoded.push((index, count as u64));
            index += 1;
        }
    }
    let mut expected: Vec<(i32, u64)> = Vec::new();
    let mut indices: Vec<i32> = ttfts.iter().map(|v| bucket_index(*v, 3)).collect();
    indices.sort_unstable();
    for i in indices {
        match expected.last_mut() {
            Some((last, n)) if *last == i => *n += 1,
            _ => expected.push((i, 1)),
        }
    }
    assert_eq!(decoded, expected, "0.03 and 0.031 share a bucket; the rest stand alone");
    // The traced observation's exemplar rides on its classic bucket and on the native list.
    let bucket = h.bucket.iter().find(|b| b.exemplar.is_some()).expect("an exemplar");
    assert!(bucket.upper_bound >= 0.9);
    assert_eq!(h.exemplars.len(), 1);
    let e = &h.exemplars[0];
    assert_eq!(e.value, 0.9);
    assert_eq!(e.label[0].value, TRACE.trace_id_hex());
    assert!(e.timestamp.as_ref().is_some_and(|t| t.seconds > 1_700_000_000));
}

#[test]
fn other_families_are_written_as_gathered() {
    let families = after_a_step(&[0.1]);
    let success = family(&families, "vllm:request_success_total");
    assert_eq!(success.r#type, MetricType::Counter as i32);
    let stop = success
        .metric
        .iter()
        .find(|m| m.label.iter().any(|l| l.name == "finished_reason" && l.value == "stop"))
        .expect("the stop series");
    assert_eq!(stop.counter.as_ref().map(|c| c.value), Some(1.0));
    // Token-count histograms keep classic buckets only.
    let prompt = family(&families, "vllm:request_prompt_tokens");
    let h = prompt.metric[0].histogram.as_ref().unwrap();
    assert!(h.positive_span.is_empty() && h.zero_threshold == 0.0 && !h.bucket.is_empty());
    let text_names: Vec<String> = crate::stats::exposition::encode(
        &build_telemetry(&config("vllm:")).unwrap().registry.gather(),
        crate::stats::exposition::ExpositionFormat::PrometheusText,
        &Default::default(),
    )
    .lines()
    .filter_map(|l| {
        l.strip_prefix("# TYPE ")
            .and_then(|l| l.split(' ').next())
            .map(str::to_owned)
    })
    .collect();
    for name in text_names {
        assert!(
            families.iter().any(|f| f.name == name),
            "{name} is in text but not protobuf"
        );
    }
}
