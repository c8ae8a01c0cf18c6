//! A metric reader behind a pointer, which the meter provider builder accepts.

use std::ops::Deref;
use std::sync::Weak;
use std::time::Duration;

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{InstrumentKind, Pipeline, Temporality};

/// `with_reader` wants a sized `MetricReader`; this forwards to one behind `P`: a
/// `Box<dyn MetricReader>`, so callers can pass readers of different exporter types in one
/// `Vec`, or an `Arc`, so a test can still collect from a reader it handed over.
#[derive(Debug, Clone)]
pub(super) struct BoxedReader<P>(pub(super) P);

impl<P, R> MetricReader for BoxedReader<P>
where
    P: Deref<Target = R> + std::fmt::Debug + Send + Sync + 'static,
    R: MetricReader + ?Sized,
{
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline)
    }
    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
    fn shutdown(&self) -> OTelSdkResult {
        self.0.shutdown()
    }
    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.0.temporality(kind)
    }
}
