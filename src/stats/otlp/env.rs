//! The standard `OTEL_*` variables over kiln's OTLP config.

use std::time::Duration;

use super::{OtlpConfig, OtlpError, OtlpProtocol, metrics_endpoint_from_base};

/// `otlp_config_from_lookup` on the process environment.
pub fn otlp_config_from_env(base: Option<OtlpConfig>) -> Result<Option<OtlpConfig>, OtlpError> {
    otlp_config_from_lookup(base, |name| {
        std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
    })
}

/// Applies the standard variables, read through `lookup`, over `base` (kiln's config).
/// Signal-specific variables (`OTEL_EXPORTER_OTLP_METRICS_*`) win over the general ones;
/// empty values count as unset. Push is on when `base` is given or an endpoint variable is
/// set; otherwise `Ok(None)`.
pub fn otlp_config_from_lookup(
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
    let signal_endpoint = get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT");
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
    if let Some((var, v)) = either("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL") {
        cfg.protocol = v
            .parse()
            .map_err(|_| env_err(var, &v, "expected http/protobuf or grpc"))?;
    }
    if let Some((_, v)) = signal_endpoint {
        cfg.endpoint = v;
    } else if let Some((_, v)) = base_endpoint {
        cfg.endpoint = metrics_endpoint_from_base(&v, cfg.protocol);
    }
    if let Some((var, v)) = either("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS") {
        for (key, value) in parse_headers(var, &v)? {
            cfg.set_header(&key, value);
        }
    }
    let millis = |var, v: &str| match v.parse::<u64>() {
        Ok(0) | Err(_) => Err(env_err(var, v, "expected a positive number of milliseconds")),
        Ok(ms) => Ok(Duration::from_millis(ms)),
    };
    if let Some((var, v)) = either("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT") {
        cfg.timeout = millis(var, &v)?;
    }
    if let Some((var, v)) = get("OTEL_METRIC_EXPORT_INTERVAL") {
        cfg.interval = millis(var, &v)?;
    }
    if let Some((var, v)) = get("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE") {
        cfg.temporality = v
            .parse()
            .map_err(|_| env_err(var, &v, "expected cumulative, delta or lowmemory"))?;
    }
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
