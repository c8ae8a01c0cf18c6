//! A vLLM user's traces flags must not fail quietly (issue 29, item 7): the OTLP port and
//! protocol must agree or `kiln serve` refuses to start, and a collector that answers every
//! export with an error shows on `/metrics` as `kiln_otlp_span_exports_total{result="failure"}`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;

use crate::common::process::{KilnProcess, Launch};
use crate::common::wait::wait_until;

/// A collector on a real socket that reads each HTTP request and answers 503; counts them.
struct RefusingCollector {
    port: u16,
    refused: Arc<AtomicUsize>,
}

impl RefusingCollector {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let refused = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&refused);
        // The thread serves until the test process ends.
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                if refuse(stream).is_ok() {
                    count.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        Self { port, refused }
    }

    fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }
}

/// Reads one request (headers and `content-length` body) and answers 503.
fn refuse(stream: TcpStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    let mut stream = stream;
    stream.write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
}

fn series(kiln: &KilnProcess, name: &str) -> f64 {
    let text = kiln.client.get(kiln.url("/metrics")).send().unwrap().text().unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{name} missing:\n{text}"))
}

#[test]
fn a_collector_that_answers_every_export_with_an_error_is_counted_as_failures() {
    let collector = RefusingCollector::start();
    let kiln = Launch::default()
        .arg(
            "--otlp-traces-endpoint",
            &format!("http://127.0.0.1:{}/v1/traces", collector.port),
        )
        .start();
    let failures = "kiln_otlp_span_exports_total{result=\"failure\"}";
    let successes = "kiln_otlp_span_exports_total{result=\"success\"}";
    assert_eq!(series(&kiln, failures), 0.0);
    for _ in 0..3 {
        let body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
        let resp = kiln
            .client
            .post(kiln.url("/v1/chat/completions"))
            .header("traceparent", "00-77777777777777777777777777777777-8888888888888888-01")
            .json(&body)
            .send()
            .expect("request");
        assert_eq!(resp.status().as_u16(), 200, "serving does not depend on the collector");
    }
    wait_until("a refused export to be counted", || series(&kiln, failures) >= 1.0);
    assert!(collector.refused() >= 1, "the exports reached the collector");
    assert_eq!(series(&kiln, successes), 0.0);
}

#[test]
fn a_protocol_that_disagrees_with_the_otlp_port_stops_startup() {
    let cases = [
        (
            "http://127.0.0.1:4317/v1/traces",
            "http/protobuf",
            "port 4317 is OTLP's grpc port",
        ),
        (
            "http://127.0.0.1:4318",
            "grpc",
            "port 4318 is OTLP's http/protobuf port",
        ),
    ];
    for (endpoint, protocol, message) in cases {
        let mut kiln = Launch::default()
            .arg("--otlp-traces-endpoint", endpoint)
            .arg("--otlp-traces-protocol", protocol)
            .spawn();
        let status = kiln.wait_exit(Duration::from_secs(30));
        let logs = kiln.logs();
        assert!(!status.success(), "{endpoint} over {protocol}: {status}\n{logs}");
        assert!(logs.contains(message), "{endpoint} over {protocol}:\n{logs}");
        assert!(logs.contains("--otlp-traces-protocol"), "{logs}");
    }
}

#[test]
fn the_grpc_port_without_a_protocol_exports_over_grpc_as_vllm_does() {
    let kiln = Launch::default()
        .arg("--otlp-traces-endpoint", "http://127.0.0.1:4317")
        .start();
    let logs = kiln.logs();
    let line = logs
        .lines()
        .find(|l| l.contains("exporting request spans over OTLP"))
        .unwrap_or_else(|| panic!("no exporter line:\n{logs}"));
    assert!(
        line.contains("protocol=\"grpc\"") || line.contains("protocol=grpc"),
        "{line}"
    );
}
