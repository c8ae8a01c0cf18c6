//! `kiln serve`'s configuration as it starts: the file, the standard `OTEL_*` variables, the
//! flags and `KILN_*` variables (`config::cli`), then the checks that need a subsystem (the
//! CPU's kernels, the metric prefix, the exporters' settings), each naming its key, all
//! before the model loads. The exporters' configurations are built here from `[telemetry]`.

use std::time::Duration;

use crate::config::cli::ServeArgs;
use crate::config::{Config, ConfigError, TelemetrySettings, invalid};
use crate::kernels::KernelPath;
use crate::otlp::{OtlpConfig, OtlpError, OtlpProtocol, otlp_config_from_lookup};
use crate::stats::custom_buckets::CustomHistogramBuckets;
use crate::stats::exporter::is_metric_name_prefix;
use crate::stats::push_histograms::{HistogramAggregation, histogram_aggregation_from_lookup};
use crate::traces::config::{TracesConfig, traces_config_from_lookup};

/// The validated configuration of `kiln serve`, from its arguments and the process's
/// environment.
pub fn resolve(args: &ServeArgs) -> Result<Config, ConfigError> {
    let env = |name: &str| std::env::var(name).ok();
    let config = args.resolve(|c| apply_otel_env(&mut c.telemetry, env))?;
    check(&config, env)?;
    Ok(config)
}

/// The checks of `config` that need a subsystem, the environment read through `lookup`.
pub fn check(config: &Config, lookup: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
    KernelPath::chosen(config.engine.cpu_kernels)
        .map_err(|m| invalid("engine.cpu_kernels", format!("{m} (--cpu-kernels)")))?;
    let t = &config.telemetry;
    if !is_metric_name_prefix(&t.engine_prefix) {
        return Err(invalid(
            "telemetry.engine_prefix",
            format!(
                "`{}` (--engine-prefix) is not a Prometheus name prefix ([a-zA-Z_:][a-zA-Z0-9_:]*)",
                t.engine_prefix
            ),
        ));
    }
    CustomHistogramBuckets::parse(&t.custom_histogram_buckets)
        .map_err(|e| invalid("telemetry.custom_histogram_buckets", e.to_string()))?;
    otlp_push(t)?;
    push_histograms(t, &lookup)?;
    traces(t, lookup)?;
    Ok(())
}

/// The OTLP push settings, or `None` when no endpoint is configured.
pub fn otlp_push(t: &TelemetrySettings) -> Result<Option<OtlpConfig>, ConfigError> {
    if t.otlp_endpoint.is_empty() {
        return Ok(None);
    }
    let bad = |message: String| invalid("telemetry.otlp_*", message);
    let protocol: OtlpProtocol = t.otlp_protocol.parse().map_err(|e: OtlpError| bad(e.to_string()))?;
    let mut cfg = OtlpConfig::new(t.otlp_endpoint.clone(), protocol);
    cfg.temporality = t.otlp_temporality.parse().map_err(|e: OtlpError| bad(e.to_string()))?;
    let seconds = |key: &str, v: f64| {
        (v > 0.0 && v.is_finite())
            .then(|| Duration::from_secs_f64(v))
            .ok_or_else(|| bad(format!("{key} must be a positive number of seconds")))
    };
    cfg.interval = seconds("otlp_interval_s", t.otlp_interval_s)?;
    cfg.timeout = seconds("otlp_timeout_s", t.otlp_timeout_s)?;
    for header in &t.otlp_headers {
        let (name, value) = header
            .split_once('=')
            .filter(|(n, _)| !n.trim().is_empty())
            .ok_or_else(|| bad(format!("otlp header `{header}` is not name=value")))?;
        cfg.set_header(name.trim(), value.trim());
    }
    Ok(Some(cfg))
}

/// How pushed histograms are aggregated: the setting, else the standard variable.
pub fn push_histograms(
    t: &TelemetrySettings,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<HistogramAggregation, ConfigError> {
    histogram_aggregation_from_lookup(&t.otlp_histogram_aggregation, lookup)
        .map_err(|e| invalid("telemetry.otlp_histogram_aggregation", e))
}

/// Applies the standard `OTEL_EXPORTER_OTLP_*` / `OTEL_METRIC_EXPORT_INTERVAL` variables
/// (read through `lookup`) over the file's OTLP settings; kiln's flags come after.
pub fn apply_otel_env(t: &mut TelemetrySettings, lookup: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
    let env_endpoint = ["OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"]
        .iter()
        .any(|v| lookup(v).is_some_and(|e| !e.trim().is_empty()));
    if t.otlp_endpoint.is_empty() && !env_endpoint {
        return Ok(()); // no push configured anywhere (flags may still add it)
    }
    let mut base = OtlpConfig::new(
        t.otlp_endpoint.clone(),
        t.otlp_protocol
            .parse()
            .map_err(|e: OtlpError| invalid("telemetry.otlp_protocol", e.to_string()))?,
    );
    base.temporality = t
        .otlp_temporality
        .parse()
        .map_err(|e: OtlpError| invalid("telemetry.otlp_temporality", e.to_string()))?;
    base.interval = Duration::from_secs_f64(t.otlp_interval_s.max(0.001));
    base.timeout = Duration::from_secs_f64(t.otlp_timeout_s.max(0.001));
    let Some(cfg) =
        otlp_config_from_lookup(Some(base), lookup).map_err(|e| invalid("OTEL_EXPORTER_OTLP_*", e.to_string()))?
    else {
        return Ok(());
    };
    t.otlp_endpoint = cfg.endpoint;
    t.otlp_protocol = cfg.protocol.as_str().to_string();
    t.otlp_temporality = cfg.temporality.as_str().to_string();
    t.otlp_interval_s = cfg.interval.as_secs_f64();
    t.otlp_timeout_s = cfg.timeout.as_secs_f64();
    t.set_otlp_headers(cfg.headers.into_iter().map(|(name, value)| format!("{name}={value}")));
    Ok(())
}

/// The traces settings over the standard `OTEL_*` variables read through `lookup`, or
/// `None` when no traces endpoint is configured anywhere.
pub fn traces(
    t: &TelemetrySettings,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Option<TracesConfig>, ConfigError> {
    traces_config_from_lookup(t, lookup).map_err(|e| invalid("telemetry.otlp_traces_*", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metric_prefix_and_the_traces_environment_are_checked_before_anything_loads() {
        let none = |_: &str| None;
        let mut c = Config::default();
        c.telemetry.engine_prefix = "1x_".into();
        let err = check(&c, none).unwrap_err().to_string();
        assert!(err.contains("--engine-prefix"), "{err}");
        let mut c = Config::default();
        c.telemetry.otlp_traces_endpoint = "http://127.0.0.1:9/v1/traces".into();
        check(&c, none).expect("valid without the environment");
        let bogus = |name: &str| (name == "OTEL_TRACES_SAMPLER").then(|| "bogus".to_string());
        let err = check(&c, bogus).unwrap_err().to_string();
        assert!(err.contains("OTEL_TRACES_SAMPLER"), "{err}");
    }

    #[test]
    fn bad_otlp_values_name_their_key() {
        let mut t = TelemetrySettings {
            otlp_endpoint: "http://127.0.0.1:9/v1/metrics".into(),
            ..TelemetrySettings::default()
        };
        assert!(otlp_push(&t).expect("valid").is_some());
        t.otlp_protocol = "http/json".into();
        let err = otlp_push(&t).unwrap_err().to_string();
        assert!(err.contains("telemetry.otlp_*") && err.contains("http/json"), "{err}");
    }
}
