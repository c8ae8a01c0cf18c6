//! Closed-loop completion load and the paired-round comparison the cost benchmarks share:
//! two configurations measured in alternating rounds (so drift in the machine's load hits
//! both alike), the cost as the median difference and as the mean of per-round differences
//! with its ~95 % interval. Each run is measured twice: output tokens per second of wall
//! time, and output tokens per second of this process's CPU time (server and clients), which
//! other tenants of a shared machine disturb far less. Included with `#[path]` by the
//! examples that compare costs.

use std::time::Instant;

use kiln::testing::TestServer;
use serde_json::{Value, json};

/// One run's figures.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// Output tokens per second of wall time.
    pub tok_s: f64,
    /// Output tokens per second of this process's CPU time (user + system).
    pub tok_per_cpu_s: f64,
}

/// This process's CPU time so far, seconds (`/proc/self/stat`, in clock ticks of 1/100 s).
fn process_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which may hold spaces) start after its `)`.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// `clients × per_client` completions, each client sending its requests one after another;
/// `body(client, i)` makes each request's body.
pub fn completions_load(
    server: &TestServer,
    clients: usize,
    per_client: usize,
    body: impl Fn(usize, usize) -> Value + Sync,
) -> Load {
    let (start, cpu_start) = (Instant::now(), process_cpu_seconds());
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
    Load {
        tok_s: tokens as f64 / start.elapsed().as_secs_f64(),
        tok_per_cpu_s: tokens as f64 / (process_cpu_seconds() - cpu_start).max(0.01),
    }
}

/// Both sides' runs, one pair per round.
pub struct PairedRuns {
    pub on: Vec<Load>,
    pub off: Vec<Load>,
}

impl PairedRuns {
    /// Runs `rounds` rounds, alternating which side goes first.
    pub fn run(rounds: usize, mut on: impl FnMut() -> Load, mut off: impl FnMut() -> Load) -> Self {
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

    /// Output tokens per second of wall time.
    pub fn throughput(&self) -> PairedRounds {
        self.compare(|l| l.tok_s)
    }

    /// Output tokens per second of CPU time.
    pub fn cpu_efficiency(&self) -> PairedRounds {
        self.compare(|l| l.tok_per_cpu_s)
    }

    fn compare(&self, figure: fn(&Load) -> f64) -> PairedRounds {
        PairedRounds {
            on: self.on.iter().map(figure).collect(),
            off: self.off.iter().map(figure).collect(),
        }
    }

    /// The throughput figures at the top level, the CPU ones under `cpu_efficiency`.
    pub fn to_json(&self) -> Value {
        let mut report = self.throughput().to_json();
        report["cpu_efficiency"] = self.cpu_efficiency().to_json();
        report
    }
}

/// One figure (higher is better) of the measured side (`on`) and the baseline (`off`), one
/// pair per round.
pub struct PairedRounds {
    pub on: Vec<f64>,
    pub off: Vec<f64>,
}

impl PairedRounds {
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
