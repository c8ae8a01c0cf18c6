//! The HTTP families vLLM exposes through prometheus-fastapi-instrumentator, beside the
//! OpenTelemetry `http_server_*` ones, so vLLM's dashboards' HTTP panels work unchanged.
//!
//! As the instrumentator's defaults (vLLM calls `Instrumentator(excluded_handlers=[…]).add()`):
//! `http_requests_total{handler,method,status}` with the status grouped (`2xx`, `4xx`, …),
//! `http_request_duration_seconds{handler,method}` (buckets 0.1, 0.5, 1),
//! `http_request_duration_highr_seconds` (no labels, fine buckets), and
//! `http_request_size_bytes{handler}` / `http_response_size_bytes{handler}` (summaries
//! there; here histograms with no bound but `+Inf`, since OpenTelemetry has no summary: the
//! `_sum` and `_count` series read the same). The handler is the route pattern, `none`
//! when no route matched; vLLM's excluded handlers (and kiln's `/ready`, a probe like
//! `/health`) are not recorded.

use opentelemetry::KeyValue;
use opentelemetry::metrics::Counter;

use std::sync::Arc;

use super::builder::InstrumentBuilder;
use super::data::RecordHttp;
use super::family::instrumentator as specs;
use super::histogram_store::{Histogram, HistogramStore, LatencyHistogram};

/// Handlers vLLM excludes from the instrumentator, plus kiln's readiness probe.
pub const EXCLUDED_HANDLERS: [&str; 7] = [
    "/metrics",
    "/health",
    "/load",
    "/ping",
    "/version",
    "/server_info",
    "/ready",
];

/// The instrumentator's `latency_lowr_buckets`.
pub const LOWR_BUCKETS: [f64; 3] = [0.1, 0.5, 1.0];
/// The instrumentator's `latency_highr_buckets`.
pub const HIGHR_BUCKETS: [f64; 21] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 7.5, 10.0, 30.0, 60.0,
];

pub(super) struct InstrumentatorInstruments {
    requests: Counter<u64>,
    duration: LatencyHistogram,
    duration_highr: LatencyHistogram,
    request_size: Histogram<u64>,
    response_size: Histogram<u64>,
}

/// `2xx`, `4xx`, …; a request that got no response (a panic, a client gone) is `5xx`, as
/// the instrumentator records an exception as 500.
pub fn grouped_status(status: Option<u16>) -> &'static str {
    match status.map(|s| s / 100) {
        Some(1) => "1xx",
        Some(2) => "2xx",
        Some(3) => "3xx",
        Some(4) => "4xx",
        _ => "5xx",
    }
}

impl InstrumentatorInstruments {
    /// `b` builds unprefixed instruments: these are the instrumentator's own names.
    pub(super) fn new(b: &InstrumentBuilder<'_>, store: &Arc<HistogramStore>) -> Self {
        Self {
            requests: b.counter(specs::REQUESTS),
            duration: b.latency_histogram_with(specs::DURATION, &LOWR_BUCKETS, store),
            duration_highr: b.latency_histogram_with(specs::DURATION_HIGHR, &HIGHR_BUCKETS, store),
            // No bound but +Inf: the instrumentator's summaries, read through _sum and _count.
            request_size: b.histogram_u64_with(specs::REQUEST_SIZE, &[]),
            response_size: b.histogram_u64_with(specs::RESPONSE_SIZE, &[]),
        }
    }

    pub(super) fn record(&self, r: &RecordHttp) {
        let handler = r.route.as_deref().unwrap_or("none");
        if EXCLUDED_HANDLERS.contains(&handler) {
            return;
        }
        let handler = KeyValue::new("handler", handler.to_owned());
        let method = KeyValue::new("method", r.method);
        let status = KeyValue::new("status", grouped_status(r.status));
        let seconds = r.duration.as_secs_f64();
        self.requests.add(1, &[handler.clone(), method.clone(), status]);
        self.duration.record(seconds, &[handler.clone(), method], None);
        self.duration_highr.record(seconds, &[], None);
        self.request_size
            .record(r.request_body_bytes, std::slice::from_ref(&handler));
        self.response_size.record(r.response_body_bytes, &[handler]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_grouped_and_no_response_is_a_server_error() {
        assert_eq!(grouped_status(Some(200)), "2xx");
        assert_eq!(grouped_status(Some(204)), "2xx");
        assert_eq!(grouped_status(Some(301)), "3xx");
        assert_eq!(grouped_status(Some(429)), "4xx");
        assert_eq!(grouped_status(Some(503)), "5xx");
        assert_eq!(grouped_status(None), "5xx");
    }
}
