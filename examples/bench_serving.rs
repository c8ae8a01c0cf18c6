//! A serving benchmark in the manner of vLLM's `benchmark_serving.py`, against any
//! OpenAI-compatible server (kiln, llama.cpp's `llama-server`, vLLM): streams every request,
//! times each token, prints a table and writes JSON.
//!
//! ```text
//! cargo run --release --example bench_serving -- --base-url http://127.0.0.1:8000 \
//!     [--model NAME] [--endpoint completions|chat] [--num-prompts 64] [--max-concurrency 8]
//!     [--request-rate R --seed S] [--input-len 128] [--output-len 128] [--range-ratio 0.0]
//!     [--ignore-eos] [--dataset prompts.jsonl] [--scrape-metrics] [--scrape-hz 20]
//!     [--body-cycle JSON] [--output-json FILE]
//! ```
//! With `--scrape-metrics` it reads the server's `/metrics` before and after and prints the
//! server's own token counts and latency means beside the client's. With `--scrape-hz R` a
//! scraper GETs `/metrics` R times a second for the whole run, as the inference gateway's
//! endpoint picker does (20 Hz): compare a run with and without it for the scrape's cost.

#[path = "common/server_probe.rs"]
mod server_probe;

#[path = "common/scrape_load.rs"]
mod scrape_load;
#[path = "common/stream_client.rs"]
mod stream_client;

use scrape_load::{ScrapeLoad, scrape_at};
use server_probe::scrape;
use stream_client::Outcome;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

#[derive(Clone, Copy, ValueEnum)]
enum Endpoint {
    Completions,
    Chat,
}

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    server: server_probe::ServerArgs,
    #[arg(long, value_enum, default_value = "completions")]
    endpoint: Endpoint,
    #[arg(long, default_value_t = 64)]
    num_prompts: usize,
    /// Most requests in flight (default: all at once, paced by --request-rate).
    #[arg(long)]
    max_concurrency: Option<usize>,
    /// Poisson arrivals at this many requests per second (default: all at once).
    #[arg(long)]
    request_rate: Option<f64>,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Synthetic prompt length in words (about one token each).
    #[arg(long, default_value_t = 128)]
    input_len: usize,
    #[arg(long, default_value_t = 128)]
    output_len: usize,
    /// Lengths drawn uniformly in [len·(1−r), len·(1+r)].
    #[arg(long, default_value_t = 0.0)]
    range_ratio: f64,
    #[arg(long)]
    ignore_eos: bool,
    /// JSON lines with a "prompt" field, instead of synthetic prompts.
    #[arg(long)]
    dataset: Option<String>,
    #[arg(long)]
    scrape_metrics: bool,
    /// Scrape /metrics this many times a second during the run (the gateway's picker: 20).
    #[arg(long)]
    scrape_hz: Option<f64>,
    #[arg(long)]
    output_json: Option<String>,
    /// A JSON array of objects; request i's body takes the fields of element i mod its length,
    /// e.g. a LoRA adapter per request: `[{"model":"a1"},{"model":"a2"},{}]` for kiln or vLLM,
    /// `[{"lora":[{"id":0,"scale":1.0}]},{"lora":[]}]` for llama.cpp.
    #[arg(long, value_parser = parse_body_cycle)]
    body_cycle: Option<BodyCycle>,
}

/// `--body-cycle`'s objects.
#[derive(Clone)]
struct BodyCycle(Vec<serde_json::Map<String, Value>>);

fn parse_body_cycle(text: &str) -> anyhow::Result<BodyCycle> {
    let objects: Vec<serde_json::Map<String, Value>> = serde_json::from_str(text)?;
    anyhow::ensure!(!objects.is_empty(), "--body-cycle needs at least one object");
    Ok(BodyCycle(objects))
}

const WORDS: [&str; 16] = [
    "the", "river", "stone", "quiet", "market", "lamp", "winter", "garden", "signal", "paper", "orbit", "copper",
    "harbor", "maple", "engine", "violet",
];

fn prompts(args: &Args, rng: &mut StdRng) -> anyhow::Result<Vec<(String, usize)>> {
    let vary = |len: usize, rng: &mut StdRng| {
        let r = args.range_ratio.clamp(0.0, 1.0);
        let lo = ((len as f64) * (1.0 - r)).round().max(1.0) as usize;
        let hi = ((len as f64) * (1.0 + r)).round().max(lo as f64) as usize;
        rng.random_range(lo..=hi)
    };
    if let Some(path) = &args.dataset {
        let file = std::fs::File::open(path)?;
        let mut out = Vec::new();
        for line in BufReader::new(file).lines() {
            let v: Value = serde_json::from_str(&line?)?;
            if let Some(p) = v["prompt"].as_str() {
                out.push((p.to_string(), vary(args.output_len, rng)));
            }
            if out.len() == args.num_prompts {
                break;
            }
        }
        anyhow::ensure!(!out.is_empty(), "{path}: no lines with a \"prompt\"");
        return Ok(out);
    }
    Ok((0..args.num_prompts)
        .map(|i| {
            let n = vary(args.input_len, rng);
            let text: Vec<&str> = (0..n)
                .map(|k| WORDS[(i * 7 + k * 13 + rng.random_range(0..16)) % 16])
                .collect();
            (text.join(" "), vary(args.output_len, rng))
        })
        .collect())
}

fn run_one(
    client: &reqwest::blocking::Client,
    args: &Args,
    model: &str,
    (index, prompt, max_tokens): (usize, &str, usize),
) -> Outcome {
    let (path, mut body) = match args.endpoint {
        Endpoint::Completions => ("/v1/completions", json!({"prompt": prompt})),
        Endpoint::Chat => (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": prompt}]}),
        ),
    };
    body["model"] = json!(model);
    body["max_tokens"] = json!(max_tokens);
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    body["temperature"] = json!(0.0);
    if args.ignore_eos {
        body["ignore_eos"] = json!(true);
    }
    if let Some(BodyCycle(objects)) = &args.body_cycle {
        for (key, value) in &objects[index % objects.len()] {
            body[key] = value.clone();
        }
    }
    stream_client::stream(client, &format!("{}{path}", args.server.base_url), &body)
}

/// A counting semaphore for `--max-concurrency`.
struct Slots {
    free: Mutex<usize>,
    freed: Condvar,
}

impl Slots {
    fn new(n: usize) -> Self {
        Self {
            free: Mutex::new(n),
            freed: Condvar::new(),
        }
    }

    fn acquire(&self) {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        while *free == 0 {
            free = self.freed.wait(free).unwrap_or_else(|p| p.into_inner());
        }
        *free -= 1;
    }

    fn release(&self) {
        *self.free.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.freed.notify_one();
    }
}

fn stats(mut v: Vec<f64>) -> Value {
    if v.is_empty() {
        return json!({"mean": null, "p50": null, "p90": null, "p99": null});
    }
    v.sort_by(f64::total_cmp);
    let p = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize] * 1e3;
    json!({"mean": v.iter().sum::<f64>() / v.len() as f64 * 1e3, "p50": p(0.5), "p90": p(0.9), "p99": p(0.99)})
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        args.scrape_hz.is_none_or(|hz| hz.is_finite() && hz > 0.0),
        "--scrape-hz must be a positive number"
    );
    let (client, model) = server_probe::connect(&args.server, Duration::from_secs(3600))?;
    let mut rng = StdRng::seed_from_u64(args.seed);
    let work = prompts(&args, &mut rng)?;
    // Arrival offsets: Poisson (exponential gaps) at --request-rate, else all at t=0.
    let mut t = 0.0;
    let arrivals: Vec<f64> = (0..work.len())
        .map(|_| {
            let at = t;
            if let Some(rate) = args.request_rate {
                t += -(1.0 - rng.random::<f64>()).ln() / rate;
            }
            at
        })
        .collect();
    let before = args
        .scrape_metrics
        .then(|| scrape(&client, &args.server.base_url).unwrap_or_default());
    let bar = ProgressBar::new(work.len() as u64);
    bar.set_style(ProgressStyle::with_template(
        "{bar:40} {pos}/{len} requests [{elapsed}]",
    )?);
    let slots = Arc::new(Slots::new(args.max_concurrency.unwrap_or(usize::MAX)));
    let start = Instant::now();
    let stop_scraping = AtomicBool::new(false);
    let mut scrapes: Option<ScrapeLoad> = None;
    let outcomes: Vec<Outcome> = std::thread::scope(|scope| {
        let scraper = args.scrape_hz.map(|hz| {
            let (url, stop) = (format!("{}/metrics", args.server.base_url), &stop_scraping);
            scope.spawn(move || scrape_at(&url, hz, stop))
        });
        let handles: Vec<_> = work
            .iter()
            .zip(&arrivals)
            .enumerate()
            .map(|(index, ((prompt, max_tokens), at))| {
                let (client, args, model, bar, slots) = (&client, &args, &model, &bar, Arc::clone(&slots));
                scope.spawn(move || {
                    let wait = Duration::from_secs_f64(*at).saturating_sub(start.elapsed());
                    std::thread::sleep(wait); // the arrival schedule, not synchronisation
                    slots.acquire();
                    let outcome = run_one(client, args, model, (index, prompt, *max_tokens));
                    slots.release();
                    bar.inc(1);
                    outcome
                })
            })
            .collect();
        let outcomes = handles.into_iter().map(|h| h.join().unwrap_or_default()).collect();
        stop_scraping.store(true, Ordering::Relaxed);
        scrapes = scraper.map(|s| s.join().unwrap_or_default());
        outcomes
    });
    bar.finish_and_clear();
    let duration = start.elapsed().as_secs_f64();
    let done: Vec<&Outcome> = outcomes.iter().filter(|o| o.ok).collect();
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    for error in outcomes.iter().filter(|o| !o.ok) {
        let reason = error.error.clone().unwrap_or_else(|| "worker thread panicked".into());
        *errors.entry(reason).or_default() += 1;
    }
    let input: u64 = done.iter().map(|o| o.input_tokens).sum();
    let output: u64 = done.iter().map(|o| o.output_tokens).sum();
    let tpot: Vec<f64> = done
        .iter()
        .filter(|o| o.output_tokens > 1)
        .map(|o| (o.e2e - o.ttft) / (o.output_tokens - 1) as f64)
        .collect();
    let report = json!({
        "base_url": args.server.base_url, "model": model, "completed": done.len(), "failed": outcomes.len() - done.len(), "errors": errors,
        "duration_s": duration, "total_input_tokens": input, "total_output_tokens": output,
        "request_throughput": done.len() as f64 / duration, "input_throughput": input as f64 / duration,
        "output_throughput": output as f64 / duration,
        "ttft_ms": stats(done.iter().map(|o| o.ttft).collect()),
        "tpot_ms": stats(tpot),
        "itl_ms": stats(done.iter().flat_map(|o| o.itls.clone()).collect()),
        "e2e_ms": stats(done.iter().map(|o| o.e2e).collect()),
        "scrapes": scrapes.as_ref().map(|s| json!({
            "hz": args.scrape_hz, "count": s.latencies.len(), "failures": s.failures,
            "rate": s.latencies.len() as f64 / duration, "body_bytes": s.body_bytes,
            "latency_ms": stats(s.latencies.clone()),
        })),
    });
    let num = |v: &Value| v.as_f64().map_or("-".to_string(), |x| format!("{x:.2}"));
    println!("| metric | value |\n|---|---|");
    for key in [
        "completed",
        "failed",
        "duration_s",
        "total_input_tokens",
        "total_output_tokens",
        "request_throughput",
        "output_throughput",
    ] {
        println!("| {key} | {} |", num(&report[key]));
    }
    for (reason, count) in &errors {
        println!("| failed: {reason} | {count} |");
    }
    for key in ["ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "scrape_ms"] {
        let s = if key == "scrape_ms" {
            if scrapes.is_none() {
                continue;
            }
            let s = &report["scrapes"];
            println!(
                "| scrapes / failures / per s | {} / {} / {} |",
                num(&s["count"]),
                num(&s["failures"]),
                num(&s["rate"])
            );
            &s["latency_ms"]
        } else {
            &report[key]
        };
        println!(
            "| {key} mean / p50 / p90 / p99 | {} / {} / {} / {} |",
            num(&s["mean"]),
            num(&s["p50"]),
            num(&s["p90"]),
            num(&s["p99"])
        );
    }
    if let Some(before) = before {
        // The server records a step's stats on its own thread after it answers the client:
        // read until its request count has caught up with what the client saw (or 10 s).
        let settled = Instant::now();
        let mut after = scrape(&client, &args.server.base_url).unwrap_or_default();
        let server_requests = |m: &std::collections::HashMap<String, f64>| {
            m.get("vllm:request_success_total").copied().unwrap_or(0.0)
                - before.get("vllm:request_success_total").copied().unwrap_or(0.0)
        };
        while server_requests(&after) < outcomes.len() as f64 && settled.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50)); // a poll interval, not synchronisation
            after = scrape(&client, &args.server.base_url).unwrap_or_default();
        }
        let delta = |k: &str| after.get(k).copied().unwrap_or(0.0) - before.get(k).copied().unwrap_or(0.0);
        let mean_ms = |k: &str| {
            let n = delta(&format!("{k}_count"));
            if n > 0.0 {
                delta(&format!("{k}_sum")) / n * 1e3
            } else {
                f64::NAN
            }
        };
        println!("\n| figure | client | server (/metrics) |\n|---|---|---|");
        println!(
            "| output tokens | {output} | {} |",
            delta("vllm:generation_tokens_total")
        );
        println!("| prompt tokens | {input} | {} |", delta("vllm:prompt_tokens_total"));
        println!(
            "| requests | {} | {} |",
            done.len(),
            delta("vllm:request_success_total")
        );
        println!(
            "| TTFT mean ms | {:.1} | {:.1} |",
            report["ttft_ms"]["mean"].as_f64().unwrap_or(f64::NAN),
            mean_ms("vllm:time_to_first_token_seconds")
        );
        println!(
            "| ITL mean ms | {:.1} | {:.1} |",
            report["itl_ms"]["mean"].as_f64().unwrap_or(f64::NAN),
            mean_ms("vllm:inter_token_latency_seconds")
        );
        println!(
            "| e2e mean ms | {:.1} | {:.1} |",
            report["e2e_ms"]["mean"].as_f64().unwrap_or(f64::NAN),
            mean_ms("vllm:e2e_request_latency_seconds")
        );
    }
    if let Some(path) = &args.output_json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}
