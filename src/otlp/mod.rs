//! OTLP, the transport kiln's metric push (`stats::otlp_push`) and span export
//! (`traces::export`) share: the endpoint, protocol, headers, interval, timeout and temporality
//! (`OtlpConfig`), the standard `OTEL_EXPORTER_OTLP_*` variables (`env`), the HTTP client or
//! grpc runtime an exporter runs on (`transport`), the metrics request's sender
//! (`metrics_sender`), and the rate-limited failure warnings.
//!
//! Env notes: the exporters themselves also read `OTEL_EXPORTER_OTLP_COMPRESSION` (gzip/zstd
//! are not compiled in, so it is ignored) and re-read the headers variables; kiln's
//! headers are applied last on every request (`transport`), so flags still win.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

mod env;
mod failure_log;
pub(crate) mod metrics_sender;
pub(crate) mod transport;

pub use env::{
    OtlpSignal, otlp_config_from_env, otlp_config_from_lookup, signal_config_from_lookup, signal_endpoint_from_base,
};
pub(crate) use failure_log::FailureLog;

/// `OTEL_METRIC_EXPORT_INTERVAL`'s default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);
/// `OTEL_EXPORTER_OTLP_TIMEOUT`'s default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The wire protocol. Serde and `FromStr` use the spec's names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum OtlpProtocol {
    #[default]
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    #[serde(rename = "grpc")]
    Grpc,
}

/// Aggregation temporality preference (`OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OtlpTemporality {
    #[default]
    Cumulative,
    Delta,
    /// Delta for synchronous counters and histograms, cumulative for the rest (spec value).
    LowMemory,
}

impl OtlpProtocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::HttpProtobuf => "http/protobuf",
            Self::Grpc => "grpc",
        }
    }
}

impl OtlpTemporality {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cumulative => "cumulative",
            Self::Delta => "delta",
            Self::LowMemory => "lowmemory",
        }
    }
}

impl fmt::Display for OtlpProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for OtlpTemporality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OtlpProtocol {
    type Err = OtlpError;
    fn from_str(s: &str) -> Result<Self, OtlpError> {
        match s.trim() {
            "http/protobuf" => Ok(Self::HttpProtobuf),
            "grpc" => Ok(Self::Grpc),
            other => Err(OtlpError::UnknownProtocol(other.to_owned())),
        }
    }
}

/// Case-insensitive, as the spec asks for the temporality variable.
impl FromStr for OtlpTemporality {
    type Err = OtlpError;
    fn from_str(s: &str) -> Result<Self, OtlpError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cumulative" => Ok(Self::Cumulative),
            "delta" => Ok(Self::Delta),
            "lowmemory" => Ok(Self::LowMemory),
            _ => Err(OtlpError::UnknownTemporality(s.trim().to_owned())),
        }
    }
}

/// Where and how to push. `Debug` hides header values: they are often credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct OtlpConfig {
    /// The exact URL exports go to (http/protobuf: including `/v1/metrics`).
    pub endpoint: String,
    pub protocol: OtlpProtocol,
    pub interval: Duration,
    /// Per export, retries included.
    pub timeout: Duration,
    pub headers: Vec<(String, String)>,
    pub temporality: OtlpTemporality,
}

impl OtlpConfig {
    /// Defaults of the spec: 60 s interval, 10 s timeout, cumulative, no headers.
    pub fn new(endpoint: impl Into<String>, protocol: OtlpProtocol) -> Self {
        Self {
            endpoint: endpoint.into(),
            protocol,
            interval: DEFAULT_INTERVAL,
            timeout: DEFAULT_TIMEOUT,
            headers: Vec::new(),
            temporality: OtlpTemporality::Cumulative,
        }
    }

    /// Sets `name` to `value`, replacing any header of that name (names are case-insensitive).
    pub fn set_header(&mut self, name: &str, value: impl Into<String>) {
        self.headers.retain(|(k, _)| !k.eq_ignore_ascii_case(name));
        self.headers.push((name.to_owned(), value.into()));
    }
}

impl fmt::Debug for OtlpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("OtlpConfig")
            .field("endpoint", &self.endpoint)
            .field("protocol", &self.protocol)
            .field("interval", &self.interval)
            .field("timeout", &self.timeout)
            .field("header_names", &names)
            .field("temporality", &self.temporality)
            .finish()
    }
}

/// Each error names the value, variable or header at fault (never a header's value).
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("unknown OTLP protocol {0:?} (expected \"http/protobuf\" or \"grpc\")")]
    UnknownProtocol(String),
    #[error("unknown OTLP temporality {0:?} (expected \"cumulative\", \"delta\" or \"lowmemory\")")]
    UnknownTemporality(String),
    #[error("{var}={value:?}: {reason}")]
    Env {
        var: &'static str,
        value: String,
        reason: String,
    },
    #[error("{var}: header {key:?}: {reason}")]
    EnvHeader {
        var: &'static str,
        key: String,
        reason: &'static str,
    },
    #[error("no OTLP endpoint: set the config's endpoint, --otlp-endpoint or OTEL_EXPORTER_OTLP_ENDPOINT")]
    NoEndpoint,
    #[error("OTLP endpoint {endpoint:?}: {reason}")]
    Endpoint { endpoint: String, reason: String },
    #[error("OTLP header {key:?}: {reason}")]
    Header { key: String, reason: &'static str },
    #[error("OTLP {field} must be greater than zero")]
    Zero { field: &'static str },
    #[error("starting the grpc exporter's tokio runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("building the HTTP client for OTLP endpoint {endpoint:?}: {reason}")]
    HttpClient { endpoint: String, reason: String },
    #[error("building the OTLP {protocol} exporter for {endpoint:?}: {source}")]
    Build {
        protocol: OtlpProtocol,
        endpoint: String,
        #[source]
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

/// The metrics URL for a collector's base URL (`OTEL_EXPORTER_OTLP_ENDPOINT` semantics):
/// http/protobuf appends `/v1/metrics`, grpc uses the base as is.
pub fn metrics_endpoint_from_base(base: &str, protocol: OtlpProtocol) -> String {
    match protocol {
        OtlpProtocol::HttpProtobuf => format!("{}/v1/metrics", base.trim_end_matches('/')),
        OtlpProtocol::Grpc => base.to_owned(),
    }
}

pub(crate) fn check_endpoint(endpoint: &str) -> Result<(), OtlpError> {
    let err = |reason: String| OtlpError::Endpoint {
        endpoint: endpoint.to_owned(),
        reason,
    };
    let url = reqwest::Url::parse(endpoint).map_err(|e| err(e.to_string()))?;
    match url.scheme() {
        "http" if url.host().is_some() => Ok(()),
        "http" => Err(err("no host".to_owned())),
        "https" => Err(err(
            "https needs TLS, which kiln's OTLP exporter is built without; push over http:// \
             to a collector (for example a local agent)"
                .to_owned(),
        )),
        other => Err(err(format!("unsupported scheme {other:?} (expected http)"))),
    }
}

#[cfg(test)]
mod tests;
