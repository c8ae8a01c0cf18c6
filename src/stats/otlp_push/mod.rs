//! OTLP push of the same instruments `/metrics` serves: a `PeriodicReader` joined to the one
//! `SdkMeterProvider` through `build_telemetry_with_readers`, exporting over `http/protobuf`
//! or `grpc` with kiln's resource (`service.name`, `service.instance.id`, …).
//!
//! # How kiln wires it
//!
//! ```text
//! kiln serve --otlp-endpoint URL --otlp-protocol http/protobuf|grpc --otlp-interval SECS \
//!            --otlp-timeout SECS --otlp-header K=V (repeatable) --otlp-temporality cumulative|delta
//! ```
//!
//! 1. The config file's OTLP section, if any, becomes `Option<OtlpConfig>`.
//! 2. `otlp_config_from_env(that)?`: the standard `OTEL_EXPORTER_OTLP_*` variables fill or
//!    override it; with no endpoint anywhere the result is `None` (no push).
//! 3. kiln applies its `--otlp-*` flags on top, so flags win. `--otlp-endpoint` is the exact
//!    URL (like `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`: for http/protobuf it includes
//!    `/v1/metrics`; `metrics_endpoint_from_base` derives it from a collector's base URL).
//!    `--otlp-header` replaces a header of the same name, case-insensitively.
//! 4. `build_otlp_reader(&cfg, outcomes.clone())?` goes into
//!    `build_telemetry_with_readers(&telemetry, vec![reader])`, then
//!    `telemetry.count_otlp_metric_exports(outcomes)` exposes `kiln_otlp_metric_exports_total`.
//! 5. At exit, `Telemetry::shutdown()` from a thread that may block (after the actix system
//!    stopped, or `spawn_blocking`): it waits up to 5 s for the final export.
//!
//! # What is pushed, and who builds the request
//!
//! Counters and gauges are SDK instruments; the reader collects them and hands them to kiln's
//! exporter, which turns them into the OTLP request (`opentelemetry-proto`'s conversion) and
//! appends every histogram from the one record, `HistogramStore` (`histograms`): explicit
//! buckets or base-2 exponential ones (`--otlp-histogram-aggregation`), exemplars included,
//! cumulative or delta. So a histogram observation is recorded once whatever is pushed.
//! The SDK could not do this part (docs/09): its aggregators carry no exemplars, its
//! exponential aggregation is per provider, and it takes no histogram aggregated elsewhere.
//!
//! # Threads and runtimes
//!
//! The SDK's `PeriodicReader` (0.33) owns a thread and drives each export there with
//! `futures_executor::block_on`, so exports never run on actix or engine threads. http/protobuf
//! uses reqwest's blocking client directly on that thread. tonic needs a tokio reactor, so the
//! grpc sender owns a private current-thread runtime: its channel is built inside that
//! runtime and every export is `block_on` there, on the reader's thread. Nothing depends on
//! being called from (or outside) kiln's own runtimes, and the runtime is shut down without
//! blocking, so dropping the provider inside an async context does not panic.
//!
//! # A collector that is down, slow or refusing
//!
//! Recording never waits for the exporter: instruments aggregate in memory (bounded by the
//! number of series, which METRICS.md bounds) and the reader exports a snapshot every
//! interval. Nothing is queued: a failed batch is dropped (cumulative data is complete again
//! in the next export; a delta interval is lost). One export is one attempt and takes at
//! most about `timeout` (the HTTP client's timeout, or a timeout around the grpc call).
//! Failures are not returned to the SDK, which would log every one of them at ERROR
//! (`opentelemetry_sdk` has `internal-logs` on by default); instead this exporter warns at
//! most once a minute with the number of suppressed failures, and says once when export
//! works again. The next interval simply tries again (tonic reconnects by itself). So
//! `force_flush`/`shutdown` return `Ok` with the collector down; `shutdown` gives up after
//! 5 s (SDK constant) if the final export is slower. Nothing else logs at WARN/ERROR per
//! failure (tested), so kiln needs no `opentelemetry_sdk=off` filter directive.
//!
//! Under delta temporality histograms are the difference from the previous export's copy,
//! and gauges stay cumulative: the SDK would otherwise send a gauge only
//! in the interval it was recorded in, and `cache_config_info` (set once) or the engine gauges
//! of an idle server would vanish from the collector.

use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::metrics::v1::{Metric, ScopeMetrics};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{InstrumentKind, PeriodicReader, Pipeline, Temporality};

use super::export_health::ExportOutcomes;
use super::push_histograms::{PushReader, PushedHistograms};
use crate::otlp::metrics_sender::{MetricsSender, SendError};
use crate::otlp::{FailureLog, OtlpConfig, OtlpError, OtlpTemporality, check_endpoint};

mod histograms;

use histograms::StoreHistograms;

/// The instrumentation scope of kiln's instruments (the SDK's scope metrics carry it too).
const SCOPE_NAME: &str = "kiln";

/// Builds the reader to pass to `build_telemetry_with_readers` (which hands it the histogram
/// store); each export's result is counted in `outcomes` (expose them with
/// `Telemetry::count_otlp_metric_exports`). Fails on a bad endpoint or header, so a typo
/// stops startup instead of silently exporting nowhere.
pub fn build_otlp_reader(cfg: &OtlpConfig, outcomes: Arc<ExportOutcomes>) -> Result<Box<dyn PushReader>, OtlpError> {
    for (field, d) in [("interval", cfg.interval), ("timeout", cfg.timeout)] {
        if d.is_zero() {
            return Err(OtlpError::Zero { field });
        }
    }
    check_endpoint(&cfg.endpoint)?;
    let exporter = KilnExporter::new(cfg, outcomes)?;
    let histograms = HistogramSlot {
        cell: exporter.histograms.clone(),
        delta: cfg.temporality != OtlpTemporality::Cumulative,
    };
    let reader = PeriodicReader::builder(exporter).with_interval(cfg.interval).build();
    Ok(Box::new(OtlpReader { reader, histograms }))
}

/// The SDK's periodic reader over kiln's exporter, with gauges kept cumulative whatever the
/// preference (see module doc), and the slot the histogram store goes into.
#[derive(Debug)]
struct OtlpReader {
    reader: PeriodicReader<KilnExporter>,
    histograms: HistogramSlot,
}

impl PushReader for OtlpReader {
    fn read_histograms_from(&self, pushed: PushedHistograms) {
        self.histograms.fill(pushed);
    }
}

/// The exporter's way to the histogram store, filled once the store exists; until then (and
/// with telemetry off) exports carry the SDK's counters and gauges only.
#[derive(Debug)]
struct HistogramSlot {
    cell: Arc<OnceLock<StoreHistograms>>,
    /// Delta or low-memory temporality: histograms are pushed as deltas.
    delta: bool,
}

impl HistogramSlot {
    /// From now on every export appends `pushed`'s histograms; cumulative points start now.
    fn fill(&self, pushed: PushedHistograms) {
        let _ = self.cell.set(StoreHistograms::new(pushed, self.delta, now_ns()));
    }
}

impl MetricReader for OtlpReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.reader.register_pipeline(pipeline)
    }
    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.reader.collect(rm)
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.reader.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.reader.shutdown_with_timeout(timeout)
    }
    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        match kind {
            InstrumentKind::Gauge | InstrumentKind::ObservableGauge => Temporality::Cumulative,
            _ => self.reader.temporality(kind),
        }
    }
}

/// kiln's metric exporter: the SDK's counters and gauges turned into the OTLP request by
/// `opentelemetry-proto`, the store's histograms appended, sent over kiln's transport, and
/// the rate-limited failure log.
struct KilnExporter {
    sender: MetricsSender,
    histograms: Arc<OnceLock<StoreHistograms>>,
    temporality: Temporality,
    endpoint: String,
    failures: Mutex<FailureLog>,
    outcomes: Arc<ExportOutcomes>,
}

impl std::fmt::Debug for KilnExporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KilnExporter")
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

impl KilnExporter {
    fn new(cfg: &OtlpConfig, outcomes: Arc<ExportOutcomes>) -> Result<Self, OtlpError> {
        let temporality = match cfg.temporality {
            OtlpTemporality::Cumulative => Temporality::Cumulative,
            OtlpTemporality::Delta => Temporality::Delta,
            OtlpTemporality::LowMemory => Temporality::LowMemory,
        };
        Ok(Self {
            sender: MetricsSender::new(cfg)?,
            histograms: Arc::default(),
            temporality,
            endpoint: cfg.endpoint.clone(),
            failures: Mutex::new(FailureLog::default()),
            outcomes,
        })
    }

    /// The SDK's metrics as an OTLP request, with the store's histograms in kiln's scope.
    fn request(&self, metrics: &ResourceMetrics) -> ExportMetricsServiceRequest {
        let mut request = ExportMetricsServiceRequest::from(metrics);
        if let Some(histograms) = self.histograms.get() {
            append(&mut request, histograms.metrics(now_ns()));
        }
        request
    }

    fn report(&self, result: Result<(), SendError>) {
        self.outcomes.record(result.is_ok());
        let Ok(mut log) = self.failures.lock() else {
            return;
        };
        match result {
            Ok(()) => {
                if let Some(failed) = log.success() {
                    tracing::info!(target: "kiln::otlp", endpoint = %self.endpoint, failed_exports = failed,
                        "OTLP metric export works again");
                }
            }
            Err(error) => {
                if let Some(suppressed) = log.failure(Instant::now()) {
                    tracing::warn!(target: "kiln::otlp", endpoint = %self.endpoint, %error, suppressed,
                        "OTLP metric export failed; retrying every interval, warning at most once a minute");
                }
            }
        }
    }
}

/// Adds `metrics` to the request's scope metrics of kiln's scope (made if the SDK had none).
fn append(request: &mut ExportMetricsServiceRequest, metrics: Vec<Metric>) {
    if metrics.is_empty() {
        return;
    }
    let Some(resource) = request.resource_metrics.first_mut() else {
        return;
    };
    let kiln = |s: &ScopeMetrics| s.scope.as_ref().is_some_and(|scope| scope.name == SCOPE_NAME);
    match resource.scope_metrics.iter_mut().find(|s| kiln(s)) {
        Some(scope) => scope.metrics.extend(metrics),
        None => resource.scope_metrics.push(ScopeMetrics {
            scope: Some(InstrumentationScope {
                name: SCOPE_NAME.to_owned(),
                ..InstrumentationScope::default()
            }),
            metrics,
            ..ScopeMetrics::default()
        }),
    }
}

pub(super) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl PushMetricExporter for KilnExporter {
    /// Always `Ok`: failures are reported (rate-limited) here, not by the SDK. Runs on the
    /// reader's own thread, which the blocking send may hold for up to the timeout.
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = self.sender.send(self.request(metrics));
        self.report(result);
        Ok(())
    }
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }
    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
    fn temporality(&self) -> Temporality {
        self.temporality
    }
}

#[cfg(test)]
mod tests;
