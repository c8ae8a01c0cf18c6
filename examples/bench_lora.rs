//! What LoRA adapters cost (issue 47): the engine without HTTP, through the server's step loop,
//! decoding at 1, 8 and 32 streams with the base model alone and with a mixed load (the
//! adapters and the base, round robin over the streams: 1 stream runs adapter 1), in one run on
//! one engine. Each case runs `--repeats` times, base and mixed alternating, and the medians
//! are reported: step time, output tok/s, and the mixed/base ratio of each.
//!
//! ```text
//! python3 examples/make_bench_adapters.py $KILN_TEST_MODEL /tmp/bench-adapters
//! cargo run --release --features testing --example bench_lora -- --model $KILN_TEST_MODEL \
//!     --adapters /tmp/bench-adapters [--count 4] [--decode-steps 32] [--streams 1,8,32] \
//!     [--output-json bench-results/lora/FILE.json]
//! ```

use std::time::Instant;

use clap::Parser;
use kiln::config::LoraModule;
use kiln::scheduler::NewRequest;
use kiln::testing::{DirectDriver, direct_engine, drive, greedy_request};
use serde_json::json;

#[path = "common/cpu_info.rs"]
mod cpu_info;

#[derive(Parser)]
struct Args {
    #[arg(long)]
    model: String,
    /// The folder `make_bench_adapters.py` wrote: adapters a1 .. aN (folders, or aK.gguf files
    /// with `--gguf`).
    #[arg(long)]
    adapters: String,
    #[arg(long, default_value_t = 4)]
    count: usize,
    /// Serve the adapters' GGUF conversions (aK.gguf) instead of the PEFT folders.
    #[arg(long)]
    gguf: bool,
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    streams: Vec<usize>,
    #[arg(long, default_value_t = 32)]
    decode_steps: usize,
    #[arg(long, default_value_t = 16)]
    prompt_len: u32,
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    #[arg(long)]
    output_json: Option<String>,
}

/// The adapter stream `i` runs under in the mixed load: adapters 1..=count, then the base.
fn mixed_lora(i: usize, count: usize) -> Option<u32> {
    let slot = i % (count + 1);
    (slot < count).then_some(slot as u32 + 1)
}

/// Decode tok/s of `streams` streams (`lora` picks each one's adapter), timing only the steps
/// in which every stream decodes.
fn decode_rate(
    s: &mut kiln::scheduler::Scheduler,
    r: &mut kiln::executor::model_runner::ModelRunner,
    args: &Args,
    streams: usize,
    round: usize,
    lora: impl Fn(usize) -> Option<u32>,
) -> anyhow::Result<f64> {
    let vocab = 49_000u32;
    for i in 0..streams {
        // Distinct prompts each round, so no prefix is reused from the round before.
        let prompt = (0..args.prompt_len)
            .map(|j| (100 + (j + (i * 1000 + round * 97) as u32) * 37) % vocab)
            .collect();
        s.add(
            NewRequest {
                lora: lora(i),
                ..greedy_request(&format!("r{round}s{i}"), prompt, args.decode_steps as u32 + 1, true)
            },
            Instant::now(),
        )?;
    }
    drive(s, r, |d| {
        while step(d)? < streams as u64 {}
        let (mut tokens, start) = (0u64, Instant::now());
        let mut last = start;
        let mut timing = true;
        while d.has_work() {
            let generated = step(d)?;
            timing &= generated == streams as u64;
            if timing {
                tokens += generated;
                last = Instant::now();
            }
        }
        anyhow::ensure!(tokens > 0, "no step had all {streams} streams decoding");
        Ok(tokens as f64 / (last - start).as_secs_f64())
    })
}

fn step(d: &mut DirectDriver<'_>) -> anyhow::Result<u64> {
    let result = d.step()?.ok_or_else(|| anyhow::anyhow!("no step to run"))?;
    Ok(result.iteration_stats.num_generation_tokens)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let modules: Vec<LoraModule> = (1..=args.count)
        .map(|k| {
            let name = if args.gguf {
                format!("a{k}.gguf")
            } else {
                format!("a{k}")
            };
            LoraModule {
                name: format!("a{k}"),
                path: std::path::Path::new(&args.adapters).join(name).display().to_string(),
                base_model_name: None,
            }
        })
        .collect();
    let path = std::path::Path::new(&args.model);
    let (mut s, mut r) = direct_engine(path, |c| {
        c.engine.kv_cache_memory = "512MiB".into();
        c.lora.enable_lora = true;
        c.lora.lora_modules = modules;
        c.lora.max_loras = args.count;
        c.lora.max_lora_rank = 64;
    })?;
    let load_before = load_average();
    println!("load average before: {load_before}");
    println!("| streams | base step ms | mixed step ms | step ratio | base tok/s | mixed tok/s | tok/s ratio |");
    println!("|---|---|---|---|---|---|---|");
    let mut cases = Vec::new();
    let mut round = 0;
    for &streams in &args.streams {
        let (mut base, mut mixed) = (Vec::new(), Vec::new());
        for _ in 0..args.repeats {
            round += 1;
            base.push(decode_rate(&mut s, &mut r, &args, streams, round, |_| None)?);
            round += 1;
            mixed.push(decode_rate(&mut s, &mut r, &args, streams, round, |i| {
                mixed_lora(i, args.count)
            })?);
        }
        let (base_tps, mixed_tps) = (median(base.clone()), median(mixed.clone()));
        let (base_ms, mixed_ms) = (1e3 * streams as f64 / base_tps, 1e3 * streams as f64 / mixed_tps);
        println!(
            "| {streams} | {base_ms:.2} | {mixed_ms:.2} | {:.2}x | {base_tps:.1} | {mixed_tps:.1} | {:.2}x |",
            mixed_ms / base_ms,
            mixed_tps / base_tps
        );
        cases.push(
            json!({"streams": streams, "base_step_ms": base_ms, "mixed_step_ms": mixed_ms,
            "step_ratio": mixed_ms / base_ms, "base_tok_s": base_tps, "mixed_tok_s": mixed_tps,
            "tok_s_ratio": mixed_tps / base_tps, "base_tok_s_runs": base, "mixed_tok_s_runs": mixed}),
        );
    }
    let load_after = load_average();
    println!("load average after: {load_after}");
    let report = json!({
        "model": args.model, "adapters": args.count, "adapter_format": if args.gguf { "gguf" } else { "peft" },
        "mixed": format!("{} adapters and the base, round robin over the streams", args.count),
        "decode_steps": args.decode_steps, "prompt_len": args.prompt_len, "repeats": args.repeats,
        "cpu": cpu_info::cpu_info(), "load_average_before": load_before, "load_average_after": load_after,
        "cases": cases,
    });
    if let Some(out) = &args.output_json {
        if let Some(dir) = std::path::Path::new(out).parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(out, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}
