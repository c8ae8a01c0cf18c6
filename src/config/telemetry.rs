//! `[telemetry]`: metrics, their OTLP push, request traces and the access log. The OTLP
//! values stay as written here; `server::resolve` turns them into the exporters' own
//! configurations (with the standard `OTEL_*` variables) and refuses a bad one naming its key.

use std::net::SocketAddr;

use clap::builder::{BoolValueParser, TypedValueParser};
use serde::{Deserialize, Serialize};

use super::{ConfigError, invalid};

/// Finished spans waiting for export by default.
pub const DEFAULT_TRACES_QUEUE_SIZE: usize = 2048;

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
#[command(next_help_heading = "Telemetry")]
pub struct TelemetrySettings {
    /// Record metrics; `--disable-telemetry` turns them off (to measure their cost).
    #[arg(long = "disable-telemetry", env = "KILN_DISABLE_TELEMETRY", action = clap::ArgAction::SetTrue,
          value_parser = TypedValueParser::map(BoolValueParser::new(), |disable: bool| !disable))]
    pub enabled: bool,
    /// Prefix of the engine metrics (default `vllm:`; `kiln_` is lint-clean).
    #[arg(long, env = "KILN_ENGINE_PREFIX")]
    pub engine_prefix: String,
    /// Seconds between stats log lines.
    #[arg(long = "log-interval", env = "KILN_LOG_INTERVAL", value_name = "SECS")]
    pub log_interval_s: f64,
    /// Also serve /metrics on this address (HOST:PORT), e.g. to keep it off the public port;
    /// empty: only on the API port.
    #[arg(long, env = "KILN_METRICS_LISTEN")]
    pub metrics_listen: String,
    /// Push metrics over OTLP to this URL (http/protobuf: include /v1/metrics); empty: no push
    /// (unless `OTEL_EXPORTER_OTLP_*ENDPOINT`).
    #[arg(long, env = "KILN_OTLP_ENDPOINT")]
    pub otlp_endpoint: String,
    /// http/protobuf or grpc.
    #[arg(long, env = "KILN_OTLP_PROTOCOL")]
    pub otlp_protocol: String,
    /// Seconds between OTLP exports.
    #[arg(long = "otlp-interval", env = "KILN_OTLP_INTERVAL", value_name = "SECS")]
    pub otlp_interval_s: f64,
    /// Seconds one OTLP export may take.
    #[arg(long = "otlp-timeout", env = "KILN_OTLP_TIMEOUT", value_name = "SECS")]
    pub otlp_timeout_s: f64,
    /// An OTLP request header, NAME=VALUE (repeatable); a flag's header replaces the file's
    /// header of that name.
    #[arg(
        long = "otlp-header",
        env = "KILN_OTLP_HEADERS",
        value_delimiter = ',',
        value_name = "NAME=VALUE"
    )]
    pub otlp_headers: Vec<String>,
    /// cumulative or delta.
    #[arg(long, env = "KILN_OTLP_TEMPORALITY")]
    pub otlp_temporality: String,
    /// Pushed histograms: explicit (the /metrics buckets) or exponential (base-2); empty: from
    /// `OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION` (default explicit).
    #[arg(long, env = "KILN_OTLP_HISTOGRAM_AGGREGATION")]
    pub otlp_histogram_aggregation: String,
    /// KV-block residency histograms (lifetime, idle before eviction, reuse gaps), as vLLM's
    /// `--kv-cache-metrics`.
    #[arg(long, env = "KILN_KV_CACHE_METRICS")]
    pub kv_cache_metrics: bool,
    /// Fraction of KV blocks those histograms sample (default 0.01).
    #[arg(long, env = "KILN_KV_CACHE_METRICS_SAMPLE")]
    pub kv_cache_metrics_sample: f64,
    /// Estimated FLOPs and bytes read and written per step, as vLLM's MFU metrics.
    #[arg(long, env = "KILN_ENABLE_MFU_METRICS")]
    pub enable_mfu_metrics: bool,
    /// Classic histogram bounds per bucket family, vLLM's JSON: '{"request_latency": [0.1, 1,
    /// 10]}'; unlisted families keep vLLM's bounds, native histograms keep their schema.
    #[arg(long, env = "KILN_CUSTOM_HISTOGRAM_BUCKETS")]
    pub custom_histogram_buckets: String,
    /// Export request spans over OTLP to this URL (http/protobuf: include /v1/traces), as
    /// vLLM's; empty: none unless `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` is set. Tracing is on exactly when there is one.
    #[arg(long, env = "KILN_OTLP_TRACES_ENDPOINT")]
    pub otlp_traces_endpoint: String,
    /// http/protobuf or grpc, for spans; empty: from the standard variables (default
    /// http/protobuf).
    #[arg(long, env = "KILN_OTLP_TRACES_PROTOCOL")]
    pub otlp_traces_protocol: String,
    /// Finished spans waiting for export; when full, new spans are dropped (and counted).
    #[arg(long, env = "KILN_OTLP_TRACES_QUEUE_SIZE")]
    pub otlp_traces_queue_size: usize,
    /// request: one span a request; phases: also queue, prefill-chunk and decode child spans.
    #[arg(long, env = "KILN_OTLP_TRACES_DETAIL", value_parser = ["request", "phases"])]
    pub otlp_traces_detail: String,
    /// Write access-log lines for /health, /ready and /metrics too.
    #[arg(long, env = "KILN_ACCESS_LOG_PROBES")]
    pub access_log_probes: bool,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        Self {
            enabled: true,
            engine_prefix: "vllm:".into(),
            log_interval_s: 5.0,
            metrics_listen: String::new(),
            otlp_endpoint: String::new(),
            otlp_protocol: "http/protobuf".into(),
            otlp_interval_s: 60.0,
            otlp_timeout_s: 10.0,
            otlp_headers: Vec::new(),
            otlp_temporality: "cumulative".into(),
            otlp_histogram_aggregation: String::new(),
            kv_cache_metrics: false,
            kv_cache_metrics_sample: 0.01,
            enable_mfu_metrics: false,
            custom_histogram_buckets: String::new(),
            otlp_traces_endpoint: String::new(),
            otlp_traces_protocol: String::new(),
            otlp_traces_queue_size: DEFAULT_TRACES_QUEUE_SIZE,
            otlp_traces_detail: "request".to_owned(),
            access_log_probes: false,
        }
    }
}

impl TelemetrySettings {
    /// The checks that need no exporter; `server::resolve` checks the OTLP values.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.log_interval_s > 0.0 && self.log_interval_s.is_finite()) {
            return Err(invalid(
                "telemetry.log_interval_s",
                "must be a positive number of seconds",
            ));
        }
        if !(self.kv_cache_metrics_sample > 0.0 && self.kv_cache_metrics_sample <= 1.0) {
            return Err(invalid(
                "telemetry.kv_cache_metrics_sample",
                "must be a fraction in (0, 1]",
            ));
        }
        if !self.metrics_listen.is_empty() {
            self.metrics_listen
                .parse::<SocketAddr>()
                .map_err(|e| invalid("telemetry.metrics_listen", format!("`{}`: {e}", self.metrics_listen)))?;
        }
        Ok(())
    }

    /// Puts `headers` (each "name=value") over the present ones: a header of the same name,
    /// case-insensitively, is replaced.
    pub fn set_otlp_headers(&mut self, headers: impl IntoIterator<Item = String>) {
        for header in headers {
            let name = header_name(&header).to_owned();
            self.otlp_headers
                .retain(|h| !header_name(h).eq_ignore_ascii_case(&name));
            self.otlp_headers.push(header);
        }
    }
}

fn header_name(header: &str) -> &str {
    header.split('=').next().unwrap_or("").trim()
}
