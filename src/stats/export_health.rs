//! Export health as metrics: OTLP metric pushes counted by result, so an alert can fire when
//! the collector is gone. The push exporter counts on the reader's thread; an observable
//! counter reads the counts at every collection, so `/metrics` and the push itself see them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use opentelemetry::KeyValue;
use opentelemetry::metrics::MeterProvider as _;

use super::exporter::Telemetry;
use super::family::kiln::OTLP_METRIC_EXPORTS;

/// Outcomes of one exporter's exports, shared with the counter that exposes them.
#[derive(Debug, Default)]
pub struct ExportOutcomes {
    success: AtomicU64,
    failure: AtomicU64,
}

impl ExportOutcomes {
    pub fn record(&self, succeeded: bool) {
        let counter = if succeeded { &self.success } else { &self.failure };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn successes(&self) -> u64 {
        self.success.load(Ordering::Relaxed)
    }

    pub fn failures(&self) -> u64 {
        self.failure.load(Ordering::Relaxed)
    }
}

impl Telemetry {
    /// Exposes `outcomes` as `kiln_otlp_metric_exports_total{result}`; both series exist
    /// from the start (at 0 when nothing is pushed), so `rate()` has a baseline. A no-op
    /// with telemetry disabled.
    pub fn count_otlp_metric_exports(&self, outcomes: Arc<ExportOutcomes>) {
        let Some(provider) = &self.provider else { return };
        let success = [KeyValue::new("result", "success")];
        let failure = [KeyValue::new("result", "failure")];
        // The SDK keeps the callback for the provider's lifetime; the handle is not needed.
        let _counter = provider
            .meter("kiln")
            .u64_observable_counter(OTLP_METRIC_EXPORTS.name)
            .with_unit(OTLP_METRIC_EXPORTS.unit)
            .with_description(OTLP_METRIC_EXPORTS.description)
            .with_callback(move |observer| {
                observer.observe(outcomes.successes(), &success);
                observer.observe(outcomes.failures(), &failure);
            })
            .build();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::exporter::test_support::{config, value};
    use crate::stats::exporter::{TelemetryConfig, build_telemetry, render_metrics};

    #[test]
    fn outcomes_are_exposed_by_result_from_zero() {
        let t = build_telemetry(&config("vllm:")).unwrap();
        let outcomes = Arc::new(ExportOutcomes::default());
        t.count_otlp_metric_exports(outcomes.clone());
        let name = "kiln_otlp_metric_exports_total";
        let text = render_metrics(&t.registry).unwrap();
        assert!(text.contains(&format!("# TYPE {name} counter")), "{text}");
        assert_eq!(value(&text, name, &[("result", "success")]), Some(0.0));
        assert_eq!(value(&text, name, &[("result", "failure")]), Some(0.0));
        outcomes.record(true);
        outcomes.record(true);
        outcomes.record(false);
        let text = render_metrics(&t.registry).unwrap();
        assert_eq!(value(&text, name, &[("result", "success")]), Some(2.0));
        assert_eq!(value(&text, name, &[("result", "failure")]), Some(1.0));
    }

    #[test]
    fn disabled_telemetry_exposes_nothing() {
        let cfg = TelemetryConfig {
            enabled: false,
            ..config("vllm:")
        };
        let t = build_telemetry(&cfg).unwrap();
        t.count_otlp_metric_exports(Arc::default());
        assert_eq!(render_metrics(&t.registry).unwrap(), "");
    }
}
