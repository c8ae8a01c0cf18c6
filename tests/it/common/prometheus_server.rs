//! A real Prometheus server (`KILN_TEST_PROMETHEUS`) scraping test targets every second, and
//! instant PromQL queries against it.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// A Prometheus process with its own storage; killed when dropped.
pub struct PrometheusServer {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl PrometheusServer {
    /// Starts Prometheus scraping `targets` (host:port) as job `job` every second.
    pub fn start(job: &str, targets: &[String]) -> Self {
        let binary = std::env::var("KILN_TEST_PROMETHEUS").expect("set KILN_TEST_PROMETHEUS");
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("prometheus.yml");
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: {job}\n    static_configs:\n      - targets: [{}]\n",
                targets.join(", ")
            ),
        )
        .expect("config");
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus");
        PrometheusServer { child, port, _dir: dir }
    }

    /// The instant query's result vector (`[]` while Prometheus is starting or has no data);
    /// panics on a query Prometheus rejects, so a broken query never passes for "no data yet".
    pub fn query(&self, client: &reqwest::blocking::Client, query: &str) -> Vec<Value> {
        let Ok(resp) = client
            .get(format!("http://127.0.0.1:{}/api/v1/query", self.port))
            .query(&[("query", query)])
            .send()
        else {
            return Vec::new();
        };
        let body: Value = resp.json().expect("Prometheus answers JSON");
        assert_ne!(body["status"], "error", "Prometheus rejected {query}: {body}");
        body["data"]["result"].as_array().cloned().unwrap_or_default()
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
