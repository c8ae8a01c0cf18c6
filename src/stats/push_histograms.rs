//! OTLP push of the histograms as base-2 exponential histograms
//! (`--otlp-histogram-aggregation exponential`, or the standard
//! `OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION=base2_exponential_bucket_histogram`).
//!
//! The SDK picks a histogram's aggregation per meter provider, not per reader, and the
//! Prometheus exporter drops exponential histograms. So when push wants them, push gets a
//! provider of its own (the OTLP readers and a view that makes every histogram exponential)
//! with its own copy of the instruments, which the stats actor records into beside the
//! Prometheus ones: `/metrics` stays exactly as it was, and both sides see the same
//! observations, so their counts and sums agree.
//!
//! The copy is an SDK limit (0.33), not a choice: aggregation is per provider, and a histogram
//! kiln aggregates itself (`HistogramStore`'s native buckets are the same base-2 exponential
//! buckets, schema = OTLP scale) cannot be handed to the SDK's OTLP reader (no public
//! `MetricProducer`, no constructible data points). The copy's histograms are SDK instruments
//! and its own `HistogramStore` records nothing; the main set's histograms live in the store
//! only (`/metrics` reads it), so an observation is recorded twice here, once per side.
//! docs/09 has the plan that removes the copy.

use std::str::FromStr;
use std::sync::Arc;

use opentelemetry_sdk::metrics::{Aggregation, Instrument, InstrumentKind, SdkMeterProvider, Stream};

use super::instruments::Instruments;

/// The standard variable (OpenTelemetry's OTLP exporter specification).
pub const DEFAULT_HISTOGRAM_AGGREGATION_VAR: &str = "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION";

/// The specification's defaults for the exponential aggregation: 160 buckets per sign, and
/// the finest scale (the SDK lowers it until the observed range fits the buckets).
const MAX_SIZE: u32 = 160;
const MAX_SCALE: i8 = 20;

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

/// The push provider and the instruments recorded into it.
pub struct PushTelemetry {
    pub provider: SdkMeterProvider,
    pub instruments: Arc<Instruments>,
}

/// The push provider's view: every histogram as a base-2 exponential histogram.
pub(super) fn exponential_view(instrument: &Instrument) -> Option<Stream> {
    if instrument.kind() != InstrumentKind::Histogram {
        return None;
    }
    Stream::builder()
        .with_aggregation(Aggregation::Base2ExponentialHistogram {
            max_size: MAX_SIZE,
            max_scale: MAX_SCALE,
            record_min_max: true,
        })
        .build()
        .ok()
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
