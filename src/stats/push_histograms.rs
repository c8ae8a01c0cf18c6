//! OTLP push of the histograms as base-2 exponential histograms
//! (`--otlp-histogram-aggregation exponential`, or the standard
//! `OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION=base2_exponential_bucket_histogram`).
//!
//! The exporter reads the same record `/metrics` reads, `HistogramStore`: with exponential
//! push, every family keeps native buckets there (not only the latency ones) and is pushed as
//! an `ExponentialHistogram` at the store's schema (OTLP scale); `/metrics` is unchanged.
//! Before issue 48 this needed a second meter provider and a copy of every instrument (the
//! SDK picks a histogram's aggregation per provider, not per reader); docs/09 has the story.

use std::str::FromStr;
use std::sync::Arc;

use opentelemetry_sdk::metrics::reader::MetricReader;

use super::histogram_store::HistogramStore;

/// The standard variable (OpenTelemetry's OTLP exporter specification).
pub const DEFAULT_HISTOGRAM_AGGREGATION_VAR: &str = "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION";

/// How pushed histograms are aggregated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HistogramAggregation {
    /// The explicit buckets `/metrics` serves (the default).
    #[default]
    Explicit,
    /// Base-2 exponential buckets (`ExponentialHistogram` points).
    Exponential,
}

impl FromStr for HistogramAggregation {
    type Err = String;
    /// kiln's words and the specification's.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "explicit" | "explicit_bucket_histogram" => Ok(Self::Explicit),
            "exponential" | "base2_exponential_bucket_histogram" => Ok(Self::Exponential),
            other => Err(format!(
                "unknown histogram aggregation {other:?} (expected explicit or exponential; \
                 explicit_bucket_histogram or base2_exponential_bucket_histogram)"
            )),
        }
    }
}

/// What a push reader reads the histograms from, and how it pushes them.
#[derive(Debug, Clone)]
pub struct PushedHistograms {
    pub store: Arc<HistogramStore>,
    pub aggregation: HistogramAggregation,
}

/// A metric reader that pushes the store's histograms beside the SDK's counters and gauges
/// (`otlp_push::build_otlp_reader`); `build_telemetry_with_readers` hands it the store.
pub trait PushReader: MetricReader {
    /// From now on every export appends `pushed`'s histograms.
    fn read_histograms_from(&self, pushed: PushedHistograms);
}

/// The flag or config value (non-empty) wins over the standard variable; neither: explicit.
/// Each error names where the bad value came from.
pub fn histogram_aggregation_from_lookup(
    setting: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<HistogramAggregation, String> {
    if !setting.trim().is_empty() {
        return setting
            .parse()
            .map_err(|e| format!("--otlp-histogram-aggregation: {e}"));
    }
    match lookup(DEFAULT_HISTOGRAM_AGGREGATION_VAR).filter(|v| !v.trim().is_empty()) {
        Some(v) => v
            .parse()
            .map_err(|e| format!("{DEFAULT_HISTOGRAM_AGGREGATION_VAR}: {e}")),
        None => Ok(HistogramAggregation::Explicit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| vars.iter().find(|(name, _)| name == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn the_flag_wins_over_the_standard_variable_and_explicit_is_the_default() {
        use HistogramAggregation::*;
        let var = DEFAULT_HISTOGRAM_AGGREGATION_VAR;
        let exponential = [(var, "base2_exponential_bucket_histogram")];
        assert_eq!(histogram_aggregation_from_lookup("", env(&[])), Ok(Explicit));
        assert_eq!(
            histogram_aggregation_from_lookup("", env(&exponential)),
            Ok(Exponential)
        );
        assert_eq!(
            histogram_aggregation_from_lookup("explicit", env(&exponential)),
            Ok(Explicit)
        );
        assert_eq!(
            histogram_aggregation_from_lookup("Exponential", env(&[])),
            Ok(Exponential)
        );
        let err = histogram_aggregation_from_lookup("", env(&[(var, "sparse")])).unwrap_err();
        assert!(err.starts_with(var), "{err}");
        let err = histogram_aggregation_from_lookup("dense", env(&[])).unwrap_err();
        assert!(err.contains("--otlp-histogram-aggregation"), "{err}");
    }
}
