//! A soak benchmark: mixed traffic against a running OpenAI-compatible server for a set
//! time, then a check that the server's own counters agree with what the client saw.
//!
//! ```text
//! cargo run --release --example soak -- --base-url http://127.0.0.1:8000 \
//!     [--duration-secs 600] [--concurrency 8] [--seed 0] [--server-pid PID] \
//!     [--max-tokens 32] [--burst-size 64] [--burst-interval-secs 30] [--output-json FILE]
//! ```
//! Each worker loops over completions and chat completions, streamed or not, and drops some
//! requests part-way (a stream after a few tokens, a plain request after a short timeout).
//! A burst thread fires `--burst-size` requests at once every `--burst-interval-secs`: above
//! the server's waiting queue, some get 429. It reads `/metrics` before and after (once
//! `/load` says nothing runs or waits) and, with `--server-pid`, the server's resident memory.
//!
//! The counter checks. A request the client saw complete is counted exactly: the server's
//! `request_success_total{finished_reason}`, `prompt_tokens_total` and
//! `generation_tokens_total` deltas must equal the client's stop/length counts and `usage`
//! sums, plus an "extra" that only requests the client aborted can explain. An aborted
//! request may have finished on the server first (stop/length), ended as abort, or never
//! reached the engine (dropped before it was read, or refused unseen), so the extra must lie
//! between what the aborted requests surely did (a stream that saw tokens was prefilled and
//! will end once) and the most they could have done (their whole prompts and `max_tokens`).
//! With no aborts every check is an equality.

#[path = "../common/cpu_info.rs"]
mod cpu_info;
mod probe;
#[path = "../common/server_probe.rs"]
mod server_probe;
mod tally;
mod traffic;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::Parser;
use rand::SeedableRng;
use rand::rngs::StdRng;
use reqwest::blocking::Client;
use serde_json::{Value, json};

use cpu_info::cpu_info;
use probe::idle_scrape;
use server_probe::rss_mib;
use tally::{Tally, counter_checks};
use traffic::{Outcome, Prompts, Spec, burst_spec, draw, send, warm_up};

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    server: server_probe::ServerArgs,
    #[arg(long, default_value_t = 60)]
    duration_secs: u64,
    /// Worker threads, each with one request in flight (bursts come on top).
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The server's process id, to read its resident memory (Linux /proc).
    #[arg(long)]
    server_pid: Option<u32>,
    /// Most tokens a request asks for (each draws 1..=this; aborted ones ask for all).
    #[arg(long, default_value_t = 32)]
    max_tokens: u64,
    /// Longest synthetic prompt in words (about one token each).
    #[arg(long, default_value_t = 48)]
    prompt_words: usize,
    /// Requests fired at once per burst; set it above max_num_seqs + max_waiting to see 429s.
    #[arg(long, default_value_t = 64)]
    burst_size: usize,
    #[arg(long, default_value_t = 30)]
    burst_interval_secs: u64,
    /// Longest wait for the server to be idle before the final scrape.
    #[arg(long, default_value_t = 300)]
    idle_timeout_secs: u64,
    /// Prefix of the engine metrics (the server's --engine-prefix).
    #[arg(long, default_value = "vllm:")]
    metric_prefix: String,
    #[arg(long)]
    output_json: Option<String>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (client, model) = server_probe::connect(&args.server, Duration::from_secs(600))?;
    let mut rng = StdRng::seed_from_u64(args.seed);
    let prompts = warm_up(&client, &args.server.base_url, &model, args.prompt_words, &mut rng)?;
    let before = idle_scrape(
        &client,
        &args.server.base_url,
        &args.metric_prefix,
        Duration::from_secs(args.idle_timeout_secs),
    )?;
    let rss_start = rss_mib(args.server_pid);
    let start = Instant::now();
    let Soaked {
        tally: t,
        rss_middle,
        rss_max,
    } = drive(&args, &client, &model, &prompts, rss_start);
    let duration = start.elapsed().as_secs_f64();
    let after = idle_scrape(
        &client,
        &args.server.base_url,
        &args.metric_prefix,
        Duration::from_secs(args.idle_timeout_secs),
    )?;
    let rss_end = rss_mib(args.server_pid);
    let delta = |k: &str| {
        let key = format!("{}{k}", args.metric_prefix);
        after.get(&key).copied().unwrap_or(0.0) - before.get(&key).copied().unwrap_or(0.0)
    };
    let checks = counter_checks(&t, &delta);
    let counters_match = checks.iter().all(|c| c["pass"] == true);
    let server_reasons: BTreeMap<&str, f64> = ["stop", "length", "abort", "error"]
        .into_iter()
        .map(|r| (r, delta(&format!("request_success_total{{{r}}}"))))
        .collect();
    let report = json!({
        "base_url": args.server.base_url, "model": model, "seed": args.seed, "duration_s": duration,
        "concurrency": args.concurrency, "max_tokens": args.max_tokens,
        "burst": {"size": args.burst_size, "interval_s": args.burst_interval_secs},
        "cpu": cpu_info(),
        "requests": {
            "total": t.total(), "by_kind": t.by_kind, "ok": t.ok, "rejected_429": t.rejected_429,
            "other_4xx": t.other_4xx, "server_5xx": t.server_5xx, "aborted_by_client": t.aborted,
            "aborted_streaming": t.aborted_streaming, "aborted_waiting": t.aborted - t.aborted_streaming,
            "connection_errors": t.connection_errors, "bad_responses": t.bad_responses, "errors": t.errors,
        },
        "server_5xx": t.server_5xx,
        "finish_reasons": {"client_completed": t.finish, "server_delta": server_reasons},
        "tokens": {"client_prompt": t.prompt_tokens, "client_completion": t.completion_tokens,
                   "server_prompt": delta("prompt_tokens_total"), "server_generation": delta("generation_tokens_total")},
        "ok_per_s": t.ok as f64 / duration,
        "completion_tokens_per_s": t.completion_tokens as f64 / duration,
        "rss_mib": {"start": rss_start, "middle": rss_middle, "end": rss_end, "max_sampled": rss_max},
        "counter_checks": checks,
        "counters_match": counters_match,
    });
    print_table(&report);
    if let Some(path) = &args.output_json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}

/// What the traffic leaves behind: the client's tally and the server's memory on the way.
struct Soaked {
    tally: Tally,
    rss_middle: Option<f64>,
    rss_max: Option<f64>,
}

/// Runs the workers and the bursts until `--duration-secs` have passed (and the requests
/// in flight then have ended), sampling the server's memory each second.
fn drive(args: &Args, client: &Client, model: &str, prompts: &Prompts, rss_start: Option<f64>) -> Soaked {
    let start = Instant::now();
    let tally = Mutex::new(Tally::default());
    let record = |spec: &Spec, outcome: Outcome| {
        let prompt_tokens = prompts.tokens[spec.prompt][usize::from(spec.chat)];
        tally
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(spec, prompt_tokens, outcome);
    };
    let record = &record;
    let deadline = start + Duration::from_secs(args.duration_secs);
    let (mut rss_middle, mut rss_max) = (None, rss_start);
    std::thread::scope(|scope| {
        for worker in 0..args.concurrency {
            let mut rng = StdRng::seed_from_u64(args.seed.wrapping_add(1 + worker as u64));
            scope.spawn(move || {
                while Instant::now() < deadline {
                    let spec = draw(&mut rng, args.max_tokens);
                    record(&spec, send(client, &args.server.base_url, model, prompts, &spec));
                }
            });
        }
        let mut burst_rng = StdRng::seed_from_u64(args.seed.wrapping_add(u64::MAX / 2));
        scope.spawn(move || {
            let mut next = start + Duration::from_secs(args.burst_interval_secs.max(1)) / 2;
            while next < deadline {
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
                std::thread::scope(|burst| {
                    for _ in 0..args.burst_size {
                        let spec = burst_spec(&mut burst_rng);
                        burst.spawn(move || record(&spec, send(client, &args.server.base_url, model, prompts, &spec)));
                    }
                });
                next += Duration::from_secs(args.burst_interval_secs.max(1));
            }
        });
        let half = Duration::from_secs(args.duration_secs) / 2;
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_secs(1).min(deadline.saturating_duration_since(Instant::now())));
            let rss = rss_mib(args.server_pid);
            rss_max = match (rss_max, rss) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            if rss_middle.is_none() && start.elapsed() >= half {
                rss_middle = rss;
            }
        }
    });
    Soaked {
        tally: tally.into_inner().unwrap_or_else(|p| p.into_inner()),
        rss_middle,
        rss_max,
    }
}

fn print_table(report: &Value) {
    let r = &report["requests"];
    println!("| outcome | requests |\n|---|---|");
    for key in [
        "total",
        "ok",
        "rejected_429",
        "other_4xx",
        "server_5xx",
        "aborted_by_client",
        "aborted_streaming",
        "aborted_waiting",
        "connection_errors",
        "bad_responses",
    ] {
        println!("| {key} | {} |", r[key]);
    }
    for (kind, n) in r["by_kind"].as_object().into_iter().flatten() {
        println!("| sent as {kind} | {n} |");
    }
    for (reason, n) in r["errors"].as_object().into_iter().flatten() {
        println!("| error: {reason} | {n} |");
    }
    println!(
        "\n| duration s | ok/s | completion tok/s |\n|---|---|---|\n| {:.1} | {:.2} | {:.1} |",
        report["duration_s"].as_f64().unwrap_or(0.0),
        report["ok_per_s"].as_f64().unwrap_or(0.0),
        report["completion_tokens_per_s"].as_f64().unwrap_or(0.0)
    );
    let mib = |v: &Value| v.as_f64().map_or("-".to_string(), |x| format!("{x:.1}"));
    let m = &report["rss_mib"];
    println!(
        "\n| server RSS MiB | start | middle | end | max sampled |\n|---|---|---|---|---|\n| | {} | {} | {} | {} |",
        mib(&m["start"]),
        mib(&m["middle"]),
        mib(&m["end"]),
        mib(&m["max_sampled"])
    );
    println!("\n| check | client | server | extra | extra allowed | pass |\n|---|---|---|---|---|---|");
    for c in report["counter_checks"].as_array().into_iter().flatten() {
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            c["check"].as_str().unwrap_or(""),
            c["client"],
            c["server"],
            c["extra"],
            c["extra_allowed"],
            c["pass"]
        );
    }
    println!("\ncounters match: {}", report["counters_match"]);
}
