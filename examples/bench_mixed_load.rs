//! Mixed load (issue 31): a background of long prompts (each with `n` choices) and, while they
//! run, a foreground of short chats one after another plus decode streams. Against any
//! OpenAI-compatible server (kiln, llama.cpp's `llama-server`), so both are measured the same way.
//!
//! ```text
//! cargo run --release --example bench_mixed_load -- --base-url http://127.0.0.1:8000 \
//!     [--long-prompts 4] [--long-len 6000] [--long-n 1] [--short-len 5] [--short-output 4] \
//!     [--streams 2] [--stream-output 64] [--output-json FILE]
//! ```
//! Reports the short requests' TTFT p50/p99 while the long prompts run, the decode streams'
//! ITL p99, and the long prompts' throughput (prompt tokens per second of wall time until the
//! last one finished), as a table and JSON with the CPU it ran on.

#[path = "common/cpu_info.rs"]
mod cpu_info;
#[path = "common/server_probe.rs"]
mod server_probe;
#[path = "common/stream_client.rs"]
mod stream_client;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{Value, json};
use stream_client::Outcome;

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    server: server_probe::ServerArgs,
    /// Background requests with a long prompt, all sent at the start.
    #[arg(long, default_value_t = 4)]
    long_prompts: usize,
    /// Their prompt length in words (about one token each).
    #[arg(long, default_value_t = 6000)]
    long_len: usize,
    /// Choices per long request (`n`).
    #[arg(long, default_value_t = 1)]
    long_n: usize,
    #[arg(long, default_value_t = 5)]
    short_len: usize,
    #[arg(long, default_value_t = 4)]
    short_output: usize,
    /// Streams that decode the whole time (their inter-token latency is the ITL figure).
    #[arg(long, default_value_t = 2)]
    streams: usize,
    #[arg(long, default_value_t = 64)]
    stream_output: usize,
    #[arg(long)]
    output_json: Option<String>,
}

const WORDS: [&str; 16] = [
    "the", "river", "stone", "quiet", "market", "lamp", "winter", "garden", "signal", "paper", "orbit", "copper",
    "harbor", "maple", "engine", "violet",
];

fn words(n: usize, salt: usize) -> String {
    (0..n)
        .map(|k| WORDS[(salt * 7 + k * 13 + k / 16) % 16])
        .collect::<Vec<_>>()
        .join(" ")
}

/// One streamed completion at `base`.
fn stream(client: &reqwest::blocking::Client, base: &str, body: Value) -> Outcome {
    stream_client::stream(client, &format!("{base}/v1/completions"), &body)
}

fn body(model: &str, prompt: String, max_tokens: usize, n: usize) -> Value {
    json!({
        "model": model, "prompt": prompt, "max_tokens": max_tokens, "n": n, "stream": true,
        "stream_options": {"include_usage": true}, "temperature": 0.0, "ignore_eos": true,
    })
}

/// The 1, 5 and 15-minute load averages (empty where /proc is missing): the machine is shared.
fn load_average() -> Vec<String> {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).map(str::to_string).collect()
}

fn percentiles(mut v: Vec<f64>) -> Value {
    if v.is_empty() {
        return json!({"count": 0, "p50_ms": null, "p99_ms": null});
    }
    v.sort_by(f64::total_cmp);
    let p = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize] * 1e3;
    json!({"count": v.len(), "p50_ms": p(0.5), "p99_ms": p(0.99), "max_ms": v[v.len() - 1] * 1e3})
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (client, model) = server_probe::connect(&args.server, Duration::from_secs(3600))?;
    let base = args.server.base_url.as_str();
    let model = model.as_str();
    let load_at_start = load_average();
    let longs_done = AtomicBool::new(false);
    let start = Instant::now();
    let (longs, shorts, streams, long_wall) = std::thread::scope(|scope| {
        let long_handles: Vec<_> = (0..args.long_prompts)
            .map(|i| {
                let b = body(model, words(args.long_len, i), 1, args.long_n);
                let client = &client;
                scope.spawn(move || stream(client, base, b))
            })
            .collect();
        let stream_handles: Vec<_> = (0..args.streams)
            .map(|i| {
                let (client, done) = (&client, &longs_done);
                let (len, out) = (args.short_len, args.stream_output);
                scope.spawn(move || {
                    let mut all = Vec::new();
                    while !done.load(Ordering::Relaxed) {
                        all.push(stream(client, base, body(model, words(len, 1000 + i), out, 1)));
                    }
                    all
                })
            })
            .collect();
        let short_handle = {
            let (client, done) = (&client, &longs_done);
            let (len, out) = (args.short_len, args.short_output);
            scope.spawn(move || {
                let mut all = Vec::new();
                let mut k = 0;
                while !done.load(Ordering::Relaxed) {
                    all.push(stream(client, base, body(model, words(len, 2000 + k), out, 1)));
                    k += 1;
                }
                all
            })
        };
        let longs: Vec<Outcome> = long_handles.into_iter().map(|h| h.join().unwrap_or_default()).collect();
        let long_wall = start.elapsed().as_secs_f64();
        longs_done.store(true, Ordering::Relaxed);
        let shorts = short_handle.join().unwrap_or_default();
        let streams: Vec<Outcome> = stream_handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect();
        (longs, shorts, streams, long_wall)
    });
    let errors: Vec<String> = longs
        .iter()
        .chain(&shorts)
        .chain(&streams)
        .filter_map(|t| t.error.clone())
        .collect();
    let long_prompt_tokens: u64 = longs.iter().map(|t| t.input_tokens).sum();
    let report = json!({
        "base_url": args.server.base_url, "model": model, "cpu": cpu_info::cpu_info(),
        "long_prompts": args.long_prompts, "long_len_words": args.long_len, "long_n": args.long_n,
        "long_prompt_tokens": long_prompt_tokens, "long_wall_s": long_wall,
        "long_prompt_tokens_per_s": long_prompt_tokens as f64 / long_wall,
        "short_ttft": percentiles(shorts.iter().filter(|t| t.ok).map(|t| t.ttft).collect()),
        "stream_itl": percentiles(streams.iter().flat_map(|t| t.itls.clone()).collect()),
        "errors": errors,
        "load_average": load_at_start, "load_average_end": load_average(),
    });
    let ms = |v: &Value| v.as_f64().map_or("-".into(), |x| format!("{x:.0}"));
    println!("| figure | value |\n|---|---|");
    println!("| long prompts x n | {} x {} |", args.long_prompts, args.long_n);
    println!("| long prompt tokens (usage) | {long_prompt_tokens} |");
    println!("| long prompts wall s | {long_wall:.1} |");
    println!(
        "| long prompt tokens/s | {:.1} |",
        long_prompt_tokens as f64 / long_wall
    );
    let s = &report["short_ttft"];
    println!(
        "| short TTFT p50 / p99 / max ms ({} requests) | {} / {} / {} |",
        s["count"],
        ms(&s["p50_ms"]),
        ms(&s["p99_ms"]),
        ms(&s["max_ms"])
    );
    let s = &report["stream_itl"];
    println!(
        "| stream ITL p50 / p99 / max ms ({} gaps) | {} / {} / {} |",
        s["count"],
        ms(&s["p50_ms"]),
        ms(&s["p99_ms"]),
        ms(&s["max_ms"])
    );
    println!("| errors | {} |", report["errors"].as_array().map_or(0, Vec::len));
    if let Some(path) = &args.output_json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}
