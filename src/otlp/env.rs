//! The standard `OTEL_*` variables over kiln's OTLP config.

use std::time::Duration;

use super::{OtlpConfig, OtlpError, OtlpProtocol, metrics_endpoint_from_base};

/// `otlp_config_from_lookup` on the process environment.
pub fn otlp_config_from_env(base: Option<OtlpConfig>) -> Result<Option<OtlpConfig>, OtlpError> {
    otlp_config_from_lookup(base, |name| {
        std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
    })
}

/// The signal an OTLP exporter carries: which `OTEL_EXPORTER_OTLP_{SIGNAL}_*` variables
/// apply and which path http/protobuf appends to `OTEL_EXPORTER_OTLP_ENDPOINT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpSignal {
    Metrics,
    Traces,
}

impl OtlpSignal {
    /// `OTEL_EXPORTER_OTLP_{SIGNAL}_{suffix}`.
    fn var(self, suffix: &str) -> &'static str {
        match (self, suffix) {
            (Self::Metrics, "ENDPOINT") => "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            (Self::Metrics, "PROTOCOL") => "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
            (Self::Metrics, "HEADERS") => "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
            (Self::Metrics, _) => "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
            (Self::Traces, "ENDPOINT") => "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            (Self::Traces, "PROTOCOL") => "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            (Self::Traces, "HEADERS") => "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            (Self::Traces, _) => "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        }
    }

    /// The http/protobuf path of the signal under a collector's base URL.
    pub fn http_path(self) -> &'static str {
        match self {
            Self::Metrics => "/v1/metrics",
            Self::Traces => "/v1/traces",
        }
    }
}

/// The signal's URL for a collector's base URL (`OTEL_EXPORTER_OTLP_ENDPOINT` semantics):
/// http/protobuf appends the signal's path, grpc uses the base as is.
pub fn signal_endpoint_from_base(base: &str, protocol: OtlpProtocol, signal: OtlpSignal) -> String {
    match (signal, protocol) {
        (OtlpSignal::Metrics, _) => metrics_endpoint_from_base(base, protocol),
        (OtlpSignal::Traces, OtlpProtocol::HttpProtobuf) => {
            format!("{}{}", base.trim_end_matches('/'), signal.http_path())
        }
        (OtlpSignal::Traces, OtlpProtocol::Grpc) => base.to_owned(),
    }
}

/// `signal_config_from_lookup` for metrics.
pub fn otlp_config_from_lookup(
    base: Option<OtlpConfig>,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Option<OtlpConfig>, OtlpError> {
    signal_config_from_lookup(OtlpSignal::Metrics, base, lookup)
}

/// Applies the standard variables, read through `lookup`, over `base` (kiln's config).
/// Signal-specific variables (`OTEL_EXPORTER_OTLP_METRICS_*`, `…_TRACES_*`) win over the
/// general ones; empty values count as unset. Export is on when `base` is given or an
/// endpoint variable is set; otherwise `Ok(None)`. The interval and temporality variables
/// are read for metrics only.
pub fn signal_config_from_lookup(
    signal: OtlpSignal,
    base: Option<OtlpConfig>,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Option<OtlpConfig>, OtlpError> {
    let get = |var: &'static str| {
        lookup(var)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .map(|v| (var, v))
    };
    let either = |specific, general| get(specific).or_else(|| get(general));
    let signal_endpoint = get(signal.var("ENDPOINT"));
    let base_endpoint = get("OTEL_EXPORTER_OTLP_ENDPOINT");
    let mut cfg = match base {
        Some(cfg) => cfg,
        None if signal_endpoint.is_none() && base_endpoint.is_none() => return Ok(None),
        None => OtlpConfig::new(String::new(), OtlpProtocol::default()),
    };
    let env_err = |var, value: &str, reason: &str| OtlpError::Env {
        var,
        value: value.to_owned(),
        reason: reason.to_owned(),
    };
    if let Some((var, v)) = either(signal.var("PROTOCOL"), "OTEL_EXPORTER_OTLP_PROTOCOL") {
        cfg.protocol = v
            .parse()
            .map_err(|_| env_err(var, &v, "expected http/protobuf or grpc"))?;
    }
    if let Some((_, v)) = signal_endpoint {
        cfg.endpoint = v;
    } else if let Some((_, v)) = base_endpoint {
        cfg.endpoint = signal_endpoint_from_base(&v, cfg.protocol, signal);
    }
    if let Some((var, v)) = either(signal.var("HEADERS"), "OTEL_EXPORTER_OTLP_HEADERS") {
        for (key, value) in parse_headers(var, &v)? {
            cfg.set_header(&key, value);
        }
    }
    let millis = |var, v: &str| match v.parse::<u64>() {
        Ok(0) | Err(_) => Err(env_err(var, v, "expected a positive number of milliseconds")),
        Ok(ms) => Ok(Duration::from_millis(ms)),
    };
    if let Some((var, v)) = either(signal.var("TIMEOUT"), "OTEL_EXPORTER_OTLP_TIMEOUT") {
        cfg.timeout = millis(var, &v)?;
    }
    if signal != OtlpSignal::Metrics {
        return finish(cfg);
    }
    if let Some((var, v)) = get("OTEL_METRIC_EXPORT_INTERVAL") {
        cfg.interval = millis(var, &v)?;
    }
    if let Some((var, v)) = get("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE") {
        cfg.temporality = v
            .parse()
            .map_err(|_| env_err(var, &v, "expected cumulative, delta or lowmemory"))?;
    }
    finish(cfg)
}

/// The headers the SDK's own exporters read from the environment when built
/// (`OTEL_EXPORTER_OTLP_{SIGNAL}_HEADERS`, else `OTEL_EXPORTER_OTLP_HEADERS`), under `cfg`'s
/// own (which win, name for name): kiln's exporter sends what theirs sent.
pub(crate) fn with_env_headers(cfg: &OtlpConfig, signal: OtlpSignal) -> Result<OtlpConfig, OtlpError> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let found = [signal.var("HEADERS"), "OTEL_EXPORTER_OTLP_HEADERS"]
        .into_iter()
        .find_map(|name| var(name).map(|v| (name, v)));
    let mut out = cfg.clone();
    let Some((name, value)) = found else {
        return Ok(out);
    };
    out.headers = parse_headers(name, value.trim())?;
    for (key, value) in &cfg.headers {
        out.set_header(key, value.clone());
    }
    Ok(out)
}

fn finish(cfg: OtlpConfig) -> Result<Option<OtlpConfig>, OtlpError> {
    if cfg.endpoint.is_empty() {
        return Err(OtlpError::NoEndpoint);
    }
    Ok(Some(cfg))
}

/// `k=v,k2=v2` with percent-encoded values (W3C baggage format, as the spec says).
fn parse_headers(var: &'static str, s: &str) -> Result<Vec<(String, String)>, OtlpError> {
    let err = |key: &str, reason| OtlpError::EnvHeader {
        var,
        key: key.to_owned(),
        reason,
    };
    let mut out = Vec::new();
    let entries = s.split(',').map(str::trim).filter(|e| !e.is_empty());
    for (n, entry) in entries.enumerate() {
        // Without '=' the entry may be a bare token: name its position, not its text.
        let (key, value) = entry
            .split_once('=')
            .ok_or_else(|| err(&format!("#{}", n + 1), "expected key=value"))?;
        let key = key.trim();
        if key.is_empty() {
            return Err(err(key, "empty header name"));
        }
        let value = percent_decode(value.trim()).ok_or_else(|| err(key, "bad percent-encoding"))?;
        out.push((key.to_owned(), value));
    }
    Ok(out)
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}
