//! Draining, against the real `kiln` binary: on SIGTERM it stops accepting, `/ready` turns
//! 503 (or the port refuses), running requests finish within the grace period or end with a
//! clear error, and the process exits 0.

use std::io::{BufRead, BufReader};
use std::thread;
use std::time::Duration;

use serde_json::json;

use crate::common::process::{KilnProcess, Launch};
use crate::common::wait::wait_until;

/// Starts a long streaming completion and returns once its first event has arrived; the
/// thread returns every `data:` payload.
fn start_long_stream(kiln: &KilnProcess) -> thread::JoinHandle<Vec<String>> {
    let url = kiln.url("/v1/completions");
    let (first_tx, first_rx) = std::sync::mpsc::channel();
    let handle = thread::spawn(move || {
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .expect("client");
        let body = json!({
            "prompt": "a", "max_tokens": 3500, "ignore_eos": true, "stream": true, "n": 4,
        });
        let resp = client.post(url).json(&body).send().expect("request");
        assert_eq!(resp.status().as_u16(), 200);
        let mut events = Vec::new();
        for line in BufReader::new(resp).lines() {
            let Ok(line) = line else { break };
            if let Some(data) = line.strip_prefix("data: ") {
                if events.is_empty() {
                    let _ = first_tx.send(());
                }
                events.push(data.to_string());
            }
        }
        let _ = first_tx.send(());
        events
    });
    first_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the stream starts");
    handle
}

fn assert_not_ready_after_sigterm(kiln: &KilnProcess) {
    wait_until("/ready to stop answering 200 after SIGTERM", || {
        kiln.ready() != Some(200)
    });
}

#[test]
fn sigterm_lets_running_requests_finish_then_exits_0() {
    let mut kiln = Launch::default().arg("--shutdown-grace-period", "60").start();
    let stream = start_long_stream(&kiln);
    kiln.sigterm();
    assert_not_ready_after_sigterm(&kiln);
    let events = stream.join().expect("stream");
    let status = kiln.wait_exit(Duration::from_secs(90));
    let logs = kiln.logs();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{logs}");
    assert!(
        events.iter().all(|e| !e.contains("\"error\"")),
        "the request finished within the grace period: {:?}\n{logs}",
        events.iter().rev().take(3).collect::<Vec<_>>()
    );
    assert!(status.success(), "exit status {status:?}\n{logs}");
    assert!(logs.contains("shutting down"), "{logs}");
}

#[test]
fn sigterm_past_the_grace_period_aborts_with_a_clear_error_then_exits_0() {
    let mut kiln = Launch::default().arg("--shutdown-grace-period", "0").start();
    let stream = start_long_stream(&kiln);
    kiln.sigterm();
    let events = stream.join().expect("stream");
    let status = kiln.wait_exit(Duration::from_secs(30));
    let logs = kiln.logs();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{logs}");
    let error = &events[events.len() - 2];
    assert!(error.contains("shutting down"), "{error}\n{logs}");
    assert!(status.success(), "exit status {status:?}\n{logs}");
}
