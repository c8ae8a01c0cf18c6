//! Closed-loop completion load and the paired-round comparison the cost benchmarks share:
//! two configurations measured in alternating rounds (so drift in the machine's load hits
//! both alike), the cost as the median difference and as the mean of per-round differences
//! with its ~95 % interval. Included with `#[path]` by the examples that compare costs.

use std::time::Instant;

use kiln::testing::TestServer;
use serde_json::{Value, json};

/// Output tokens per second of `clients × per_client` completions, each client sending its
/// requests one after another; `body(client, i)` makes each request's body.
pub fn completions_load(
    server: &TestServer,
    clients: usize,
    per_client: usize,
    body: impl Fn(usize, usize) -> Value + Sync,
) -> f64 {
    let start = Instant::now();
    let body = &body;
    let tokens: u64 = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                scope.spawn(move || {
                    let client = reqwest::blocking::Client::new();
                    let mut tokens = 0;
                    for i in 0..per_client {
                        let resp: Value = client
                            .post(server.url("/v1/completions"))
                            .json(&body(c, i))
                            .send()
                            .and_then(|r| r.json())
                            .unwrap_or_default();
                        tokens += resp["usage"]["completion_tokens"].as_u64().unwrap_or(0);
                    }
                    tokens
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(0)).sum()
    });
    tokens as f64 / start.elapsed().as_secs_f64()
}

/// Throughput of the measured side (`on`) and the baseline (`off`), one pair per round.
pub struct PairedRounds {
    pub on: Vec<f64>,
    pub off: Vec<f64>,
}

impl PairedRounds {
    /// Runs `rounds` rounds, alternating which side goes first.
    pub fn run(rounds: usize, mut on: impl FnMut() -> f64, mut off: impl FnMut() -> f64) -> Self {
        let (mut with, mut without) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            if round % 2 == 0 {
                with.push(on());
                without.push(off());
            } else {
                without.push(off());
                with.push(on());
            }
        }
        Self { on: with, off: without }
    }

    pub fn median_on(&self) -> f64 {
        median(&self.on)
    }

    pub fn median_off(&self) -> f64 {
        median(&self.off)
    }

    /// The cost of `on` in % of `off`'s throughput, from the medians.
    pub fn median_cost(&self) -> f64 {
        (self.median_off() - self.median_on()) / self.median_off() * 100.0
    }

    /// Each round's cost in %.
    pub fn paired(&self) -> Vec<f64> {
        self.on
            .iter()
            .zip(&self.off)
            .map(|(on, off)| (off - on) / off * 100.0)
            .collect()
    }

    /// The mean of the rounds' costs and its ~95 % interval (two standard errors).
    pub fn paired_cost(&self) -> (f64, f64) {
        let paired = self.paired();
        let mean = paired.iter().sum::<f64>() / paired.len() as f64;
        let spread = if paired.len() > 1 {
            let var = paired.iter().map(|c| (c - mean).powi(2)).sum::<f64>() / (paired.len() - 1) as f64;
            2.0 * (var / paired.len() as f64).sqrt()
        } else {
            f64::NAN
        };
        (mean, spread)
    }

    /// The figures for a benchmark's JSON.
    pub fn to_json(&self) -> Value {
        let (mean, spread) = self.paired_cost();
        json!({"on_tok_s": self.on, "off_tok_s": self.off, "median_on": self.median_on(),
            "median_off": self.median_off(), "cost_percent": self.median_cost(),
            "paired_cost_percent": self.paired(), "paired_cost_mean": mean, "paired_cost_95ci": spread})
    }
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
