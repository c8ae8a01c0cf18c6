//! The metric reader against no collector, a bad configuration and a silent collector. The
//! tests against real receivers (oteltap, rotel) are in `tests/it/otlp/push.rs`.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use opentelemetry::metrics::MeterProvider as _;

use super::*;
use crate::otlp::{OtlpProtocol, metrics_endpoint_from_base};
use crate::stats::exporter::build_telemetry_with_readers;
use crate::stats::exporter::test_support::config;

#[test]
fn bad_endpoints_headers_and_durations_are_refused() {
    let cases = [
        ("https://c:4318/v1/metrics", "TLS"),
        ("ftp://c/x", "\"ftp\""),
        ("c:4318", "\"c\""),
        ("not a url", "not a url"),
    ];
    for (endpoint, needle) in cases {
        let err = build_otlp_reader(
            &OtlpConfig::new(endpoint, OtlpProtocol::HttpProtobuf),
            Default::default(),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(err.contains(endpoint) && err.contains(needle), "{err}");
    }
    let mut cfg = OtlpConfig::new("http://127.0.0.1:1", OtlpProtocol::Grpc);
    cfg.set_header("x-key-bin", "AAEC");
    let err = build_otlp_reader(&cfg, Default::default()).err().unwrap().to_string();
    assert!(err.contains("\"x-key-bin\""), "{err}");
    let mut cfg = OtlpConfig::new("http://127.0.0.1:1/v1/metrics", OtlpProtocol::HttpProtobuf);
    cfg.set_header("bad name", "v");
    let err = build_otlp_reader(&cfg, Default::default()).err().unwrap().to_string();
    assert!(err.contains("\"bad name\""), "{err}");
    cfg.headers.clear();
    cfg.interval = Duration::ZERO;
    let err = build_otlp_reader(&cfg, Default::default()).err().unwrap().to_string();
    assert_eq!(err, "OTLP interval must be greater than zero");
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn endpoint(protocol: OtlpProtocol, port: u16) -> String {
    metrics_endpoint_from_base(&format!("http://127.0.0.1:{port}"), protocol)
}

/// kiln builds and drops telemetry inside actix's runtimes: neither may panic, and the
/// final export at drop (collector absent: connection refused) must not block for long.
#[test]
fn build_and_drop_inside_a_tokio_runtime() {
    for protocol in [OtlpProtocol::HttpProtobuf, OtlpProtocol::Grpc] {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut cfg = OtlpConfig::new(endpoint(protocol, free_port()), protocol);
            cfg.timeout = Duration::from_millis(500);
            let reader = build_otlp_reader(&cfg, Default::default()).unwrap();
            let t = build_telemetry_with_readers(&config("vllm:"), vec![reader]).unwrap();
            t.provider.as_ref().unwrap().force_flush().unwrap();
            let started = Instant::now();
            drop(t);
            assert!(started.elapsed() < Duration::from_secs(5), "{protocol}");
        });
    }
}

/// A collector that accepts connections and never answers: each export gives up after
/// about `timeout`, on the reader's thread, while recording goes on unhindered.
#[test]
fn a_silent_collector_costs_recording_nothing() {
    for protocol in [OtlpProtocol::HttpProtobuf, OtlpProtocol::Grpc] {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut cfg = OtlpConfig::new(endpoint(protocol, port), protocol);
        cfg.timeout = Duration::from_secs(2);
        cfg.interval = Duration::from_secs(3600);
        let reader = build_otlp_reader(&cfg, Default::default()).unwrap();
        let t = build_telemetry_with_readers(&config("vllm:"), vec![reader]).unwrap();
        let provider = t.provider.clone().unwrap();
        let flush = std::thread::spawn(move || {
            let started = Instant::now();
            provider.force_flush().map(|()| started.elapsed())
        });
        // The export is in flight once the exporter has connected.
        let (_conn, _) = listener.accept().unwrap();
        let counter = t.provider.as_ref().unwrap().meter("test").u64_counter("c").build();
        let started = Instant::now();
        for _ in 0..10_000 {
            counter.add(1, &[]);
        }
        let recording = started.elapsed();
        assert!(
            !flush.is_finished(),
            "{protocol}: export did not wait for the collector"
        );
        let took = flush.join().unwrap().unwrap();
        assert!(recording < Duration::from_millis(500), "{protocol}: {recording:?}");
        assert!(
            took >= Duration::from_millis(1500) && took < Duration::from_secs(6),
            "{protocol}: export took {took:?} with a 2 s timeout"
        );
    }
}
