//! The protobuf exposition format (`application/vnd.google.protobuf;
//! proto=io.prometheus.client.MetricFamily; encoding=delimited`): the one format that carries
//! Prometheus native histograms. Prometheus asks for it first when its `native-histograms`
//! feature is on. Every family is written from the same gather as the text formats; each
//! latency histogram carries its classic buckets (with their exemplars) and its native
//! buckets side by side, so a scraper that keeps classic histograms still finds every `le`.

use prometheus::proto::MetricType as GatheredType;
use prometheus::proto::{LabelPair as GatheredLabel, Metric as GatheredMetric, MetricFamily as GatheredFamily};
use prost::Message as _;

use super::histogram_store::{Exemplar as StoredExemplar, HistogramSnapshot, SeriesState};
use super::native_buckets::{NativeBuckets, SpansAndDeltas, ZERO_THRESHOLD};
use super::prom_proto::{
    Bucket, BucketSpan, Counter, Exemplar, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType, Quantile,
    Summary, Timestamp, Untyped,
};

/// The `Content-Type` of a protobuf answer.
pub const PROTOBUF_CONTENT_TYPE: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

/// `families` as length-delimited `MetricFamily` messages, with `histograms`' native buckets
/// and exemplars added to the latency histograms.
pub fn encode_protobuf(families: &[GatheredFamily], histograms: &HistogramSnapshot) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 * 1024);
    for family in families {
        family_message(family, histograms)
            .encode_length_delimited(&mut out)
            .expect("a Vec grows as needed");
    }
    out
}

fn family_message(family: &GatheredFamily, histograms: &HistogramSnapshot) -> MetricFamily {
    let name = family.name();
    let kind = match family.get_field_type() {
        GatheredType::COUNTER => MetricType::Counter,
        GatheredType::GAUGE => MetricType::Gauge,
        GatheredType::SUMMARY => MetricType::Summary,
        GatheredType::UNTYPED => MetricType::Untyped,
        GatheredType::HISTOGRAM => MetricType::Histogram,
    };
    // A family is native when any of its series was observed through the store; its other
    // series (none in practice: every observation goes to both) are then written as empty
    // native histograms, because a parser may decide by the family's first series.
    let native_family = kind == MetricType::Histogram
        && family
            .get_metric()
            .iter()
            .any(|m| histograms.series(name, m.get_label()).is_some());
    let metric = family
        .get_metric()
        .iter()
        .map(|m| {
            let state = histograms.series(name, m.get_label());
            metric_message(m, kind, state, native_family)
        })
        .collect();
    MetricFamily {
        name: name.to_owned(),
        help: family.help().to_owned(),
        r#type: kind as i32,
        metric,
    }
}

fn metric_message(m: &GatheredMetric, kind: MetricType, state: Option<&SeriesState>, native: bool) -> Metric {
    let mut out = Metric {
        label: m.get_label().iter().map(label).collect(),
        timestamp_ms: m.timestamp_ms(),
        ..Metric::default()
    };
    match kind {
        MetricType::Counter => {
            out.counter = Some(Counter {
                value: m.get_counter().value(),
            })
        }
        MetricType::Gauge => {
            out.gauge = Some(Gauge {
                value: m.get_gauge().value(),
            })
        }
        MetricType::Untyped => {
            out.untyped = Some(Untyped {
                value: m.untyped.value(),
            })
        }
        MetricType::Summary => {
            let s = m.get_summary();
            out.summary = Some(Summary {
                sample_count: s.sample_count(),
                sample_sum: s.sample_sum(),
                quantile: s
                    .get_quantile()
                    .iter()
                    .map(|q| Quantile {
                        quantile: q.quantile(),
                        value: q.value(),
                    })
                    .collect(),
            });
        }
        MetricType::Histogram => out.histogram = Some(histogram_message(m, state, native)),
    }
    out
}

fn histogram_message(m: &GatheredMetric, state: Option<&SeriesState>, native: bool) -> Histogram {
    let h = m.get_histogram();
    let exemplar_of = |le: f64| state.and_then(|s| s.exemplars.for_bucket(le)).map(exemplar);
    let bucket: Vec<Bucket> = h
        .get_bucket()
        .iter()
        .map(|b| Bucket {
            cumulative_count: b.cumulative_count(),
            upper_bound: b.upper_bound(),
            exemplar: exemplar_of(b.upper_bound()),
        })
        .collect();
    let mut out = Histogram {
        sample_count: h.get_sample_count(),
        sample_sum: h.get_sample_sum(),
        bucket,
        ..Histogram::default()
    };
    if !native {
        return out;
    }
    let empty = NativeBuckets::default();
    let buckets = state.map_or(&empty, |s| &s.native);
    // Count and sum from the same state as the buckets, so they always agree.
    out.sample_count = buckets.count();
    out.sample_sum = buckets.sum();
    out.schema = buckets.schema();
    out.zero_threshold = ZERO_THRESHOLD;
    out.zero_count = buckets.zero_count();
    (out.positive_span, out.positive_delta) = spans(buckets.positive());
    (out.negative_span, out.negative_delta) = spans(buckets.negative());
    out.exemplars = out.bucket.iter().filter_map(|b| b.exemplar.clone()).collect();
    let inf_listed = out.bucket.last().is_some_and(|b| b.upper_bound == f64::INFINITY);
    if let Some(e) = state
        .and_then(|s| s.exemplars.for_bucket(f64::INFINITY))
        .filter(|_| !inf_listed)
    {
        out.exemplars.push(exemplar(e));
    }
    out
}

fn spans(s: SpansAndDeltas) -> (Vec<BucketSpan>, Vec<i64>) {
    let spans = s
        .spans
        .iter()
        .map(|s| BucketSpan {
            offset: s.offset,
            length: s.length,
        })
        .collect();
    (spans, s.deltas)
}

fn label(p: &GatheredLabel) -> LabelPair {
    LabelPair {
        name: p.name().to_owned(),
        value: p.value().to_owned(),
    }
}

fn exemplar(e: &StoredExemplar) -> Exemplar {
    let pair = |name: &str, value: String| LabelPair {
        name: name.to_owned(),
        value,
    };
    Exemplar {
        label: vec![
            pair("trace_id", e.trace.trace_id_hex()),
            pair("span_id", e.trace.span_id_hex()),
        ],
        value: e.value,
        timestamp: Some(Timestamp {
            seconds: e.timestamp_s.trunc() as i64,
            nanos: (e.timestamp_s.fract() * 1e9) as i32,
        }),
    }
}

#[cfg(test)]
mod tests;
