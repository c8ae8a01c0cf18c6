//! Draining, against the real `kiln` binary: on SIGTERM it stops accepting, `/ready` turns
//! 503 (or the port refuses), running requests finish within the grace period or end with a
//! clear error, and the process exits 0.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use kiln::testing::{TinyModelSpec, write_tiny_model};
use serde_json::json;

/// A `kiln serve` process on a tiny model, killed if a test fails before it exits.
struct Kiln {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Kiln {
    fn start(grace_s: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let spec = TinyModelSpec {
            context: 4096,
            ..TinyModelSpec::default()
        };
        let model = write_tiny_model(dir.path(), spec).expect("tiny model");
        let port = free_port();
        let log = dir.path().join("kiln.log");
        let child = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(["serve", "--model"])
            .arg(&model)
            .args(["--port", &port.to_string(), "--kv-cache-memory", "64MiB"])
            .args(["--shutdown-grace-period", grace_s])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(File::create(&log).expect("log file"))
            .spawn()
            .expect("kiln starts");
        let kiln = Self {
            child,
            port,
            log,
            _dir: dir,
        };
        kiln.wait_ready();
        kiln
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `/ready`'s status, `None` when the connection is refused.
    fn ready(&self) -> Option<u16> {
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .expect("client");
        client.get(self.url("/ready")).send().ok().map(|r| r.status().as_u16())
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.ready() != Some(200) {
            assert!(Instant::now() < deadline, "kiln never became ready:\n{}", self.logs());
            thread::sleep(Duration::from_millis(50));
        }
    }

    fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }

    fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "kiln did not exit:\n{}", self.logs());
            thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Kiln {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Starts a long streaming completion and returns once its first event has arrived; the
/// thread returns every `data:` payload.
fn start_long_stream(kiln: &Kiln) -> thread::JoinHandle<Vec<String>> {
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

fn assert_not_ready_after_sigterm(kiln: &Kiln) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while kiln.ready() == Some(200) {
        assert!(Instant::now() < deadline, "/ready stayed 200 after SIGTERM");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_lets_running_requests_finish_then_exits_0() {
    let mut kiln = Kiln::start("60");
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
    let mut kiln = Kiln::start("0");
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
