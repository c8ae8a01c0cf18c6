//! Request traces over OTLP, end to end: the real `kiln` binary exports to a real rotel
//! receiver (`--debug-log traces` prints every span it receives), over http/protobuf and grpc.

use std::fs::File;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::process::{KilnProcess, Launch, free_port};
use crate::common::tool;

const DEADLINE: Duration = Duration::from_secs(30);

/// Polls `cond` every 50 ms until it holds; panics with `what` at the deadline.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// rotel printing the spans it receives; killed when dropped.
struct Rotel {
    child: Child,
    out: PathBuf,
    port: u16,
}

impl Rotel {
    fn start(dir: &Path, grpc: bool) -> Self {
        let (grpc_port, http_port) = (free_port(), free_port());
        let out = dir.join("rotel.out");
        let file = File::create(&out).unwrap();
        let child = Command::new(tool("KILN_TEST_ROTEL"))
            .arg("start")
            .args(["--otlp-grpc-endpoint", &format!("127.0.0.1:{grpc_port}")])
            .args(["--otlp-http-endpoint", &format!("127.0.0.1:{http_port}")])
            .args(["--exporter", "blackhole", "--debug-log", "traces"])
            .args(["--debug-log-verbosity", "detailed"])
            .arg("--pid-file")
            .arg(dir.join("rotel.pid"))
            .arg("--log-file")
            .arg(dir.join("rotel.log"))
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        let port = if grpc { grpc_port } else { http_port };
        wait_for("rotel to listen", || TcpStream::connect(("127.0.0.1", port)).is_ok());
        Self { child, out, port }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }
}

impl Drop for Rotel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
#[ignore = "needs rotel (KILN_TEST_ROTEL)"]
fn probe_output() {
    let dir = tempfile::tempdir().unwrap();
    let rotel = Rotel::start(dir.path(), false);
    let kiln = Launch::default()
        .arg("--otlp-traces-endpoint", &format!("http://127.0.0.1:{}/v1/traces", rotel.port))
        .start();
    let resp = kiln
        .client
        .post(kiln.url("/v1/chat/completions"))
        .header("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        .header("x-request-id", "my-req-1")
        .json(&json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "n": 2}))
        .send()
        .unwrap();
    println!("{:?}", resp.headers());
    let body: Value = resp.json().unwrap();
    println!("{body}");
    std::thread::sleep(Duration::from_secs(3));
    println!("ROTEL:\n{}", rotel.output());
    println!("KILN:\n{}", kiln.logs());
    let _ = (kiln as KilnProcess).port;
}
