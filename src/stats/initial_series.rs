//! Histogram series exposed from start-up with zero counts. vLLM registers every engine
//! histogram with its `model_name` and `engine` labels at start, so on a fresh or idle server
//! `absent(...)` alerts stay quiet and `rate(...)` has a baseline. The OpenTelemetry SDK
//! creates a series only at its first observation, so the instrument builder declares here
//! each histogram whose labels are known at start, and `/metrics` adds a zero-count series
//! for every declared one the gather does not have yet. Families whose labels come with
//! traffic (HTTP routes, GenAI operations) appear with their first request, as in vLLM.

use std::sync::{Mutex, PoisonError};

use opentelemetry::KeyValue;
use prometheus::proto::{Bucket, Histogram, LabelPair, Metric, MetricFamily, MetricType};

/// One histogram series to expose before its first observation.
#[derive(Debug, Clone)]
struct DeclaredSeries {
    /// The exposed family name (`vllm:time_to_first_token_seconds`).
    family: String,
    help: String,
    bounds: Vec<f64>,
    /// Sorted by name, as the exporter writes them.
    labels: Vec<(String, String)>,
}

/// Every declared series; written once at start, read by each scrape.
#[derive(Debug, Default)]
pub struct InitialSeries {
    declared: Mutex<Vec<DeclaredSeries>>,
}

impl InitialSeries {
    /// Declares family `family`'s series with `labels` (names as exposed).
    pub fn declare(&self, family: &str, help: &str, bounds: &[f64], labels: &[KeyValue]) {
        let mut labels: Vec<(String, String)> = labels
            .iter()
            .map(|kv| (kv.key.as_str().to_owned(), kv.value.as_str().into_owned()))
            .collect();
        labels.sort();
        let series = DeclaredSeries {
            family: family.to_owned(),
            help: help.to_owned(),
            bounds: bounds.to_vec(),
            labels,
        };
        self.declared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(series);
    }

    /// `families` (sorted by name, as a gather returns them) plus a zero-count series for
    /// every declared series they lack, still sorted by name.
    pub fn complete(&self, mut families: Vec<MetricFamily>) -> Vec<MetricFamily> {
        let declared = self.declared.lock().unwrap_or_else(PoisonError::into_inner);
        for series in declared.iter() {
            let index = match families.binary_search_by(|f| f.name().cmp(series.family.as_str())) {
                Ok(index) => index,
                Err(index) => {
                    families.insert(index, empty_family(series));
                    index
                }
            };
            let family = &mut families[index];
            if family.get_field_type() != MetricType::HISTOGRAM {
                continue;
            }
            let present = family.get_metric().iter().any(|m| same_labels(m, &series.labels));
            if !present {
                family.mut_metric().push(zero_series(series));
            }
        }
        families
    }
}

fn empty_family(series: &DeclaredSeries) -> MetricFamily {
    let mut family = MetricFamily::default();
    family.set_name(series.family.clone());
    family.set_help(series.help.clone());
    family.set_field_type(MetricType::HISTOGRAM);
    family
}

fn same_labels(metric: &Metric, labels: &[(String, String)]) -> bool {
    let mut have: Vec<(&str, &str)> = metric.get_label().iter().map(|p| (p.name(), p.value())).collect();
    have.sort();
    have.len() == labels.len() && have.iter().zip(labels).all(|(a, b)| a.0 == b.0 && a.1 == b.1)
}

fn zero_series(series: &DeclaredSeries) -> Metric {
    let labels = series
        .labels
        .iter()
        .map(|(name, value)| {
            let mut pair = LabelPair::default();
            pair.set_name(name.clone());
            pair.set_value(value.clone());
            pair
        })
        .collect();
    let mut metric = Metric::from_label(labels);
    let mut histogram = Histogram::default();
    histogram.set_sample_count(0);
    histogram.set_sample_sum(0.0);
    let buckets = series
        .bounds
        .iter()
        .chain([f64::INFINITY].iter())
        .map(|&bound| {
            let mut bucket = Bucket::default();
            bucket.set_upper_bound(bound);
            bucket.set_cumulative_count(0);
            bucket
        })
        .collect();
    histogram.set_bucket(buckets);
    metric.set_histogram(histogram);
    metric
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::exposition::{ExpositionFormat, encode};
    use crate::stats::histogram_store::HistogramSnapshot;

    fn labels() -> [KeyValue; 2] {
        [KeyValue::new("model_name", "m"), KeyValue::new("engine", "0")]
    }

    #[test]
    fn a_declared_series_shows_at_zero_until_observed_and_then_only_once() {
        let initial = InitialSeries::default();
        initial.declare("vllm:e2e_seconds", "End to end.", &[0.5, 1.0], &labels());
        let text = encode(
            &initial.complete(Vec::new()),
            ExpositionFormat::PrometheusText,
            &HistogramSnapshot::default(),
        );
        assert_eq!(
            text,
            "# HELP vllm:e2e_seconds End to end.\n\
             # TYPE vllm:e2e_seconds histogram\n\
             vllm:e2e_seconds_bucket{engine=\"0\",model_name=\"m\",le=\"0.5\"} 0\n\
             vllm:e2e_seconds_bucket{engine=\"0\",model_name=\"m\",le=\"1.0\"} 0\n\
             vllm:e2e_seconds_bucket{engine=\"0\",model_name=\"m\",le=\"+Inf\"} 0\n\
             vllm:e2e_seconds_sum{engine=\"0\",model_name=\"m\"} 0\n\
             vllm:e2e_seconds_count{engine=\"0\",model_name=\"m\"} 0\n"
        );
        // Once the gather has the series (in any label order), nothing is added.
        let gathered = initial.complete(Vec::new());
        let again = initial.complete(gathered.clone());
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].get_metric().len(), 1);
        // Another label set of the same family is added beside it; order by name is kept.
        let other = InitialSeries::default();
        other.declare(
            "vllm:e2e_seconds",
            "End to end.",
            &[0.5],
            &[KeyValue::new("engine", "1")],
        );
        other.declare("vllm:a_seconds", "A.", &[0.5], &labels());
        other.declare("vllm:z_seconds", "Z.", &[0.5], &labels());
        let merged = other.complete(gathered);
        let names: Vec<&str> = merged.iter().map(|f| f.name()).collect();
        assert_eq!(names, ["vllm:a_seconds", "vllm:e2e_seconds", "vllm:z_seconds"]);
        assert_eq!(merged[1].get_metric().len(), 2);
    }
}
