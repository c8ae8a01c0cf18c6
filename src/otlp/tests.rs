//! Config, env and failure-log tests.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::*;

fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    move |name| map.get(name).cloned()
}

fn from_env(base: Option<OtlpConfig>, vars: &[(&str, &str)]) -> Result<Option<OtlpConfig>, OtlpError> {
    otlp_config_from_lookup(base, lookup(vars))
}

#[test]
fn protocol_and_temporality_parse_and_deserialize_by_their_spec_names() {
    assert_eq!("grpc".parse::<OtlpProtocol>().unwrap(), OtlpProtocol::Grpc);
    assert_eq!(
        "http/protobuf".parse::<OtlpProtocol>().unwrap(),
        OtlpProtocol::HttpProtobuf
    );
    let err = "http/json".parse::<OtlpProtocol>().unwrap_err();
    assert!(err.to_string().contains("\"http/json\""), "{err}");
    assert_eq!("Delta".parse::<OtlpTemporality>().unwrap(), OtlpTemporality::Delta);
    assert_eq!(
        "LOWMEMORY".parse::<OtlpTemporality>().unwrap(),
        OtlpTemporality::LowMemory
    );
    let err = "monthly".parse::<OtlpTemporality>().unwrap_err();
    assert!(err.to_string().contains("\"monthly\""), "{err}");
    let p: Vec<OtlpProtocol> = serde_json::from_str(r#"["http/protobuf","grpc"]"#).unwrap();
    assert_eq!(p, [OtlpProtocol::HttpProtobuf, OtlpProtocol::Grpc]);
    let t: Vec<OtlpTemporality> = serde_json::from_str(r#"["cumulative","delta","lowmemory"]"#).unwrap();
    assert_eq!(t[2], OtlpTemporality::LowMemory);
    assert_eq!(serde_json::to_string(&OtlpProtocol::Grpc).unwrap(), "\"grpc\"");
    assert_eq!(OtlpProtocol::HttpProtobuf.to_string(), "http/protobuf");
}

#[test]
fn no_base_and_no_endpoint_variable_means_no_push() {
    let got = from_env(None, &[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]).unwrap();
    assert_eq!(got, None);
    let got = from_env(None, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "  ")]).unwrap();
    assert_eq!(got, None, "empty values count as unset");
}

#[test]
fn base_endpoint_gets_the_signal_path_for_http_only() {
    let cfg = from_env(None, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")])
        .unwrap()
        .unwrap();
    assert_eq!(cfg.endpoint, "http://c:4318/v1/metrics");
    assert_eq!(cfg.protocol, OtlpProtocol::HttpProtobuf);
    assert_eq!((cfg.interval, cfg.timeout), (DEFAULT_INTERVAL, DEFAULT_TIMEOUT));
    let cfg = from_env(None, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c/otlp")])
        .unwrap()
        .unwrap();
    assert_eq!(cfg.endpoint, "http://c/otlp/v1/metrics");
    let cfg = from_env(
        None,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ],
    )
    .unwrap()
    .unwrap();
    assert_eq!(cfg.endpoint, "http://c:4317");
    let cfg = from_env(
        None,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318"),
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://m:9/custom"),
        ],
    )
    .unwrap()
    .unwrap();
    assert_eq!(cfg.endpoint, "http://m:9/custom", "signal endpoint is used as is");
}

#[test]
fn variables_override_the_config_and_merge_headers() {
    let mut base = OtlpConfig::new("http://kiln-config:4318/v1/metrics", OtlpProtocol::HttpProtobuf);
    base.set_header("Authorization", "from-config");
    base.set_header("x-tenant", "a");
    let cfg = from_env(
        Some(base),
        &[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4317"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "authorization=Basic%20abc%3D, x-new = 1 ,",
            ),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "1500"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "5000"),
            ("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "Delta"),
        ],
    )
    .unwrap()
    .unwrap();
    assert_eq!(cfg.protocol, OtlpProtocol::Grpc);
    assert_eq!(cfg.endpoint, "http://env:4317");
    assert_eq!(cfg.timeout, Duration::from_millis(1500), "signal-specific wins");
    assert_eq!(cfg.interval, Duration::from_secs(5));
    assert_eq!(cfg.temporality, OtlpTemporality::Delta);
    let headers: Vec<(&str, &str)> = cfg.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(
        headers,
        [("x-tenant", "a"), ("authorization", "Basic abc="), ("x-new", "1")]
    );
    let kept = from_env(Some(OtlpConfig::new("http://k:1/v1/metrics", OtlpProtocol::Grpc)), &[])
        .unwrap()
        .unwrap();
    assert_eq!(kept, OtlpConfig::new("http://k:1/v1/metrics", OtlpProtocol::Grpc));
}

#[test]
fn bad_variables_are_refused_naming_variable_and_value() {
    let ep = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
    let cases: [(&str, &str, &str); 5] = [
        (
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "http/json",
            "OTEL_EXPORTER_OTLP_PROTOCOL=\"http/json\"",
        ),
        (
            "OTEL_EXPORTER_OTLP_TIMEOUT",
            "10s",
            "OTEL_EXPORTER_OTLP_TIMEOUT=\"10s\"",
        ),
        ("OTEL_METRIC_EXPORT_INTERVAL", "0", "OTEL_METRIC_EXPORT_INTERVAL=\"0\""),
        (
            "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
            "weekly",
            "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE=\"weekly\"",
        ),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "a=%zz",
            "OTEL_EXPORTER_OTLP_HEADERS: header \"a\"",
        ),
    ];
    for (var, value, expected) in cases {
        let err = from_env(None, &[ep, (var, value)]).unwrap_err();
        assert!(err.to_string().starts_with(expected), "{err}");
    }
    let err = from_env(None, &[ep, ("OTEL_EXPORTER_OTLP_HEADERS", "ok=1,Bearer secret")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("#2") && !err.contains("secret"), "{err}");
    let no_endpoint = OtlpConfig::new("", OtlpProtocol::Grpc);
    assert!(matches!(from_env(Some(no_endpoint), &[]), Err(OtlpError::NoEndpoint)));
}

#[test]
fn debug_hides_header_values() {
    let mut cfg = OtlpConfig::new("http://c:4318/v1/metrics", OtlpProtocol::HttpProtobuf);
    cfg.set_header("authorization", "Bearer s3cret");
    let shown = format!("{cfg:?}");
    assert!(shown.contains("authorization") && !shown.contains("s3cret"), "{shown}");
}

#[test]
fn failures_warn_once_a_minute_with_the_suppressed_count() {
    let mut log = FailureLog::default();
    let t0 = Instant::now();
    assert_eq!(log.success(), None, "nothing to report without failures");
    assert_eq!(log.failure(t0), Some(0));
    for s in 1..=5 {
        assert_eq!(log.failure(t0 + Duration::from_secs(s * 10)), None);
    }
    assert_eq!(log.failure(t0 + Duration::from_secs(60)), Some(5));
    assert_eq!(log.success(), Some(7), "the warned streak ends: say so once");
    assert_eq!(log.success(), None);
    // A new streak within the minute stays quiet and is not announced as recovered.
    assert_eq!(log.failure(t0 + Duration::from_secs(61)), None);
    assert_eq!(log.success(), None);
    assert_eq!(log.failure(t0 + Duration::from_secs(125)), Some(1));
}
