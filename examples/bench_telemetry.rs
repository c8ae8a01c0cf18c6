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
//! `--compare tracing` instead compares two servers that both record metrics, one of them also
//! tracing every request (OTLP spans to a loopback sink that accepts every export, and the
//! exemplars those traced requests leave in the latency histograms): the cost of tracing.
//!
//! `--compare nothing` runs two identical servers (both with metrics, neither traced): the
//! instrument's own bias and noise, the control that says how small a cost a run can resolve.
//! `--fresh-servers` starts a new pair for every round, created in alternating order, so that
//! neither side keeps a lucky (or unlucky) memory layout or thread placement for the whole run.
//!
//! `--collector hung|failing` also has the telemetry-on server push OTLP every second to a
//! collector on loopback that accepts connections and never answers, or answers every export
//! with 500: serving must not notice, and the process's resident memory is recorded before and
//! after to show nothing piles up.

#[path = "common/server_probe.rs"]
mod server_probe;

#[path = "common/cpu_info.rs"]
mod cpu_info;

#[path = "common/paired_load.rs"]
mod paired_load;

use server_probe::rss_mib;

use clap::Parser;
use kiln::config::Config;
use kiln::model::loader::open_model;
use kiln::server::prepare_model;
use kiln::testing::{TestServer, TinyModelSpec, write_tiny_model};
use serde_json::{Value, json};

#[derive(Parser, Clone)]
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
    /// What differs between the two servers.
    #[arg(long, value_enum, default_value_t = Compare::Telemetry)]
    compare: Compare,
    /// A new pair of servers every round, created in alternating order.
    #[arg(long)]
    fresh_servers: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Compare {
    /// Telemetry on against off.
    Telemetry,
    /// Both with telemetry; one also traces every request (spans and exemplars).
    Tracing,
    /// Two identical servers (both with telemetry, neither traced): the control.
    Nothing,
}

/// OTLP exports the sink has answered (shows the traced server really exported).
static EXPORTS_RECEIVED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A loopback OTLP/HTTP sink that answers every export 200 with an empty (valid) protobuf
/// response, so the traced server pays for building and sending spans, not for a slow peer.
fn accepting_sink() -> anyhow::Result<String> {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let url = format!("http://{}/v1/traces", listener.local_addr()?);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let Ok(mut writer) = stream.try_clone() else { return };
                let mut reader = BufReader::new(stream);
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return; // the client closed the connection
                        }
                        let lower = line.to_ascii_lowercase();
                        if let Some(v) = lower.strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0u8; length];
                    EXPORTS_RECEIVED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if reader.read_exact(&mut body).is_err()
                        || writer
                            .write_all(
                                b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
                            )
                            .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    Ok(url)
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

fn server(
    model: &str,
    telemetry: bool,
    otlp_endpoint: Option<&str>,
    traces_endpoint: Option<&str>,
) -> anyhow::Result<TestServer> {
    let mut config = Config::default();
    config.model.path = model.to_string();
    config.engine.kv_cache_memory = "256MiB".into();
    config.telemetry.enabled = telemetry;
    if let Some(endpoint) = traces_endpoint {
        // The default sampler (parent-based, always on) traces every request without a parent.
        config.telemetry.otlp_traces_endpoint = endpoint.to_string();
    }
    if let Some(endpoint) = otlp_endpoint {
        config.telemetry.otlp_endpoint = endpoint.to_string();
        config.telemetry.otlp_interval_s = 1.0;
        config.telemetry.otlp_timeout_s = 2.0;
    }
    let prepared = prepare_model(&config, open_model(std::path::Path::new(model))?)?;
    TestServer::start(config, prepared)
}

/// One pair of servers per round, the first created alternating between the sides (and so the
/// order of their loads too); each is warmed by one request per client before it is measured.
fn fresh_pairs(
    args: &Args,
    start: impl Fn(bool) -> anyhow::Result<TestServer>,
) -> anyhow::Result<paired_load::PairedRuns> {
    let mut runs = paired_load::PairedRuns {
        on: Vec::new(),
        off: Vec::new(),
    };
    for round in 0..args.rounds {
        let measured_first = round % 2 == 0;
        let first = start(measured_first)?;
        let second = start(!measured_first)?;
        let warm_up = Args {
            requests: args.concurrency,
            ..args.clone()
        };
        load(&first, &warm_up);
        load(&second, &warm_up);
        let (a, b) = (load(&first, args), load(&second, args));
        let (on, off) = if measured_first { (a, b) } else { (b, a) };
        runs.on.push(on);
        runs.off.push(off);
    }
    Ok(runs)
}

/// `requests` completions sent by `concurrency` clients.
fn load(server: &TestServer, args: &Args) -> paired_load::Load {
    paired_load::completions_load(
        server,
        args.concurrency,
        args.requests / args.concurrency,
        |c, i| json!({"prompt": format!("client {c} request {i}:"), "max_tokens": args.max_tokens, "ignore_eos": true}),
    )
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
    let sink = match args.compare {
        Compare::Tracing => Some(accepting_sink()?),
        Compare::Telemetry | Compare::Nothing => None,
    };
    let start = |measured: bool| match (args.compare, measured) {
        (Compare::Telemetry, true) => server(&model, true, collector.as_deref(), None),
        (Compare::Telemetry, false) => server(&model, false, None, None),
        (Compare::Tracing, true) => server(&model, true, collector.as_deref(), sink.as_deref()),
        (Compare::Tracing, false) | (Compare::Nothing, _) => server(&model, true, None, None),
    };
    let rss_start;
    let runs = if args.fresh_servers {
        rss_start = resident_kib();
        fresh_pairs(&args, start)?
    } else {
        let (on, off) = (start(true)?, start(false)?);
        load(&on, &args); // warm-up
        load(&off, &args);
        rss_start = resident_kib();
        paired_load::PairedRuns::run(args.rounds, || load(&on, &args), || load(&off, &args))
    };
    let rss_end = resident_kib();
    let rounds = runs.throughput();
    let (m_on, m_off, cost) = (rounds.median_on(), rounds.median_off(), rounds.median_cost());
    let (mean, spread) = rounds.paired_cost();
    let cpu = runs.cpu_efficiency();
    let (cpu_mean, cpu_spread) = cpu.paired_cost();
    let what = match args.compare {
        Compare::Telemetry => "telemetry",
        Compare::Tracing => "tracing every request",
        Compare::Nothing => "nothing (identical servers)",
    };
    println!("| {what} | output tok/s (median of {}) | rounds |", args.rounds);
    println!("|---|---|---|");
    println!("| on | {m_on:.1} | {:.1?} |", rounds.on);
    println!("| off | {m_off:.1} | {:.1?} |", rounds.off);
    println!("cost of {what}: {cost:.2} % of throughput (medians); paired by round {mean:.2} ± {spread:.2} %");
    println!(
        "in CPU time: {:.1} against {:.1} output tokens per CPU second (medians); paired by round \
         {cpu_mean:.2} ± {cpu_spread:.2} % more CPU per token",
        cpu.median_on(),
        cpu.median_off()
    );
    let exports = EXPORTS_RECEIVED.load(std::sync::atomic::Ordering::Relaxed);
    if args.compare == Compare::Tracing {
        println!("span exports received by the sink: {exports}");
    }
    println!(
        "OTLP collector: {:?}; resident memory {} KiB before the rounds, {} KiB after",
        args.collector,
        rss_start.map_or("?".into(), |k| k.to_string()),
        rss_end.map_or("?".into(), |k| k.to_string())
    );
    if let Some(path) = &args.output_json {
        let mut report = json!({"model": model, "concurrency": args.concurrency, "requests": args.requests,
            "max_tokens": args.max_tokens,
            "collector": format!("{:?}", args.collector).to_lowercase(),
            "compare": format!("{:?}", args.compare).to_lowercase(), "fresh_servers": args.fresh_servers,
            "cpu": cpu_info::cpu_info(), "span_exports_received": exports,
            "resident_kib_start": rss_start, "resident_kib_end": rss_end});
        if let (Some(report), Value::Object(figures)) = (report.as_object_mut(), runs.to_json()) {
            report.extend(figures);
        }
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}
