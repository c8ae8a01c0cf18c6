//! What the soak reads from the server beyond `common/server_probe.rs`: `/metrics` once the
//! server is idle, and the CPU it runs on.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use reqwest::blocking::Client;
use serde_json::{Value, json};

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

/// The CPU model and its SIMD flags, so figures from different machines are not confused.
pub fn cpu_info() -> Value {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let flags = field("flags").or_else(|| field("Features")).unwrap_or_default();
    let simd: Vec<&str> = [
        "sse4_2",
        "avx",
        "avx2",
        "fma",
        "f16c",
        "avx512f",
        "avx512bw",
        "avx512_vnni",
        "avx_vnni",
        "amx_tile",
        "asimd",
        "asimdhp",
        "sve",
    ]
    .into_iter()
    .filter(|f| flags.split_whitespace().any(|x| x == *f))
    .collect();
    let threads = std::thread::available_parallelism().map_or(0, |n| n.get());
    json!({"model": field("model name"), "threads": threads, "simd_flags": simd})
}
