//! `vllm:request_failure_total{model_name,stage,code}`: requests that failed in the API
//! server, as vLLM counts them (its `RequestFailureMetricsMiddleware`). Those that never
//! reached the engine are otherwise invisible to `request_success_total`. `stage` is
//! `input_processing` for a failure before generation started (validation, rendering,
//! admission), `non_streaming` for an error response after it started and `streaming` for
//! a stream that failed after its 200 was sent; `code` is the error's HTTP status. Unmatched paths and probes (vLLM's uninstrumented handlers) are not
//! requests for the model and are not counted.

use opentelemetry::KeyValue;
use opentelemetry::metrics::Counter;

use super::builder::InstrumentBuilder;
use super::data::RecordHttp;
use super::family::engine::REQUEST_FAILURE;
use super::instrumentator::EXCLUDED_HANDLERS;

pub(super) struct RequestFailureInstrument {
    counter: Counter<u64>,
}

impl RequestFailureInstrument {
    pub(super) fn new(b: &InstrumentBuilder<'_>) -> Self {
        Self {
            counter: b.counter(REQUEST_FAILURE),
        }
    }

    /// Counts `r` if it is a failed request for the model; `model_name` is its label.
    pub(super) fn record(&self, model_name: &KeyValue, r: &RecordHttp) {
        let (Some(route), Some(status)) = (r.route.as_deref(), r.status) else {
            return;
        };
        if EXCLUDED_HANDLERS.contains(&route) {
            return;
        }
        let (stage, status) = match r.stream_failure {
            Some(code) => ("streaming", code),
            None if status < 400 => return,
            None if r.generation_started => ("non_streaming", status),
            None => ("input_processing", status),
        };
        let labels = [
            model_name.clone(),
            KeyValue::new("stage", stage),
            KeyValue::new("code", i64::from(status).to_string()),
        ];
        self.counter.add(1, &labels);
    }
}
