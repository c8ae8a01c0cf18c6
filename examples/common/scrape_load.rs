//! A scraper at a fixed rate beside a benchmark, as the inference gateway's endpoint picker
//! scrapes each replica (every 50 ms: 20 Hz). Included with `#[path]` by `bench_serving`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What the scraper saw: each successful scrape's latency (s), failures, the last body size.
#[derive(Default)]
pub struct ScrapeLoad {
    pub latencies: Vec<f64>,
    pub failures: usize,
    pub body_bytes: usize,
}

/// GETs `url` `hz` times a second on one kept-alive connection until `stop` is set.
pub fn scrape_at(url: &str, hz: f64, stop: &AtomicBool) -> ScrapeLoad {
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("scrape client");
    let period = Duration::from_secs_f64(1.0 / hz);
    let mut load = ScrapeLoad::default();
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        match client
            .get(url)
            .send()
            .and_then(|r| r.error_for_status())
            .and_then(|r| r.bytes())
        {
            Ok(body) => {
                load.latencies.push(start.elapsed().as_secs_f64());
                load.body_bytes = body.len();
            }
            Err(_) => load.failures += 1,
        }
        next += period;
        // The scrape schedule (a fixed rate), not synchronisation.
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    load
}
