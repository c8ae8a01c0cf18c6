//! Export health of the trace pipeline as metrics, so an alert can fire when the collector
//! is gone: `kiln_otlp_span_exports_total{result}` (one per export call) and
//! `kiln_otlp_spans_dropped_total` (spans refused by the full export queue). The span
//! exporter thread bumps plain atomics; observable counters read them at each collection,
//! so /metrics and OTLP push both see them and the exporter never touches a metrics API.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use opentelemetry::KeyValue;
use opentelemetry::metrics::MeterProvider;

use super::exporter::Telemetry;
use super::family::kiln::{OTLP_SPAN_EXPORTS, OTLP_SPANS_DROPPED};

/// Counts of the span exporter; shared by the exporter thread and the metric callbacks.
#[derive(Debug, Default)]
pub struct SpanExportCounters {
    success: AtomicU64,
    failure: AtomicU64,
    dropped: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SpanExportCounts {
    pub success: u64,
    pub failure: u64,
    pub dropped: u64,
}

impl SpanExportCounters {
    pub fn export_succeeded(&self) {
        self.success.fetch_add(1, Ordering::Relaxed);
    }
    pub fn export_failed(&self) {
        self.failure.fetch_add(1, Ordering::Relaxed);
    }
    pub fn spans_dropped(&self, spans: u64) {
        self.dropped.fetch_add(spans, Ordering::Relaxed);
    }
    pub fn counts(&self) -> SpanExportCounts {
        SpanExportCounts {
            success: self.success.load(Ordering::Relaxed),
            failure: self.failure.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }
}

/// Registers the two families on the telemetry's meter providers (none when telemetry is
/// disabled). Both exist from startup, at zero, so `increase()` alerts have a series.
pub fn register_span_export_counters(telemetry: &Telemetry, counters: &Arc<SpanExportCounters>) {
    for provider in telemetry.providers() {
        let meter = provider.meter("kiln");
        let exports = Arc::clone(counters);
        let success = [KeyValue::new("result", "success")];
        let failure = [KeyValue::new("result", "failure")];
        // The SDK keeps the callbacks registered for the provider's life.
        let _ = meter
            .u64_observable_counter(OTLP_SPAN_EXPORTS.name)
            .with_unit(OTLP_SPAN_EXPORTS.unit)
            .with_description(OTLP_SPAN_EXPORTS.description)
            .with_callback(move |observer| {
                let counts = exports.counts();
                observer.observe(counts.success, &success);
                observer.observe(counts.failure, &failure);
            })
            .build();
        let dropped = Arc::clone(counters);
        let _ = meter
            .u64_observable_counter(OTLP_SPANS_DROPPED.name)
            .with_unit(OTLP_SPANS_DROPPED.unit)
            .with_description(OTLP_SPANS_DROPPED.description)
            .with_callback(move |observer| observer.observe(dropped.counts().dropped, &[]))
            .build();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::exporter::render_metrics;
    use crate::stats::exporter::test_support::{config, value};

    #[test]
    fn the_counters_appear_on_metrics_with_their_values() {
        let telemetry = crate::stats::exporter::build_telemetry(&config("vllm:")).expect("builds");
        let counters = Arc::new(SpanExportCounters::default());
        register_span_export_counters(&telemetry, &counters);
        counters.export_succeeded();
        counters.export_failed();
        counters.export_failed();
        counters.spans_dropped(5);
        let text = render_metrics(&telemetry.registry).expect("renders");
        let exports = "kiln_otlp_span_exports_total";
        assert_eq!(value(&text, exports, &[("result", "success")]), Some(1.0), "{text}");
        assert_eq!(value(&text, exports, &[("result", "failure")]), Some(2.0), "{text}");
        assert_eq!(value(&text, "kiln_otlp_spans_dropped_total", &[]), Some(5.0), "{text}");
    }
}
