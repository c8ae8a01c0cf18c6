//! What the soak reads from the server beyond `common/server_probe.rs`: `/metrics` once the
//! server is idle.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use reqwest::blocking::Client;
use serde_json::Value;

use crate::server_probe::scrape;

/// Waits until `/load` reports nothing running, waiting or swapped, then scrapes until two
/// scrapes agree (the stats reach the exporter a moment after the scheduler lets go).
/// `prefix`: that of the engine metrics; `idle_timeout`: the longest wait for idle.
pub fn idle_scrape(
    client: &Client,
    base: &str,
    prefix: &str,
    idle_timeout: Duration,
) -> anyhow::Result<HashMap<String, f64>> {
    let deadline = Instant::now() + idle_timeout;
    loop {
        let load: Value = client.get(format!("{base}/load")).send()?.json()?;
        let busy = ["running", "waiting", "swapped"]
            .iter()
            .any(|k| load[k].as_u64().unwrap_or(0) > 0);
        if !busy {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "server still busy after the idle timeout: {load}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut last = scrape(client, base)?;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let next = scrape(client, base)?;
        let settled = [
            "request_success_total",
            "prompt_tokens_total",
            "generation_tokens_total",
        ]
        .iter()
        .all(|k| {
            let key = format!("{prefix}{k}");
            last.get(&key) == next.get(&key)
        });
        last = next;
        if settled {
            break;
        }
    }
    Ok(last)
}
