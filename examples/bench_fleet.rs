//! A fleet behind vllm-router (issue 46's targets): a multi-turn chat workload (sessions of
//! several turns, each turn resending the conversation so far) through the router to two kiln
//! replicas under each policy, against one replica alone and against two replicas the client
//! alternates between itself. Reports the fleet's prefix-cache hit rate (the replicas'
//! `vllm:prefix_cache_hits_total` / `vllm:prefix_cache_queries_total`, summed), the time to
//! first token from kiln's own histograms (classic buckets summed over the replicas,
//! interpolated as PromQL's `histogram_quantile`) and as the client saw it, and each replica's
//! share of the requests, as a table and JSON with the CPU it ran on. Every mode starts fresh
//! processes, so no mode inherits another's cache.
//!
//! ```text
//! cargo run --release --features testing --example bench_fleet -- --model MODEL.gguf \
//!     --router .ci/venv-routers/bin/vllm-router [--sessions 16] [--turns 4] [--concurrency 4] \
//!     [--modes single,direct,round_robin,cache_aware,kv_aware] [--output-json FILE]
//! ```

#[path = "common/cpu_info.rs"]
mod cpu_info;
#[path = "common/stream_client.rs"]
mod stream_client;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use reqwest::blocking::Client;
use serde_json::{Value, json};

#[derive(Parser)]
struct Args {
    /// The model every replica serves.
    #[arg(long)]
    model: PathBuf,
    /// The vllm-router binary (PyPI `vllm-router`).
    #[arg(long)]
    router: PathBuf,
    /// The kiln binary (default: the one beside this example's folder).
    #[arg(long)]
    kiln: Option<PathBuf>,
    #[arg(long, default_value_t = 16)]
    sessions: usize,
    #[arg(long, default_value_t = 4)]
    turns: usize,
    /// Sessions running at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    #[arg(long, default_value_t = 16)]
    max_tokens: usize,
    /// single: one replica; direct: two, the client alternating between them per request;
    /// any other name: two replicas behind vllm-router with that policy.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "single,direct,round_robin,cache_aware,kv_aware"
    )]
    modes: Vec<String>,
    #[arg(long)]
    output_json: Option<PathBuf>,
}

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_ok(client: &Client, url: &str, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if client.get(url).send().is_ok_and(|r| r.status().is_success()) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    bail!("{url} did not answer 200 within {within:?}")
}

/// The replicas of one mode and, for a router mode, the router.
struct Fleet {
    replicas: Vec<String>,
    router: Option<(String, String)>,
    _procs: Vec<Proc>,
}

fn start_fleet(args: &Args, client: &Client, mode: &str) -> anyhow::Result<Fleet> {
    let kiln = match &args.kiln {
        Some(k) => k.clone(),
        None => std::env::current_exe()?
            .parent()
            .and_then(|p| p.parent())
            .context("no folder above the example")?
            .join("kiln"),
    };
    let n = if mode == "single" { 1 } else { 2 };
    let kv_aware = mode == "kv_aware";
    let mut procs = Vec::new();
    let mut replicas = Vec::new();
    let mut event_sources = Vec::new();
    for _ in 0..n {
        let port = free_port()?;
        let mut command = Command::new(&kiln);
        command
            .args(["serve", "--model"])
            .arg(&args.model)
            .args(["--port", &port.to_string(), "--served-model-name", "fleet-model"])
            .env("PYTHONHASHSEED", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if kv_aware {
            let events = free_port()?;
            // The empty topic (vLLM's default): vllm-router's static sources subscribe to it alone.
            let config =
                json!({"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": format!("tcp://*:{events}")});
            command.args(["--kv-events-config", &config.to_string()]);
            event_sources.push(format!("http://127.0.0.1:{port}=tcp://127.0.0.1:{events}"));
        }
        procs.push(Proc(command.spawn().context("start kiln")?));
        replicas.push(format!("http://127.0.0.1:{port}"));
    }
    for replica in &replicas {
        wait_ok(client, &format!("{replica}/ready"), Duration::from_secs(120))?;
    }
    let router = if matches!(mode, "single" | "direct") {
        None
    } else {
        let (port, metrics) = (free_port()?, free_port()?);
        let mut command = Command::new(&args.router);
        command
            .arg("--worker-urls")
            .args(&replicas)
            .args(["--policy", mode, "--host", "127.0.0.1", "--port", &port.to_string()])
            .args([
                "--prometheus-port",
                &metrics.to_string(),
                "--worker-startup-check-interval",
                "1",
            ])
            .env("PYTHONHASHSEED", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for source in &event_sources {
            command.args(["--kv-event-source", source]);
        }
        if kv_aware {
            command.args(["--kv-event-model", "fleet-model"]);
        }
        procs.push(Proc(command.spawn().context("start vllm-router")?));
        let url = format!("http://127.0.0.1:{port}");
        wait_ok(client, &format!("{url}/v1/models"), Duration::from_secs(120))?;
        Some((url, format!("http://127.0.0.1:{metrics}/metrics")))
    };
    Ok(Fleet {
        replicas,
        router,
        _procs: procs,
    })
}

/// Session `s`'s conversation before turn `turn`: a system prompt every session shares, then
/// the session's own profile, then each earlier turn with a fixed short reply (the replies
/// are not what the model said, so that every mode resends the same text).
fn messages(s: usize, turn: usize) -> Value {
    let system = format!(
        "You are a careful assistant for a library. The catalogue lists books by author, title, \
         year and shelf; answer questions about where a book stands and whether it can be \
         borrowed, and never invent a shelf that the catalogue does not list. This conversation \
         is with reader number {s}, who studies the history of {} and borrows mostly books \
         printed before {} about bridges, rivers and the towns along them.",
        [
            "Lisbon", "Ghent", "Cracow", "Lyon", "Turin", "Bergen", "Seville", "Riga"
        ][s % 8],
        1700 + 10 * s
    );
    let mut out = vec![json!({"role": "system", "content": system})];
    for t in 0..=turn {
        out.push(json!({"role": "user", "content": format!("Question {t}: which shelf holds the atlas of {} rivers, and may I borrow it for {} days?", t + 3, 7 * (t + 1))}));
        if t < turn {
            out.push(json!({"role": "assistant", "content": format!("The atlas for question {t} stands on shelf {}; you may borrow it.", 10 + t)}));
        }
    }
    Value::Array(out)
}

/// Counter sums and the TTFT buckets (upper bound → cumulative count) of one replica.
struct Scrape {
    sums: BTreeMap<String, f64>,
    ttft_buckets: BTreeMap<String, f64>,
}

fn scrape(client: &Client, url: &str) -> anyhow::Result<Scrape> {
    let text = client.get(url).send()?.error_for_status()?.text()?;
    let mut sums = BTreeMap::new();
    let mut ttft_buckets = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(v) = value.parse::<f64>() else { continue };
        let name = series.split('{').next().unwrap_or(series);
        *sums.entry(name.to_string()).or_default() += v;
        if name == "vllm:time_to_first_token_seconds_bucket"
            && let Some((_, rest)) = series.split_once("le=\"")
            && let Some((le, _)) = rest.split_once('"')
        {
            *ttft_buckets.entry(le.to_string()).or_default() += v;
        }
    }
    Ok(Scrape { sums, ttft_buckets })
}

/// PromQL's `histogram_quantile` over cumulative classic buckets.
fn bucket_quantile(buckets: &BTreeMap<String, f64>, q: f64) -> f64 {
    let mut sorted: Vec<(f64, f64)> = buckets
        .iter()
        .map(|(le, c)| {
            (
                if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap_or(f64::NAN)
                },
                *c,
            )
        })
        .collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let Some(&(_, total)) = sorted.last() else {
        return f64::NAN;
    };
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(upper, count) in &sorted {
        if count >= rank {
            if upper.is_infinite() {
                return lower;
            }
            return lower + (upper - lower) * (rank - below) / (count - below).max(f64::MIN_POSITIVE);
        }
        (lower, below) = (upper, count);
    }
    lower
}

fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
        .get(((q * sorted.len() as f64).ceil() as usize).max(1) - 1)
        .copied()
        .unwrap_or(f64::NAN)
}

fn run_mode(args: &Args, client: &Client, mode: &str) -> anyhow::Result<Value> {
    let fleet = start_fleet(args, client, mode)?;
    let next = Mutex::new(0usize);
    let sent = Mutex::new(0usize);
    let outcomes = Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..args.concurrency {
            scope.spawn(|| {
                loop {
                    let s = {
                        let mut n = next.lock().expect("lock");
                        *n += 1;
                        *n - 1
                    };
                    if s >= args.sessions {
                        break;
                    }
                    for turn in 0..args.turns {
                        let base = match &fleet.router {
                            Some((url, _)) => url.clone(),
                            None => {
                                let mut k = sent.lock().expect("lock");
                                *k += 1;
                                fleet.replicas[(*k - 1) % fleet.replicas.len()].clone()
                            }
                        };
                        let body = json!({"model": "fleet-model", "messages": messages(s, turn), "max_tokens": args.max_tokens,
                            "temperature": 0.0, "ignore_eos": true, "stream": true, "user": format!("reader-{s}")});
                        let outcome = stream_client::stream(client, &format!("{base}/v1/chat/completions"), &body);
                        outcomes.lock().expect("lock").push(outcome);
                    }
                }
            });
        }
    });
    let wall = started.elapsed().as_secs_f64();
    let outcomes = outcomes.into_inner().expect("outcomes");
    let ok: Vec<_> = outcomes.iter().filter(|o| o.ok).collect();
    let client_ttfts: Vec<f64> = ok.iter().map(|o| o.ttft).collect();
    let (mut hits, mut queries, mut buckets, mut served) = (0.0, 0.0, BTreeMap::new(), Vec::new());
    let (mut ttft_sum, mut ttft_count) = (0.0, 0.0);
    for replica in &fleet.replicas {
        let s = scrape(client, &format!("{replica}/metrics"))?;
        hits += s.sums.get("vllm:prefix_cache_hits_total").copied().unwrap_or(0.0);
        queries += s.sums.get("vllm:prefix_cache_queries_total").copied().unwrap_or(0.0);
        served.push(s.sums.get("vllm:request_success_total").copied().unwrap_or(0.0));
        ttft_sum += s
            .sums
            .get("vllm:time_to_first_token_seconds_sum")
            .copied()
            .unwrap_or(0.0);
        ttft_count += s
            .sums
            .get("vllm:time_to_first_token_seconds_count")
            .copied()
            .unwrap_or(0.0);
        for (le, c) in s.ttft_buckets {
            *buckets.entry(le).or_insert(0.0) += c;
        }
    }
    let router_kv = match &fleet.router {
        Some((_, metrics)) => client
            .get(metrics)
            .send()
            .and_then(|r| r.text())
            .map(|t| {
                t.lines()
                    .filter(|l| l.starts_with("vllm_router_kv_placement_lookups_total"))
                    .map(String::from)
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default(),
        None => Vec::new(),
    };
    Ok(json!({
        "mode": mode,
        "replicas": fleet.replicas.len(),
        "requests": outcomes.len(),
        "ok": ok.len(),
        "wall_s": wall,
        "prefix_cache_hits": hits,
        "prefix_cache_queries": queries,
        "fleet_hit_rate": if queries > 0.0 { hits / queries } else { 0.0 },
        // The mean is exact (`_sum / _count`); the quantiles are only as fine as the buckets.
        "kiln_ttft_mean_s": if ttft_count > 0.0 { ttft_sum / ttft_count } else { f64::NAN },
        "client_ttft_mean_s": client_ttfts.iter().sum::<f64>() / client_ttfts.len().max(1) as f64,
        "kiln_ttft_p50_s": bucket_quantile(&buckets, 0.5),
        "kiln_ttft_p99_s": bucket_quantile(&buckets, 0.99),
        "client_ttft_p50_s": quantile(&client_ttfts, 0.5),
        "client_ttft_p99_s": quantile(&client_ttfts, 0.99),
        "served_per_replica": served,
        "router_kv_placement_lookups": router_kv,
    }))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let client = Client::builder()
        .timeout(Duration::from_secs(300))
        .pool_max_idle_per_host(0)
        .build()?;
    let mut rows = Vec::new();
    for mode in &args.modes {
        eprintln!("mode {mode}...");
        rows.push(run_mode(&args, &client, mode)?);
    }
    println!(
        "| mode | replicas | ok | fleet prefix-cache hit rate | kiln TTFT mean / p50 / p99 (ms) | client TTFT mean / p50 / p99 (ms) | requests per replica |"
    );
    println!("|---|---|---|---|---|---|---|");
    let ms = |v: &Value| v.as_f64().unwrap_or(f64::NAN) * 1000.0;
    for r in &rows {
        println!(
            "| {} | {} | {}/{} | {:.3} | {:.0} / {:.0} / {:.0} | {:.0} / {:.0} / {:.0} | {} |",
            r["mode"].as_str().unwrap_or(""),
            r["replicas"],
            r["ok"],
            r["requests"],
            r["fleet_hit_rate"].as_f64().unwrap_or(0.0),
            ms(&r["kiln_ttft_mean_s"]),
            ms(&r["kiln_ttft_p50_s"]),
            ms(&r["kiln_ttft_p99_s"]),
            ms(&r["client_ttft_mean_s"]),
            ms(&r["client_ttft_p50_s"]),
            ms(&r["client_ttft_p99_s"]),
            r["served_per_replica"]
        );
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let report = json!({
        "benchmark": "bench_fleet",
        "cpu": cpu_info::cpu_info(),
        "load_average_at_end": load.trim(),
        "flags": {"sessions": args.sessions, "turns": args.turns, "concurrency": args.concurrency,
                  "max_tokens": args.max_tokens, "model": args.model, "modes": args.modes},
        "rows": rows,
    });
    if let Some(path) = &args.output_json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}
