//! Scrape cost: how long kiln takes to render `/metrics` with every family populated, and
//! how many scrapes per second a scraper could sustain over HTTP. `--url` measures another
//! server the same way (e.g. the FastAPI baseline in `examples/fastapi_metrics_baseline.py`).
//!
//! ```text
//! cargo run --release --example bench_scrape -- [--url URL] [--seconds 5] [--clients 2] [--output-json FILE]
//! ```

use std::time::{Duration, Instant};

use clap::Parser;
use kiln::config::Config;
use kiln::model::loader::open_model;
use kiln::server::prepare_model;
use kiln::testing::{TestServer, TinyModelSpec, write_tiny_model};
use serde_json::json;

#[derive(Parser)]
struct Args {
    /// Scrape this URL instead of starting kiln on the tiny model.
    #[arg(long)]
    url: Option<String>,
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    #[arg(long, default_value_t = 2)]
    clients: usize,
    #[arg(long)]
    output_json: Option<String>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = tempfile::tempdir()?;
    // Keep the server alive for the whole run when we start one.
    let (url, server, render_ms) = match &args.url {
        Some(url) => (url.clone(), None, None),
        None => {
            let model = write_tiny_model(dir.path(), TinyModelSpec::default())?;
            let mut config = Config::default();
            config.model.path = model.display().to_string();
            config.engine.kv_cache_memory = "16MiB".into();
            let prepared = prepare_model(&config, open_model(&model)?)?;
            let server = TestServer::start(config, prepared)?;
            let client = reqwest::blocking::Client::new();
            // Populate every family: completions, chat, streaming, errors, unknown paths.
            for i in 0..20 {
                let body = json!({"prompt": format!("warm {i}"), "max_tokens": 4, "stream": i % 2 == 0});
                client.post(server.url("/v1/completions")).json(&body).send()?.text()?;
                let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3});
                client
                    .post(server.url("/v1/chat/completions"))
                    .json(&chat)
                    .send()?
                    .text()?;
                client.get(server.url(&format!("/nope/{i}"))).send()?;
            }
            client
                .post(server.url("/v1/completions"))
                .json(&json!({"prompt": "x", "temperature": 9}))
                .send()?;
            let registry = server.registry().clone();
            let mut times = Vec::new();
            for _ in 0..2000 {
                let start = Instant::now();
                let text = kiln::stats::exporter::render_metrics(&registry)?;
                times.push(start.elapsed().as_secs_f64() * 1e3);
                std::hint::black_box(text);
            }
            times.sort_by(f64::total_cmp);
            let url = server.url("/metrics");
            (
                url,
                Some(server),
                Some((percentile(&times, 0.5), percentile(&times, 0.99))),
            )
        }
    };
    let body_bytes = reqwest::blocking::get(&url)?.text()?.len();
    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
    let latencies: Vec<f64> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..args.clients)
            .map(|_| {
                let url = url.clone();
                scope.spawn(move || {
                    let client = reqwest::blocking::Client::new();
                    let mut lat = Vec::new();
                    while Instant::now() < deadline {
                        let start = Instant::now();
                        let ok = client.get(&url).send().and_then(|r| r.bytes()).is_ok();
                        if ok {
                            lat.push(start.elapsed().as_secs_f64() * 1e3);
                        }
                    }
                    lat
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
    });
    let mut sorted = latencies.clone();
    sorted.sort_by(f64::total_cmp);
    let rate = latencies.len() as f64 / args.seconds;
    let (p50, p99) = (percentile(&sorted, 0.5), percentile(&sorted, 0.99));
    let mut out = std::io::stdout().lock();
    use std::io::Write;
    writeln!(
        out,
        "| target | body bytes | scrapes/s ({} clients) | HTTP p50 ms | HTTP p99 ms | render p50 ms | render p99 ms |",
        args.clients
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|")?;
    let (r50, r99) = render_ms.map_or(("-".into(), "-".into()), |(a, b)| {
        (format!("{a:.3}"), format!("{b:.3}"))
    });
    writeln!(
        out,
        "| {url} | {body_bytes} | {rate:.0} | {p50:.3} | {p99:.3} | {r50} | {r99} |"
    )?;
    if let Some(path) = args.output_json {
        let report = json!({
            "url": url, "body_bytes": body_bytes, "clients": args.clients, "scrapes_per_s": rate,
            "http_ms": {"p50": p50, "p99": p99},
            "render_ms": render_ms.map(|(a, b)| json!({"p50": a, "p99": b})),
        });
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    drop(server);
    Ok(())
}
