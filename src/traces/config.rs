//! Where spans go and which are kept: the OTLP traces endpoint (`--otlp-traces-endpoint`
//! or the standard `OTEL_EXPORTER_OTLP_TRACES_*` / `OTEL_EXPORTER_OTLP_*` variables, read by
//! the same code as metric push) and the sampler (`OTEL_TRACES_SAMPLER`,
//! `OTEL_TRACES_SAMPLER_ARG`, as the OpenTelemetry specification defines them). Tracing is
//! on exactly when a traces endpoint is configured.

use opentelemetry_sdk::trace::Sampler;

use crate::config::TelemetrySettings;
use crate::otlp::{OtlpConfig, OtlpError, OtlpProtocol, OtlpSignal, signal_config_from_lookup};

/// The sampler as configured (`OTEL_TRACES_SAMPLER`); `ratio` is `OTEL_TRACES_SAMPLER_ARG`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SamplerSpec {
    AlwaysOn,
    AlwaysOff,
    TraceIdRatio(f64),
    ParentBasedAlwaysOn,
    ParentBasedAlwaysOff,
    ParentBasedTraceIdRatio(f64),
}

impl Default for SamplerSpec {
    /// The specification's default.
    fn default() -> Self {
        Self::ParentBasedAlwaysOn
    }
}

impl SamplerSpec {
    /// The SDK sampler that implements it (the SDK's spec-conformant decisions).
    pub fn sampler(self) -> Sampler {
        let parent_based = |root: Sampler| Sampler::ParentBased(Box::new(root));
        match self {
            Self::AlwaysOn => Sampler::AlwaysOn,
            Self::AlwaysOff => Sampler::AlwaysOff,
            Self::TraceIdRatio(r) => Sampler::TraceIdRatioBased(r),
            Self::ParentBasedAlwaysOn => parent_based(Sampler::AlwaysOn),
            Self::ParentBasedAlwaysOff => parent_based(Sampler::AlwaysOff),
            Self::ParentBasedTraceIdRatio(r) => parent_based(Sampler::TraceIdRatioBased(r)),
        }
    }
}

/// How much of a request its trace shows (`--otlp-traces-detail`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TracesDetail {
    /// One span per request (and per engine request of a fanned-out body), with scheduling
    /// events: vLLM's shape.
    #[default]
    Request,
    /// Also a child span for the time in the queue, one per prefill chunk and one for decode.
    Phases,
}

impl std::str::FromStr for TracesDetail {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "request" => Ok(Self::Request),
            "phases" => Ok(Self::Phases),
            other => Err(format!("{other:?} is not a traces detail (expected request or phases)")),
        }
    }
}

/// A traces setting that cannot be used; each names the variable or flag at fault.
#[derive(Debug, thiserror::Error)]
pub enum TracesConfigError {
    #[error(
        "OTEL_TRACES_SAMPLER={0:?} is not supported (expected always_on, always_off, traceidratio, \
         parentbased_always_on, parentbased_always_off or parentbased_traceidratio)"
    )]
    UnknownSampler(String),
    #[error("OTEL_TRACES_SAMPLER_ARG={0:?}: expected a sampling ratio between 0 and 1")]
    BadRatio(String),
    #[error("--otlp-traces-queue-size must be at least 1")]
    ZeroQueue,
    #[error("--otlp-traces-protocol: {0}")]
    Protocol(OtlpError),
    #[error("--otlp-traces-detail: {0}")]
    Detail(String),
    #[error(
        "OTLP traces endpoint {endpoint:?}: port {port} is OTLP's {expected} port, but the protocol is \
         {protocol}; set --otlp-traces-protocol {expected} (or OTEL_EXPORTER_OTLP_TRACES_PROTOCOL), or \
         use the collector's {protocol} port"
    )]
    PortProtocolMismatch {
        endpoint: String,
        port: u16,
        protocol: OtlpProtocol,
        expected: OtlpProtocol,
    },
    #[error("OTLP traces: {0}")]
    Otlp(#[from] OtlpError),
}

/// Everything the span exporter needs.
#[derive(Debug, Clone, PartialEq)]
pub struct TracesConfig {
    /// Endpoint, protocol, headers and timeout (the interval and temporality are unused).
    pub otlp: OtlpConfig,
    pub sampler: SamplerSpec,
    /// Spans waiting for export; a full queue drops new spans and counts them.
    pub queue_size: usize,
    pub detail: TracesDetail,
}

/// The traces config from kiln's own settings (`[telemetry]`'s `otlp_traces_*`: flags, `KILN_*`
/// variables or config file) over the standard variables (read through `lookup`);
/// `Ok(None)` when no traces endpoint is configured anywhere. kiln's settings win.
pub fn traces_config_from_lookup(
    settings: &TelemetrySettings,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Option<TracesConfig>, TracesConfigError> {
    let endpoint = Some(&settings.otlp_traces_endpoint).filter(|e| !e.is_empty());
    let protocol: Option<OtlpProtocol> = match settings.otlp_traces_protocol.as_str() {
        "" => None,
        p => Some(p.parse().map_err(TracesConfigError::Protocol)?),
    };
    let detail: TracesDetail = settings.otlp_traces_detail.parse().map_err(TracesConfigError::Detail)?;
    let base = endpoint.map(|endpoint| {
        let mut cfg = OtlpConfig::new(endpoint.clone(), protocol.unwrap_or_default());
        cfg.timeout = crate::otlp::DEFAULT_TIMEOUT;
        cfg
    });
    let Some(mut otlp) = signal_config_from_lookup(OtlpSignal::Traces, base, &lookup)? else {
        return Ok(None);
    };
    // The standard variables may have replaced what the flags said: the flags win.
    if let Some(endpoint) = endpoint {
        otlp.endpoint = endpoint.clone();
    }
    if let Some(protocol) = protocol {
        otlp.protocol = protocol;
    }
    let protocol_vars = ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"];
    let chosen = protocol.is_some()
        || protocol_vars
            .iter()
            .any(|v| lookup(v).is_some_and(|p| !p.trim().is_empty()));
    protocol_for_port(&mut otlp, chosen)?;
    let queue_size = settings.otlp_traces_queue_size;
    if queue_size == 0 {
        return Err(TracesConfigError::ZeroQueue);
    }
    Ok(Some(TracesConfig {
        otlp,
        sampler: sampler_from_lookup(&lookup)?,
        queue_size,
        detail,
    }))
}

/// OTLP's well-known ports decide the protocol nobody chose, as vLLM's default (grpc) makes
/// `--otlp-traces-endpoint http://collector:4317` work there: 4317 is grpc, 4318 http/protobuf.
/// A protocol that was chosen and disagrees with the port stops startup, since the spans
/// would be lost with only a warning a minute. Other ports keep the chosen or default protocol.
fn protocol_for_port(otlp: &mut OtlpConfig, chosen: bool) -> Result<(), TracesConfigError> {
    let Some(port) = reqwest::Url::parse(&otlp.endpoint).ok().and_then(|u| u.port()) else {
        return Ok(());
    };
    let expected = match port {
        4317 => OtlpProtocol::Grpc,
        4318 => OtlpProtocol::HttpProtobuf,
        _ => return Ok(()),
    };
    if otlp.protocol == expected {
        return Ok(());
    }
    if chosen {
        return Err(TracesConfigError::PortProtocolMismatch {
            endpoint: otlp.endpoint.clone(),
            port,
            protocol: otlp.protocol,
            expected,
        });
    }
    if expected == OtlpProtocol::Grpc {
        // A path derived for http/protobuf means nothing to grpc.
        let trimmed = otlp.endpoint.trim_end_matches(OtlpSignal::Traces.http_path());
        otlp.endpoint = trimmed.to_owned();
    }
    otlp.protocol = expected;
    Ok(())
}

/// `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG` (empty counts as unset). The ratio
/// samplers take the argument, 1.0 when it is unset; a bad value stops startup.
pub fn sampler_from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<SamplerSpec, TracesConfigError> {
    let get = |var| lookup(var).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    let Some(name) = get("OTEL_TRACES_SAMPLER") else {
        return Ok(SamplerSpec::default());
    };
    let ratio = || match get("OTEL_TRACES_SAMPLER_ARG") {
        None => Ok(1.0),
        Some(arg) => arg
            .parse::<f64>()
            .ok()
            .filter(|r| (0.0..=1.0).contains(r))
            .ok_or(TracesConfigError::BadRatio(arg)),
    };
    Ok(match name.to_ascii_lowercase().as_str() {
        "always_on" => SamplerSpec::AlwaysOn,
        "always_off" => SamplerSpec::AlwaysOff,
        "traceidratio" => SamplerSpec::TraceIdRatio(ratio()?),
        "parentbased_always_on" => SamplerSpec::ParentBasedAlwaysOn,
        "parentbased_always_off" => SamplerSpec::ParentBasedAlwaysOff,
        "parentbased_traceidratio" => SamplerSpec::ParentBasedTraceIdRatio(ratio()?),
        _ => return Err(TracesConfigError::UnknownSampler(name)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn the_default_sampler_is_parent_based_always_on() {
        assert_eq!(sampler_from_lookup(env(&[])).unwrap(), SamplerSpec::ParentBasedAlwaysOn);
        assert_eq!(
            sampler_from_lookup(env(&[("OTEL_TRACES_SAMPLER", " ")])).unwrap(),
            SamplerSpec::ParentBasedAlwaysOn
        );
    }

    #[test]
    fn every_spec_sampler_parses_with_its_ratio() {
        let cases = [
            ("always_on", None, SamplerSpec::AlwaysOn),
            ("always_off", None, SamplerSpec::AlwaysOff),
            ("traceidratio", Some("0.25"), SamplerSpec::TraceIdRatio(0.25)),
            ("traceidratio", None, SamplerSpec::TraceIdRatio(1.0)),
            ("parentbased_always_on", None, SamplerSpec::ParentBasedAlwaysOn),
            ("parentbased_always_off", None, SamplerSpec::ParentBasedAlwaysOff),
            (
                "parentbased_traceidratio",
                Some("0"),
                SamplerSpec::ParentBasedTraceIdRatio(0.0),
            ),
            (
                "ParentBased_TraceIdRatio",
                Some("1"),
                SamplerSpec::ParentBasedTraceIdRatio(1.0),
            ),
        ];
        for (name, arg, want) in cases {
            let mut vars = vec![("OTEL_TRACES_SAMPLER", name)];
            vars.extend(arg.map(|a| ("OTEL_TRACES_SAMPLER_ARG", a)));
            assert_eq!(sampler_from_lookup(env(&vars)).unwrap(), want, "{name} {arg:?}");
        }
    }

    #[test]
    fn bad_samplers_and_ratios_are_named_in_the_error() {
        let err = sampler_from_lookup(env(&[("OTEL_TRACES_SAMPLER", "jaeger_remote")])).unwrap_err();
        assert!(
            err.to_string().contains("OTEL_TRACES_SAMPLER=\"jaeger_remote\""),
            "{err}"
        );
        for bad in ["1.5", "-0.1", "half", "NaN"] {
            let vars = [
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", bad),
            ];
            let err = sampler_from_lookup(env(&vars)).unwrap_err();
            assert!(
                err.to_string().contains(&format!("OTEL_TRACES_SAMPLER_ARG=\"{bad}\"")),
                "{err}"
            );
        }
    }

    #[test]
    fn no_endpoint_anywhere_means_no_tracing() {
        let vars = [(
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            "http://127.0.0.1:4318/v1/metrics",
        )];
        assert!(
            traces_config_from_lookup(&TelemetrySettings::default(), env(&vars))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn the_general_endpoint_gets_the_traces_path_for_http_only() {
        let vars = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")];
        let cfg = traces_config_from_lookup(&TelemetrySettings::default(), env(&vars))
            .unwrap()
            .unwrap();
        assert_eq!(cfg.otlp.endpoint, "http://collector:4318/v1/traces");
        assert_eq!(cfg.otlp.protocol, OtlpProtocol::HttpProtobuf);
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-team=kiln"),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "2500"),
        ];
        let cfg = traces_config_from_lookup(&TelemetrySettings::default(), env(&vars))
            .unwrap()
            .unwrap();
        assert_eq!(cfg.otlp.endpoint, "http://collector:4317");
        assert_eq!(cfg.otlp.protocol, OtlpProtocol::Grpc);
        assert_eq!(cfg.otlp.headers, vec![("x-team".to_owned(), "kiln".to_owned())]);
        assert_eq!(cfg.otlp.timeout, std::time::Duration::from_millis(2500));
    }

    #[test]
    fn the_signal_endpoint_is_used_as_is_and_the_flag_wins_over_it() {
        let vars = [
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://a:4318/custom"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://b:4318"),
        ];
        let cfg = traces_config_from_lookup(&TelemetrySettings::default(), env(&vars))
            .unwrap()
            .unwrap();
        assert_eq!(cfg.otlp.endpoint, "http://a:4318/custom");
        let flags = TelemetrySettings {
            otlp_traces_endpoint: "http://flag:4318/v1/traces".into(),
            otlp_traces_queue_size: 7,
            ..Default::default()
        };
        let cfg = traces_config_from_lookup(&flags, env(&vars)).unwrap().unwrap();
        assert_eq!(cfg.otlp.endpoint, "http://flag:4318/v1/traces");
        assert_eq!(cfg.queue_size, 7);
    }

    #[test]
    fn a_zero_queue_or_bad_protocol_stops_startup() {
        let flags = TelemetrySettings {
            otlp_traces_endpoint: "http://x:4318/v1/traces".into(),
            otlp_traces_queue_size: 0,
            ..Default::default()
        };
        assert!(matches!(
            traces_config_from_lookup(&flags, env(&[])),
            Err(TracesConfigError::ZeroQueue)
        ));
        let vars = [
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://a:4318/v1/traces"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
        ];
        let err = traces_config_from_lookup(&TelemetrySettings::default(), env(&vars)).unwrap_err();
        assert!(err.to_string().contains("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), "{err}");
        for (protocol, detail, named) in [
            ("http/json", "request", "--otlp-traces-protocol"),
            ("grpc", "spans", "--otlp-traces-detail"),
        ] {
            let settings = TelemetrySettings {
                otlp_traces_protocol: protocol.into(),
                otlp_traces_detail: detail.into(),
                ..flags.clone()
            };
            let err = traces_config_from_lookup(&settings, env(&[])).unwrap_err();
            assert!(err.to_string().contains(named), "{err}");
        }
    }

    fn flag(endpoint: &str, protocol: Option<OtlpProtocol>) -> TelemetrySettings {
        TelemetrySettings {
            otlp_traces_endpoint: endpoint.into(),
            otlp_traces_protocol: protocol.map_or("", OtlpProtocol::as_str).into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_grpc_port_means_grpc_when_no_protocol_was_chosen_as_in_vllm() {
        let cfg = traces_config_from_lookup(&flag("http://collector:4317", None), env(&[]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (cfg.otlp.endpoint.as_str(), cfg.otlp.protocol),
            ("http://collector:4317", OtlpProtocol::Grpc)
        );
        // The general endpoint on the grpc port: no http path is left on it.
        let vars = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")];
        let cfg = traces_config_from_lookup(&TelemetrySettings::default(), env(&vars))
            .unwrap()
            .unwrap();
        assert_eq!(
            (cfg.otlp.endpoint.as_str(), cfg.otlp.protocol),
            ("http://collector:4317", OtlpProtocol::Grpc)
        );
        // Other ports keep the default.
        let cfg = traces_config_from_lookup(&flag("http://collector:9000/v1/traces", None), env(&[]))
            .unwrap()
            .unwrap();
        assert_eq!(cfg.otlp.protocol, OtlpProtocol::HttpProtobuf);
    }

    #[test]
    fn a_chosen_protocol_that_disagrees_with_the_port_stops_startup() {
        let cases = [
            (
                flag("http://c:4317/v1/traces", Some(OtlpProtocol::HttpProtobuf)),
                vec![],
            ),
            (flag("http://c:4318", Some(OtlpProtocol::Grpc)), vec![]),
            (
                flag("http://c:4317", None),
                vec![("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")],
            ),
            (
                flag("http://c:4318", None),
                vec![("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")],
            ),
        ];
        for (settings, vars) in cases {
            let err = traces_config_from_lookup(&settings, env(&vars)).unwrap_err();
            assert!(
                matches!(err, TracesConfigError::PortProtocolMismatch { .. }),
                "{settings:?} {vars:?}: {err}"
            );
            assert!(err.to_string().contains("--otlp-traces-protocol"), "{err}");
        }
        let agreeing = flag("http://c:4317", Some(OtlpProtocol::Grpc));
        assert!(traces_config_from_lookup(&agreeing, env(&[])).is_ok());
    }
}
