//! CR/LF in what a client sends (the request path, a header, the model name) cannot forge a
//! log line: a real `kiln` process logging at debug (access log included) gets such
//! requests, and no line of its log starts with the forged text.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::json;

use crate::common::process::{KilnProcess, Launch};

const FORGED: &str = "FORGED log line";

/// Sends `raw` bytes as they are and returns the status line of the answer (empty when the
/// server closed without one).
fn send_raw(kiln: &KilnProcess, raw: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", kiln.port)).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    stream.write_all(raw.as_bytes()).expect("write");
    let mut answer = Vec::new();
    // The server answers and closes (a malformed request cannot be followed by another).
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).lines().next().unwrap_or("").to_owned()
}

#[test]
fn cr_lf_in_a_path_a_header_or_a_model_name_cannot_forge_a_log_line() {
    let kiln = Launch::default().env("RUST_LOG", "debug").start();

    // Raw CR/LF in the request line and in a header: refused by the HTTP parser.
    let raw_requests = [
        format!("GET /v1/models\r\n{FORGED} HTTP/1.1\r\nHost: x\r\n\r\n"),
        format!("GET /v1/models\r{FORGED} HTTP/1.1\r\nHost: x\r\n\r\n"),
        format!("GET /v1/models HTTP/1.1\r\nHost: x\r\nUser-Agent: a\r{FORGED}\r\n\r\n"),
        format!("GET /v1/models HTTP/1.1\r\nHost: x\r\nUser-Agent: a\r\n{FORGED}\r\n\r\n"),
    ];
    for raw in &raw_requests {
        let status = send_raw(&kiln, raw);
        assert!(
            status.is_empty() || status.starts_with("HTTP/1.1 400"),
            "{raw:?}: {status}"
        );
    }

    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    // Percent-encoded in the path (a raw CR/LF cannot be sent there).
    let resp = client
        .get(kiln.url("/v1/%0D%0AFORGED%20log%20line"))
        .send()
        .expect("request");
    assert_eq!(resp.status().as_u16(), 404);
    // A header value cannot hold CR/LF either: the encoded form, and other control bytes.
    let resp = client
        .get(kiln.url("/v1/models"))
        .header("user-agent", format!("a%0D%0A{FORGED}\tend"))
        .send()
        .expect("request");
    assert_eq!(resp.status().as_u16(), 200);
    // The model name is JSON, so it can hold a real CR/LF.
    let body = json!({"model": format!("x\r\n{FORGED}\n{FORGED}"), "prompt": "hi", "max_tokens": 1});
    let resp = client
        .post(kiln.url("/v1/completions"))
        .json(&body)
        .send()
        .expect("request");
    assert_eq!(resp.status().as_u16(), 404);
    let v: serde_json::Value = resp.json().expect("json");
    assert_eq!(v["error"]["code"], "model_not_found");

    let logs = kiln.logs();
    // The client's strings were logged (escaped), so the check below has something to catch.
    assert!(
        logs.contains(r#"requested_model="x\r\nFORGED log line\nFORGED log line""#),
        "{logs}"
    );
    assert!(logs.contains(r#"path="/v1/%0D%0AFORGED%20log%20line""#), "{logs}");
    assert!(logs.contains(r#"user_agent="a%0D%0AFORGED log line\tend""#), "{logs}");
    for line in logs.lines() {
        assert!(
            !line.trim_start().starts_with("FORGED"),
            "a forged log line: {line:?}\n{logs}"
        );
    }
}
