//! What the benchmark examples read from a running server besides its answers: the model it
//! serves, its `/metrics` counter sums, and (from /proc) a process's resident memory. Included
//! with `#[path]` by each example that needs it; not every example uses every function.

#![allow(dead_code)]

use std::collections::HashMap;
use std::time::Duration;

use reqwest::blocking::Client;
use serde_json::Value;

// The server a benchmark talks to, flattened into each example's flags (a plain comment: a doc
// comment would become each example's `--help` description).
#[derive(clap::Args)]
pub struct ServerArgs {
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub base_url: String,
    /// Default: the server's first model.
    #[arg(long)]
    pub model: Option<String>,
}

/// A client that opens a fresh connection per request, and the model to ask for.
///
/// Fresh connections because a pooled keep-alive connection that the server has timed out
/// (llama-server closes idle ones after 5 s) would fail a request that never reached it, the
/// loopback connect costs far less than any request, and dropping a response mid-body then
/// closes its connection, which is how the server learns of an abort.
pub fn connect(server: &ServerArgs, timeout: Duration) -> anyhow::Result<(Client, String)> {
    let client = Client::builder().timeout(timeout).pool_max_idle_per_host(0).build()?;
    let model = match &server.model {
        Some(m) => m.clone(),
        None => first_model(&client, &server.base_url)?,
    };
    Ok((client, model))
}

/// The first model `/v1/models` lists.
pub fn first_model(client: &Client, base: &str) -> anyhow::Result<String> {
    let models: Value = client.get(format!("{base}/v1/models")).send()?.json()?;
    models["data"][0]["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("no model listed"))
}

/// Counter sums from `/metrics`: by name, and by `name{reason}` for series with a
/// `finished_reason` label.
pub fn scrape(client: &Client, base: &str) -> anyhow::Result<HashMap<String, f64>> {
    let text = client
        .get(format!("{base}/metrics"))
        .send()?
        .error_for_status()?
        .text()?;
    let mut sums = HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(v) = value.parse::<f64>() else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series);
        *sums.entry(name.to_string()).or_default() += v;
        if let Some(rest) = series.split_once("finished_reason=\"").map(|(_, r)| r)
            && let Some((reason, _)) = rest.split_once('"')
        {
            *sums.entry(format!("{name}{{{reason}}}")).or_default() += v;
        }
    }
    Ok(sums)
}

/// Resident memory of `pid` in MiB (VmRSS of /proc/PID/status).
pub fn rss_mib(pid: Option<u32>) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid?)).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
