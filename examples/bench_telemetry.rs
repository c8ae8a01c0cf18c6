//! The cost of telemetry: the same load against two servers in one run, one with telemetry
//! on and one with it off, alternating rounds; prints a table and writes JSON.
//!
//! ```text
//! cargo run --release --example bench_telemetry -- [--model PATH] [--rounds 3] [--concurrency 8]
//!     [--requests 32] [--max-tokens 32] [--output-json FILE]
//! ```
//! Without `--model` it uses the tiny random model, where per-token engine work is smallest
//! and so telemetry's share is largest (a pessimistic measure).
//!
//! `--collector hung|failing` also has the telemetry-on server push OTLP every second to a
//! collector on loopback that accepts connections and never answers, or answers every export
//! with 500: serving must not notice, and the process's resident memory is recorded before and
//! after to show nothing piles up.

#[path = "common/server_probe.rs"]
mod server_probe;

use server_probe::rss_mib;

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
    /// A broken OTLP collector for the telemetry-on server to push to.
    #[arg(long, value_enum, default_value_t = Collector::None)]
    collector: Collector,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Collector {
    /// No OTLP push.
    None,
    /// Accepts connections and never answers.
    Hung,
    /// Answers every export with 500.
    Failing,
}

/// Starts a broken collector on loopback; its URL.
fn broken_collector(kind: Collector) -> anyhow::Result<String> {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let url = format!("http://{}/v1/metrics", listener.local_addr()?);
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            if kind == Collector::Hung {
                held.push(stream); // never read, never answered
                continue;
            }
            let mut stream = stream;
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                // One read takes the (small) export; answer it, then close.
                let _ = stream.read(&mut buf);
                let _ = stream
                    .write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            });
        }
    });
    Ok(url)
}

/// This process's resident memory in KiB, for the memory-stays-bounded figure.
fn resident_kib() -> Option<u64> {
    rss_mib(Some(std::process::id())).map(|mib| (mib * 1024.0) as u64)
}

fn server(model: &str, telemetry: bool, otlp_endpoint: Option<&str>) -> anyhow::Result<TestServer> {
    let mut config = Config::default();
    config.model.path = model.to_string();
    config.engine.kv_cache_memory = "256MiB".into();
    config.telemetry.enabled = telemetry;
    if let Some(endpoint) = otlp_endpoint {
        config.telemetry.otlp_endpoint = endpoint.to_string();
        config.telemetry.otlp_interval_s = 1.0;
        config.telemetry.otlp_timeout_s = 2.0;
    }
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
    let collector = match args.collector {
        Collector::None => None,
        kind => Some(broken_collector(kind)?),
    };
    let on = server(&model, true, collector.as_deref())?;
    let off = server(&model, false, None)?;
    load(&on, &args); // warm-up
    load(&off, &args);
    let rss_start = resident_kib();
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
    let rss_end = resident_kib();
    let (m_on, m_off) = (median(with.clone()), median(without.clone()));
    let cost = (m_off - m_on) / m_off * 100.0;
    println!("| telemetry | output tok/s (median of {}) | rounds |", args.rounds);
    println!("|---|---|---|");
    println!("| on | {m_on:.1} | {with:.1?} |");
    println!("| off | {m_off:.1} | {without:.1?} |");
    println!("cost of telemetry: {cost:.2} % of throughput");
    println!(
        "OTLP collector: {:?}; resident memory {} KiB before the rounds, {} KiB after",
        args.collector,
        rss_start.map_or("?".into(), |k| k.to_string()),
        rss_end.map_or("?".into(), |k| k.to_string())
    );
    if let Some(path) = &args.output_json {
        let report = json!({"model": model, "concurrency": args.concurrency, "requests": args.requests,
            "max_tokens": args.max_tokens, "on_tok_s": with, "off_tok_s": without,
            "median_on": m_on, "median_off": m_off, "cost_percent": cost,
            "collector": format!("{:?}", args.collector).to_lowercase(),
            "resident_kib_start": rss_start, "resident_kib_end": rss_end});
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}
