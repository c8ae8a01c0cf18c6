//! opentelemetry-otlp re-reads `OTEL_EXPORTER_OTLP_HEADERS` when it builds the exporter and
//! lets it override headers given in code; kiln's headers (its `--otlp-header` flags, applied
//! after the environment) must still win. Its own test binary: it sets a process variable.
//! The "collector" is a plain socket that records the request head and answers 200.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;

use kiln::otlp::{OtlpConfig, OtlpProtocol};
use kiln::stats::exporter::{TelemetryConfig, build_telemetry_with_readers};
use kiln::stats::otlp_push::build_otlp_reader;

#[test]
fn config_headers_win_over_the_exporters_own_env_read() {
    // SAFETY: the only test in this binary, and no other thread runs yet.
    unsafe { std::env::set_var("OTEL_EXPORTER_OTLP_HEADERS", "x-kiln-token=from-env,x-env-only=e") };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut head = Vec::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                break;
            }
            head.push(line.trim_end().to_ascii_lowercase());
        }
        let mut stream = stream;
        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
        tx.send(head).unwrap();
    });
    let mut cfg = OtlpConfig::new(
        format!("http://127.0.0.1:{port}/v1/metrics"),
        OtlpProtocol::HttpProtobuf,
    );
    cfg.set_header("X-Kiln-Token", "from-flag");
    let reader = build_otlp_reader(&cfg, Default::default()).unwrap();
    let t = build_telemetry_with_readers(&TelemetryConfig::default(), vec![reader]).unwrap();
    t.provider.as_ref().unwrap().force_flush().unwrap();
    let head = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(head[0], "post /v1/metrics http/1.1");
    let tokens: Vec<&String> = head.iter().filter(|h| h.starts_with("x-kiln-token:")).collect();
    assert_eq!(tokens, ["x-kiln-token: from-flag"], "{head:#?}");
    assert!(head.iter().any(|h| h == "x-env-only: e"), "{head:#?}");
}
