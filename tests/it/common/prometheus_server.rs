//! A real Prometheus server (`KILN_TEST_PROMETHEUS`) scraping test targets every second, and
//! instant PromQL queries against it.

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
        Self::start_with(job, targets, "")
    }

    /// As [`start`](Self::start), with extra YAML keys for the job (each line indented four
    /// spaces, e.g. `    scheme: https`).
    pub fn start_with(job: &str, targets: &[String], job_settings: &str) -> Self {
        Self::launch(job, targets, job_settings, &[])
    }

    /// As [`start`](Self::start), with exemplar storage on (`/api/v1/query_exemplars`).
    pub fn start_with_exemplars(job: &str, targets: &[String]) -> Self {
        Self::launch(job, targets, "", &["--enable-feature=exemplar-storage"])
    }

    /// As [`start`](Self::start), with native histograms on: Prometheus then asks for the
    /// protobuf exposition first.
    pub fn start_with_native_histograms(job: &str, targets: &[String]) -> Self {
        Self::launch(job, targets, "", &["--enable-feature=native-histograms"])
    }

    /// Scrapes several jobs (name, targets) every second; `native` turns native histograms on.
    pub fn start_jobs(jobs: &[(&str, &[String])], native: bool) -> Self {
        let configs: Vec<String> = jobs.iter().map(|(job, targets)| job_config(job, targets, "")).collect();
        let extra: &[&str] = if native {
            &["--enable-feature=native-histograms"]
        } else {
            &[]
        };
        Self::spawn(&configs.concat(), extra)
    }

    fn launch(job: &str, targets: &[String], job_settings: &str, extra_args: &[&str]) -> Self {
        Self::spawn(&job_config(job, targets, job_settings), extra_args)
    }

    fn spawn(scrape_configs: &str, extra_args: &[&str]) -> Self {
        let binary = super::tool("KILN_TEST_PROMETHEUS");
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n{scrape_configs}"),
        )
        .expect("config");
        let port = super::process::free_port();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .args(extra_args)
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

    /// Waits until Prometheus answers its readiness probe (queries fail before that).
    pub fn wait_ready(&self, client: &reqwest::blocking::Client) {
        let ready = format!("http://127.0.0.1:{}/-/ready", self.port);
        super::wait::wait_until("Prometheus ready", || {
            client.get(&ready).send().is_ok_and(|r| r.status().is_success())
        });
    }

    /// The single value of `query`'s instant vector, once it has exactly one series.
    pub fn scalar(&self, client: &reqwest::blocking::Client, query: &str) -> Option<f64> {
        match self.query(client, query).as_slice() {
            [one] => one["value"][1].as_str()?.parse().ok(),
            _ => None,
        }
    }

    /// `/api/v1/query_exemplars` for `query` over the last hour: each exemplar beside its
    /// series' labels (`[]` while Prometheus is starting); panics on a rejected query.
    pub fn query_exemplars(&self, client: &reqwest::blocking::Client, query: &str) -> Vec<(Value, Value)> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        let Ok(resp) = client
            .get(format!("http://127.0.0.1:{}/api/v1/query_exemplars", self.port))
            .query(&[
                ("query", query.to_owned()),
                ("start", (now - 3600).to_string()),
                ("end", (now + 60).to_string()),
            ])
            .send()
        else {
            return Vec::new();
        };
        let Ok(body) = resp.json::<Value>() else {
            return Vec::new();
        };
        assert_ne!(body["status"], "error", "Prometheus rejected {query}: {body}");
        let mut out = Vec::new();
        for series in body["data"].as_array().into_iter().flatten() {
            for exemplar in series["exemplars"].as_array().into_iter().flatten() {
                out.push((series["seriesLabels"].clone(), exemplar.clone()));
            }
        }
        out
    }
}

/// One entry of `scrape_configs`.
fn job_config(job: &str, targets: &[String], job_settings: &str) -> String {
    let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
    format!(
        "  - job_name: {job}\n{job_settings}    static_configs:\n      - targets: [{}]\n",
        targets.join(", ")
    )
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What `promtool check metrics` (Go's own text parser and linter) prints for `exposition`.
pub fn promtool_check_metrics(exposition: &str) -> String {
    use std::io::Write;
    let mut child = Command::new(super::tool("KILN_TEST_PROMTOOL"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(exposition.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("promtool output");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
