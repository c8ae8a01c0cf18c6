//! The cost of telemetry: the same load against two servers in one run, one with telemetry
//! on and one with it off, alternating rounds; prints a table and writes JSON.
//!
//! ```text
//! cargo run --release --example bench_telemetry -- [--model PATH] [--rounds 3] [--concurrency 8]
//!     [--requests 32] [--max-tokens 32] [--output-json FILE]
//! ```
//! Without `--model` it uses the tiny random model, where per-token engine work is smallest
//! and so telemetry's share is largest (a pessimistic measure).

use std::time::Instant;

use clap::Parser;
use kiln::config::Config;
use kiln::model::loader::open_model;
use kiln::server::prepare_model;
use kiln::testing::{TestServer, TinyModelSpec, write_tiny_model};
use serde_json::json;

#[derive(Parser)]
struct Args {
    #[arg(long)]
    model: Option<String>,
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    #[arg(long, default_value_t = 32)]
    requests: usize,
    #[arg(long, default_value_t = 32)]
    max_tokens: u32,
    #[arg(long)]
    output_json: Option<String>,
}

fn server(model: &str, telemetry: bool) -> anyhow::Result<TestServer> {
    let mut config = Config::default();
    config.model.path = model.to_string();
    config.engine.kv_cache_memory = "256MiB".into();
    config.telemetry.enabled = telemetry;
    let prepared = prepare_model(&config, open_model(std::path::Path::new(model))?)?;
    TestServer::start(config, prepared)
}

/// Output tokens per second of `requests` completions sent by `concurrency` clients.
fn load(server: &TestServer, args: &Args) -> f64 {
    let start = Instant::now();
    let per_client = args.requests / args.concurrency;
    let tokens: u64 = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..args.concurrency)
            .map(|c| {
                scope.spawn(move || {
                    let client = reqwest::blocking::Client::new();
                    let mut tokens = 0;
                    for i in 0..per_client {
                        let body = json!({"prompt": format!("client {c} request {i}:"), "max_tokens": args.max_tokens, "ignore_eos": true});
                        let resp: serde_json::Value = client
                            .post(server.url("/v1/completions"))
                            .json(&body)
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = tempfile::tempdir()?;
    let model = match &args.model {
        Some(m) => m.clone(),
        None => write_tiny_model(dir.path(), TinyModelSpec::default())?
            .display()
            .to_string(),
    };
    let on = server(&model, true)?;
    let off = server(&model, false)?;
    load(&on, &args); // warm-up
    load(&off, &args);
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for round in 0..args.rounds {
        // Alternate the order so drift in machine load hits both sides alike.
        if round % 2 == 0 {
            with.push(load(&on, &args));
            without.push(load(&off, &args));
        } else {
            without.push(load(&off, &args));
            with.push(load(&on, &args));
        }
    }
    let (m_on, m_off) = (median(with.clone()), median(without.clone()));
    let cost = (m_off - m_on) / m_off * 100.0;
    println!("| telemetry | output tok/s (median of {}) | rounds |", args.rounds);
    println!("|---|---|---|");
    println!("| on | {m_on:.1} | {with:.1?} |");
    println!("| off | {m_off:.1} | {without:.1?} |");
    println!("cost of telemetry: {cost:.2} % of throughput");
    if let Some(path) = &args.output_json {
        let report = json!({"model": model, "concurrency": args.concurrency, "requests": args.requests,
            "max_tokens": args.max_tokens, "on_tok_s": with, "off_tok_s": without,
            "median_on": m_on, "median_off": m_off, "cost_percent": cost});
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}
