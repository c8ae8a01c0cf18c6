//! The real `kiln` binary as a child process on a tiny model, for tests of what only a
//! process shows: startup, exit codes, signals, logs and resident memory. Killed when dropped.

use std::ffi::OsString;
use std::fs::File;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use kiln::testing::{TinyModelSpec, write_tiny_model};

use super::pki::HttpsClient;
use super::wait::{wait_for, wait_for_within};

/// A `kiln serve` process on a freshly written tiny model, logging to a file.
pub struct KilnProcess {
    child: Child,
    pub port: u16,
    log: PathBuf,
    dir: tempfile::TempDir,
    /// Talks plain HTTP to the process.
    pub client: reqwest::blocking::Client,
    /// Talks HTTPS to it instead, when it serves HTTPS.
    pub https: Option<HttpsClient>,
}

/// How to start one.
pub struct Launch {
    pub spec: TinyModelSpec,
    /// A model file to serve instead of a tiny model written from `spec`.
    pub model: Option<PathBuf>,
    /// Flags after `serve --model M --port P`.
    pub args: Vec<String>,
    pub env: Vec<(String, OsString)>,
    /// Serve HTTPS and talk to it with this client (`None`: plain HTTP).
    pub https_client: Option<HttpsClient>,
    /// Listen here (a restarted replica behind a router keeps its address); `None`: a free port.
    pub port: Option<u16>,
}

impl Default for Launch {
    fn default() -> Self {
        Self {
            spec: TinyModelSpec {
                context: 4096,
                ..TinyModelSpec::default()
            },
            model: None,
            args: ["--kv-cache-memory", "64MiB"].map(String::from).to_vec(),
            env: Vec::new(),
            https_client: None,
            port: None,
        }
    }
}

impl Launch {
    pub fn arg(mut self, flag: &str, value: &str) -> Self {
        self.args.extend([flag.to_string(), value.to_string()]);
        self
    }

    pub fn env(mut self, key: &str, value: impl Into<OsString>) -> Self {
        self.env.push((key.to_string(), value.into()));
        self
    }

    /// Serves HTTPS (the flags are the caller's); `client` trusts its certificate.
    pub fn https(mut self, client: HttpsClient) -> Self {
        self.https_client = Some(client);
        self
    }

    /// Starts the process without waiting for it to become ready.
    pub fn spawn(self) -> KilnProcess {
        let dir = tempfile::tempdir().expect("tempdir");
        let model = match self.model {
            Some(model) => model,
            None => write_tiny_model(dir.path(), self.spec).expect("tiny model"),
        };
        let port = self.port.unwrap_or_else(free_port);
        let log = dir.path().join("kiln.log");
        let child = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(["serve", "--model"])
            .arg(&model)
            .args(["--port", &port.to_string()])
            .args(&self.args)
            .env("RUST_LOG", "info")
            .envs(self.env)
            .stdout(Stdio::null())
            .stderr(File::create(&log).expect("log file"))
            .spawn()
            .expect("kiln starts");
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client");
        KilnProcess {
            child,
            port,
            log,
            dir,
            client,
            https: self.https_client,
        }
    }

    /// Starts the process and waits until `/ready` answers 200.
    pub fn start(self) -> KilnProcess {
        let mut kiln = self.spawn();
        kiln.wait_ready();
        kiln
    }
}

impl KilnProcess {
    pub fn url(&self, path: &str) -> String {
        let scheme = if self.https.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}{path}", self.port)
    }

    /// A scratch folder that lives as long as the process.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A GET's status, `None` when the connection is refused or times out.
    pub fn status_of(&self, path: &str) -> Option<u16> {
        if let Some(https) = &self.https {
            return https
                .request(self.port, "GET", path, None, None)
                .ok()
                .map(|(status, _)| status);
        }
        self.client
            .get(self.url(path))
            .timeout(Duration::from_secs(2))
            .send()
            .ok()
            .map(|r| r.status().as_u16())
    }

    /// A GET's JSON body; panics naming `path` if it cannot be had.
    pub fn get_json(&self, path: &str) -> serde_json::Value {
        self.client
            .get(self.url(path))
            .send()
            .and_then(|r| r.json())
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }

    /// `/ready`'s status, `None` when the connection is refused.
    pub fn ready(&self) -> Option<u16> {
        self.status_of("/ready")
    }

    pub fn wait_ready(&mut self) {
        wait_for("kiln to become ready", || {
            if self.ready() == Some(200) {
                return Ok(());
            }
            let exited = self.child.try_wait().expect("try_wait");
            assert!(
                exited.is_none(),
                "kiln exited while starting ({exited:?}):\n{}",
                self.logs()
            );
            Err(self.logs())
        });
    }

    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }

    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        wait_for_within("kiln to exit", within, || {
            self.child.try_wait().expect("try_wait").ok_or_else(|| self.logs())
        })
    }

    /// Resident memory, from `/proc/PID/status`.
    pub fn resident_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("proc status");
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .expect("VmRSS");
        kib * 1024
    }
}

impl Drop for KilnProcess {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}
