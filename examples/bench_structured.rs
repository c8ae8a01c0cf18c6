//! The cost of constrained decoding: output tokens per second at 1 and 8 streams with no
//! request constrained, and with every other request constrained to a JSON schema (the mask
//! is computed on the executor thread for those only). Prints a table and writes JSON.
//!
//! ```text
//! cargo run --release --features testing --example bench_structured -- [--model PATH]
//!     [--requests 16] [--max-tokens 32] [--rounds 3] [--output-json FILE]
//! ```
//! Without `--model` it uses the tiny random model, where the model's own work per token is
//! smallest, so the mask's share is largest (a pessimistic measure). Every request sets
//! `ignore_eos`, so each generates `--max-tokens` tokens whatever the grammar allows.

#[path = "common/cpu_info.rs"]
mod cpu_info;

#[path = "common/paired_load.rs"]
mod paired_load;

use clap::Parser;
use kiln::config::Config;
use kiln::model::loader::open_model;
use kiln::server::prepare_model;
use kiln::testing::{TestServer, TinyModelSpec, write_tiny_model};
use serde_json::{Value, json};

#[derive(Parser)]
struct Args {
    #[arg(long)]
    model: Option<String>,
    /// Requests per measurement (split among the streams).
    #[arg(long, default_value_t = 16)]
    requests: usize,
    #[arg(long, default_value_t = 32)]
    max_tokens: u32,
    /// Alternating rounds of each side per stream count.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    #[arg(long)]
    output_json: Option<String>,
}

/// An open-ended schema: a list of records, so the grammar stays busy for every token.
fn schema() -> Value {
    json!({"type": "object", "properties": {"items": {"type": "array", "items": {"type": "object",
        "properties": {"id": {"type": "integer"}, "name": {"type": "string"}, "ok": {"type": "boolean"}},
        "required": ["id", "name", "ok"]}}}, "required": ["items"]})
}

/// Output tokens per second of `args.requests` completions from `streams` clients; with
/// `constrain_half`, every other request carries the schema.
fn load(server: &TestServer, args: &Args, streams: usize, constrain_half: bool) -> paired_load::Load {
    paired_load::completions_load(server, streams, args.requests.div_ceil(streams), |s, i| {
        let mut body = json!({"prompt": format!("stream {s} request {i}:"),
            "max_tokens": args.max_tokens, "ignore_eos": true, "seed": i});
        if constrain_half && (s + i) % 2 == 0 {
            body["response_format"] =
                json!({"type": "json_schema", "json_schema": {"name": "records", "schema": schema()}});
        }
        body
    })
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
    let mut config = Config::default();
    config.model.path = model.clone();
    config.engine.kv_cache_memory = "256MiB".into();
    let server = TestServer::start(
        config.clone(),
        prepare_model(&config, open_model(std::path::Path::new(&model))?)?,
    )?;
    load(&server, &args, 1, true); // warm-up (and the schema's compile, cached from here on)
    println!(
        "| streams | none constrained tok/s | half constrained tok/s | cost (medians) | cost paired by round | CPU per token, paired |"
    );
    println!("|---|---|---|---|---|---|");
    let mut rows = Vec::new();
    for streams in [1, 8] {
        let runs = paired_load::PairedRuns::run(
            args.rounds,
            || load(&server, &args, streams, true),
            || load(&server, &args, streams, false),
        );
        let rounds = runs.throughput();
        let (mean, spread) = rounds.paired_cost();
        let (cpu_mean, cpu_spread) = runs.cpu_efficiency().paired_cost();
        println!(
            "| {streams} | {:.1} | {:.1} | {:.1} % | {mean:.1} ± {spread:.1} % | {cpu_mean:.1} ± {cpu_spread:.1} % |",
            rounds.median_off(),
            rounds.median_on(),
            rounds.median_cost()
        );
        let mut row = runs.to_json();
        row["streams"] = json!(streams);
        rows.push(row);
    }
    if let Some(path) = &args.output_json {
        let report = json!({"model": model, "requests": args.requests, "max_tokens": args.max_tokens, "rounds": args.rounds,
            "cpu": cpu_info::cpu_info(), "results": rows});
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}
