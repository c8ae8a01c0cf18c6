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
//! # Threads and runtimes
//!
//! The SDK's `PeriodicReader` (0.33) owns a thread and drives each export there with
//! `futures_executor::block_on`, so exports never run on actix or engine threads. http/protobuf
//! uses reqwest's blocking client directly on that thread. tonic needs a tokio reactor, so the
//! grpc exporter owns a private current-thread runtime: its channel is built inside that
//! runtime and every export is `block_on` there, on the reader's thread. Nothing depends on
//! being called from (or outside) kiln's own runtimes, and the runtime is shut down without
//! blocking, so dropping the provider inside an async context does not panic.
//!
//! # A collector that is down, slow or refusing
//!
//! Recording never waits for the exporter: instruments aggregate in memory (bounded by the
//! number of series, which METRICS.md bounds) and the reader exports a snapshot every
//! interval. Nothing is queued: a failed batch is dropped (cumulative data is complete again
//! in the next export; a delta interval is lost). One export takes at most about `timeout`
//! (retries included; http: up to twice that when the last attempt starts near the end).
//! Failures are not returned to the SDK, which would log every one of them at ERROR
//! (`opentelemetry_sdk` has `internal-logs` on by default); instead this exporter warns at
//! most once a minute with the number of suppressed failures, and says once when export
//! works again. The next interval simply tries again (tonic reconnects by itself). So
//! `force_flush`/`shutdown` return `Ok` with the collector down; `shutdown` gives up after
//! 5 s (SDK constant) if the final export is slower. Nothing else logs at WARN/ERROR per
//! failure (tested), so kiln needs no `opentelemetry_sdk=off` filter directive.
//!
//! Under delta temporality gauges stay cumulative: the SDK would otherwise send a gauge only
//! in the interval it was recorded in, and `cache_config_info` (set once) or the engine gauges
//! of an idle server would vanish from the collector.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use opentelemetry_otlp::{MetricExporter, Protocol, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{InstrumentKind, PeriodicReader, Pipeline, Temporality};

use super::export_health::ExportOutcomes;
use crate::otlp::transport::{Transport, build_in_runtime};
use crate::otlp::{FailureLog, OtlpConfig, OtlpError, OtlpTemporality, check_endpoint};

/// Builds the reader to pass to `build_telemetry_with_readers`; each export's result is
/// counted in `outcomes` (expose them with `Telemetry::count_otlp_metric_exports`). Fails on
/// a bad endpoint or header, so a typo stops startup instead of silently exporting nowhere.
pub fn build_otlp_reader(cfg: &OtlpConfig, outcomes: Arc<ExportOutcomes>) -> Result<Box<dyn MetricReader>, OtlpError> {
    for (field, d) in [("interval", cfg.interval), ("timeout", cfg.timeout)] {
        if d.is_zero() {
            return Err(OtlpError::Zero { field });
        }
    }
    check_endpoint(&cfg.endpoint)?;
    let exporter = KilnExporter::new(cfg, outcomes)?;
    let reader = PeriodicReader::builder(exporter).with_interval(cfg.interval).build();
    Ok(Box::new(OtlpReader(reader)))
}

/// The SDK's reader, with gauges kept cumulative whatever the preference (see module doc).
#[derive(Debug)]
struct OtlpReader(PeriodicReader<KilnExporter>);

impl MetricReader for OtlpReader {
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
    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        match kind {
            InstrumentKind::Gauge | InstrumentKind::ObservableGauge => Temporality::Cumulative,
            _ => self.0.temporality(kind),
        }
    }
}

/// The OTLP exporter plus what it needs to run on the reader's thread (a runtime for
/// tonic) and the rate-limited failure log.
struct KilnExporter {
    inner: MetricExporter,
    /// grpc only: tonic's channel lives here; every export is `block_on` on it.
    runtime: Option<tokio::runtime::Runtime>,
    endpoint: String,
    timeout: Duration,
    failures: Mutex<FailureLog>,
    outcomes: Arc<ExportOutcomes>,
}

impl KilnExporter {
    fn new(cfg: &OtlpConfig, outcomes: Arc<ExportOutcomes>) -> Result<Self, OtlpError> {
        let temporality = match cfg.temporality {
            OtlpTemporality::Cumulative => Temporality::Cumulative,
            OtlpTemporality::Delta => Temporality::Delta,
            OtlpTemporality::LowMemory => Temporality::LowMemory,
        };
        let build_err = |source| OtlpError::Build {
            protocol: cfg.protocol,
            endpoint: cfg.endpoint.clone(),
            source,
        };
        let (inner, runtime) = match Transport::of(cfg)? {
            Transport::Http(client) => {
                let exporter = MetricExporter::builder()
                    .with_http()
                    .with_protocol(Protocol::HttpBinary)
                    .with_endpoint(cfg.endpoint.clone())
                    .with_timeout(cfg.timeout)
                    .with_http_client(client)
                    .with_temporality(temporality)
                    .build()
                    .map_err(build_err)?;
                (exporter, None)
            }
            Transport::Grpc(headers, runtime) => {
                let (exporter, runtime) = build_in_runtime(runtime, || {
                    MetricExporter::builder()
                        .with_tonic()
                        .with_protocol(Protocol::Grpc)
                        .with_endpoint(cfg.endpoint.clone())
                        .with_timeout(cfg.timeout)
                        .with_interceptor(headers)
                        .with_temporality(temporality)
                        .build()
                })
                .map_err(build_err)?;
                (exporter, Some(runtime))
            }
        };
        Ok(Self {
            inner,
            runtime,
            endpoint: cfg.endpoint.clone(),
            timeout: cfg.timeout,
            failures: Mutex::new(FailureLog::default()),
            outcomes,
        })
    }

    fn report(&self, result: OTelSdkResult) {
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

impl PushMetricExporter for KilnExporter {
    /// Always `Ok`: failures are reported (rate-limited) here, not by the SDK.
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = match &self.runtime {
            // Not inside any runtime here: this is the PeriodicReader's own thread.
            Some(rt) => rt.block_on(async {
                tokio::time::timeout(self.timeout, self.inner.export(metrics))
                    .await
                    .unwrap_or(Err(OTelSdkError::Timeout(self.timeout)))
            }),
            None => self.inner.export(metrics).await,
        };
        self.report(result);
        Ok(())
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }
    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

impl Drop for KilnExporter {
    /// Dropping a runtime waits for its tasks, which panics inside an async context (the
    /// provider may be dropped on an actix thread); the background shutdown does not wait.
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests;
