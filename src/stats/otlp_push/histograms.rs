//! The store's histograms as OTLP metrics, appended by kiln's exporter to the SDK's counters
//! and gauges: explicit-bucket points from the classic buckets, or exponential points from
//! the native buckets (Prometheus schema = OTLP scale; Prometheus bucket `i`, which holds
//! `(2^((i-1)/2^s), 2^(i/2^s)]`, is OTLP bucket `i - 1`, which holds `(base^j, base^(j+1)]`),
//! each with the store's exemplars. Cumulative, or delta: the difference from the copy taken
//! at the last export (native buckets: that copy first reduced to the current schema).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use opentelemetry_proto::tonic::common::v1::KeyValue as ProtoKeyValue;
use opentelemetry_proto::tonic::metrics::v1::exponential_histogram_data_point::Buckets;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Exemplar, ExponentialHistogram, ExponentialHistogramDataPoint, Histogram,
    HistogramDataPoint, Metric, exemplar, metric,
};

use crate::stats::histogram_store::{ClassicBuckets, ExportedSeries, SeriesState};
use crate::stats::native_buckets::ZERO_THRESHOLD;
use crate::stats::push_histograms::{HistogramAggregation, PushedHistograms};

/// The store's histograms for each export, remembering the last export for deltas.
#[derive(Debug)]
pub(super) struct StoreHistograms {
    pushed: PushedHistograms,
    delta: bool,
    last: Mutex<LastExport>,
}

/// The previous export: when, and (delta only) a copy of every series then, in store order
/// (the store only appends series, so a position names one series for good).
#[derive(Debug)]
struct LastExport {
    at_ns: u64,
    series: Vec<SeriesState>,
}

impl StoreHistograms {
    /// `started_ns`: the start of the first interval (cumulative points start there).
    pub(super) fn new(pushed: PushedHistograms, delta: bool, started_ns: u64) -> Self {
        if pushed.aggregation == HistogramAggregation::Exponential {
            pushed.store.keep_native_for_all();
        }
        Self {
            pushed,
            delta,
            last: Mutex::new(LastExport {
                at_ns: started_ns,
                series: Vec::new(),
            }),
        }
    }

    /// Every histogram family as an OTLP metric at `now_ns`; under delta temporality the
    /// interval since the last call, whose copy this call replaces.
    pub(super) fn metrics(&self, now_ns: u64) -> Vec<Metric> {
        let series = self.pushed.store.export();
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let window = Window {
            start_ns: last.at_ns,
            now_ns,
            delta: self.delta,
        };
        let previous = self.delta.then_some(last.series.as_slice());
        let metrics = to_metrics(&series, previous, window, self.pushed.aggregation);
        if self.delta {
            last.at_ns = now_ns;
            last.series = series.into_iter().map(|s| s.state).collect();
        }
        metrics
    }
}

/// The interval a set of points covers.
#[derive(Debug, Clone, Copy)]
struct Window {
    start_ns: u64,
    now_ns: u64,
    delta: bool,
}

/// One metric per family, in the order its first series was created; a point per series
/// (delta: only the series observed in the window, as the SDK's delta aggregation sends).
fn to_metrics(
    series: &[ExportedSeries],
    previous: Option<&[SeriesState]>,
    window: Window,
    aggregation: HistogramAggregation,
) -> Vec<Metric> {
    let temporality = if window.delta {
        AggregationTemporality::Delta
    } else {
        AggregationTemporality::Cumulative
    } as i32;
    let mut metrics: Vec<Metric> = Vec::new();
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    for (i, s) in series.iter().enumerate() {
        let state = match previous.and_then(|p| p.get(i)) {
            Some(before) => since(&s.state, before),
            None => s.state.clone(),
        };
        if window.delta && state.classic.count() == 0 {
            continue;
        }
        let h = &s.histogram;
        let slot = *by_name.entry(h.name()).or_insert_with(|| {
            let data = match aggregation {
                HistogramAggregation::Explicit => metric::Data::Histogram(Histogram {
                    data_points: Vec::new(),
                    aggregation_temporality: temporality,
                }),
                HistogramAggregation::Exponential => metric::Data::ExponentialHistogram(ExponentialHistogram {
                    data_points: Vec::new(),
                    aggregation_temporality: temporality,
                }),
            };
            metrics.push(Metric {
                name: h.name().to_owned(),
                description: h.help().to_owned(),
                unit: h.unit().to_owned(),
                data: Some(data),
                ..Metric::default()
            });
            metrics.len() - 1
        });
        let attributes: Vec<ProtoKeyValue> = s.attributes.iter().map(Into::into).collect();
        let exemplars = exemplars(&state, window);
        match &mut metrics[slot].data {
            Some(metric::Data::Histogram(out)) => out.data_points.push(HistogramDataPoint {
                attributes,
                start_time_unix_nano: window.start_ns,
                time_unix_nano: window.now_ns,
                count: state.classic.count(),
                sum: Some(state.classic.sum()),
                bucket_counts: state.classic.counts().to_vec(),
                explicit_bounds: h.bounds().to_vec(),
                exemplars,
                ..HistogramDataPoint::default()
            }),
            Some(metric::Data::ExponentialHistogram(out)) => {
                let native = &state.native;
                out.data_points.push(ExponentialHistogramDataPoint {
                    attributes,
                    start_time_unix_nano: window.start_ns,
                    time_unix_nano: window.now_ns,
                    count: native.count(),
                    sum: Some(native.sum()),
                    scale: native.schema(),
                    zero_count: native.zero_count(),
                    positive: Some(dense(native.positive_buckets())),
                    negative: Some(dense(native.negative_buckets())),
                    exemplars,
                    zero_threshold: ZERO_THRESHOLD,
                    ..ExponentialHistogramDataPoint::default()
                })
            }
            _ => unreachable!("every metric built above is a histogram"),
        }
    }
    metrics
}

/// A series' state less what it held at the last export.
fn since(now: &SeriesState, before: &SeriesState) -> SeriesState {
    let classic = &now.classic;
    let old = &before.classic;
    let counts = classic
        .counts()
        .iter()
        .enumerate()
        .map(|(i, c)| c.saturating_sub(old.counts().get(i).copied().unwrap_or(0)))
        .collect();
    SeriesState {
        classic: ClassicBuckets::from_parts(
            counts,
            classic.sum() - old.sum(),
            classic.count().saturating_sub(old.count()),
        ),
        exemplars: now.exemplars.clone(),
        native: now.native.since(&before.native),
    }
}

/// The populated buckets `(Prometheus index, count)` as OTLP's dense run: offset = the first
/// Prometheus index less one, a count for every index up to the last (empty ones 0).
fn dense(buckets: impl Iterator<Item = (i32, u64)>) -> Buckets {
    let buckets: Vec<(i32, u64)> = buckets.collect();
    let Some(&(first, _)) = buckets.first() else {
        return Buckets::default();
    };
    let last = buckets.last().map_or(first, |b| b.0);
    let mut counts = vec![0u64; (last - first + 1) as usize];
    for (index, count) in buckets {
        counts[(index - first) as usize] = count;
    }
    Buckets {
        offset: first - 1,
        bucket_counts: counts,
    }
}

/// The series' exemplars (delta: those observed in the window), with their trace and span.
fn exemplars(state: &SeriesState, window: Window) -> Vec<Exemplar> {
    state
        .exemplars
        .slots()
        .iter()
        .flatten()
        .map(|e| (e, (e.timestamp_s * 1e9) as u64))
        .filter(|(_, at_ns)| !window.delta || *at_ns > window.start_ns)
        .map(|(e, at_ns)| Exemplar {
            time_unix_nano: at_ns,
            span_id: e.trace.span_id.to_vec(),
            trace_id: e.trace.trace_id.to_vec(),
            value: Some(exemplar::Value::AsDouble(e.value)),
            ..Exemplar::default()
        })
        .collect()
}

#[cfg(test)]
mod tests;
