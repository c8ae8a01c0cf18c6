//! The scheduler under pressure, on a real model, without HTTP:
//! 1. time to first token and inter-token latency of short requests while a long prompt is
//!    prefilled, with chunked prefill (a small step budget) and without (one big step);
//! 2. output throughput under a KV budget far too small for the load, recompute vs swap;
//! 3. time to first token of a request whose long prefix is cached, vs uncached.
//!
//! Every step goes through the server's step loop (`kiln::testing::drive`), async
//! scheduling included.
//!
//! ```text
//! cargo run --release --features testing --example bench_scheduler -- --model PATH [--output-json FILE]
//! ```

use std::collections::HashMap;
use std::time::Instant;

use clap::Parser;
use kiln::config::{Config, PreemptionMode};
use kiln::engine::events::TokenEvent;
use kiln::executor::model_runner::ModelRunner;
use kiln::scheduler::{NewRequest, Scheduler};
use kiln::testing::{direct_engine, greedy_request};
use serde_json::json;

#[derive(Parser)]
struct Args {
    /// A GGUF file or Hugging Face folder (e.g. the default model from `kiln fetch-model`).
    #[arg(long)]
    model: String,
    #[arg(long)]
    output_json: Option<String>,
}

fn engine(model: &str, tweak: impl FnOnce(&mut Config)) -> anyhow::Result<(Scheduler, ModelRunner)> {
    direct_engine(std::path::Path::new(model), |c| {
        c.engine.kv_cache_memory = "512MiB".into();
        c.engine.swap_space_gib = 1.0;
        tweak(c)
    })
}

fn request(id: &str, prompt: Vec<u32>, max_tokens: u32) -> NewRequest {
    greedy_request(id, prompt, max_tokens, true)
}

/// Per request: arrival-relative token times (seconds).
type Timeline = HashMap<String, Vec<f64>>;

/// Runs to idle; `inject` may add requests before each step (step index given).
fn drive(s: &mut Scheduler, r: &mut ModelRunner, mut inject: impl FnMut(usize, &mut Scheduler)) -> (Timeline, f64) {
    let start = Instant::now();
    let mut timeline: Timeline = HashMap::new();
    kiln::testing::drive(s, r, |d| {
        let mut step = 0;
        loop {
            inject(step, d.scheduler());
            if !d.has_work() && d.in_flight() == 0 {
                break;
            }
            let Some(result) = d.step().expect("step") else {
                break;
            };
            for (id, event) in result.events {
                if let TokenEvent::Token { .. } = event {
                    timeline.entry(id).or_default().push(start.elapsed().as_secs_f64());
                }
            }
            step += 1;
        }
    });
    (timeline, start.elapsed().as_secs_f64())
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let long_prompt: Vec<u32> = (0..1536).map(|i| 100 + (i * 37) % 20000).collect();
    let short = |i: u32| vec![504 + i, 3575, 282, 4649, 314];
    let mut report = serde_json::Map::new();

    // 1. Short streams while a long prompt is prefilled.
    println!("| prefill | short TTFT mean ms | short ITL mean ms | short ITL max ms |");
    println!("|---|---|---|---|");
    for (label, budget) in [("chunked (256)", 256), ("one step (2048)", 2048)] {
        let (mut s, mut r) = engine(&args.model, |c| c.engine.max_num_batched_tokens = budget)?;
        for i in 0..4 {
            s.add(request(&format!("short{i}"), short(i), 48), Instant::now())?;
        }
        let long = long_prompt.clone();
        let mut arrivals = HashMap::new();
        let (timeline, _) = drive(&mut s, &mut r, |step, s| {
            if step == 4 {
                arrivals.insert("long", Instant::now());
                s.add(request("long", long.clone(), 4), Instant::now())
                    .expect("admitted");
            }
        });
        let (mut ttft, mut itl) = (Vec::new(), Vec::new());
        for i in 0..4 {
            let t = &timeline[&format!("short{i}")];
            ttft.push(t[0] * 1e3);
            itl.extend(t.windows(2).map(|w| (w[1] - w[0]) * 1e3));
        }
        let max_itl = itl.iter().copied().fold(0.0, f64::max);
        println!("| {label} | {:.1} | {:.1} | {:.1} |", mean(&ttft), mean(&itl), max_itl);
        report.insert(
            format!("chunked_prefill_{budget}"),
            json!({"ttft_ms": mean(&ttft), "itl_mean_ms": mean(&itl), "itl_max_ms": max_itl}),
        );
    }

    // 2. Throughput under KV pressure.
    println!("\n| preemption | blocks | requests | output tok/s | preemptions |");
    println!("|---|---|---|---|---|");
    for (mode, preemption) in [("recompute", PreemptionMode::Recompute), ("swap", PreemptionMode::Swap)] {
        let (mut s, mut r) = engine(&args.model, |c| {
            c.engine.num_gpu_blocks_override = 24;
            c.engine.preemption_mode = preemption;
        })?;
        for i in 0..8 {
            s.add(request(&format!("r{i}"), short(i), 64), Instant::now())?;
        }
        let (mut preemptions, mut tokens) = (0, 0);
        let start = Instant::now();
        kiln::testing::drive(&mut s, &mut r, |d| {
            while let Some(step) = d.step().expect("step") {
                preemptions += step.scheduler_stats.num_preemptions;
                tokens += step.iteration_stats.num_generation_tokens;
            }
        });
        let rate = tokens as f64 / start.elapsed().as_secs_f64();
        println!("| {mode} | 24 | 8 | {rate:.1} | {preemptions} |");
        report.insert(
            format!("pressure_{mode}"),
            json!({"output_tok_s": rate, "preemptions": preemptions}),
        );
    }

    // 3. A long cached prefix.
    println!("\n| prefix | TTFT ms |");
    println!("|---|---|");
    let (mut s, mut r) = engine(&args.model, |c| c.engine.enable_prefix_caching = true)?;
    let mut prefixed = long_prompt[..1024].to_vec();
    for (label, tail) in [("uncached", 1u32), ("cached", 2u32)] {
        prefixed.truncate(1024);
        prefixed.extend([3575, tail, 314]);
        s.add(request(label, prefixed.clone(), 1), Instant::now())?;
        let (timeline, _) = drive(&mut s, &mut r, |_, _| {});
        let ttft = timeline[label][0] * 1e3;
        println!("| {label} | {ttft:.1} |");
        report.insert(format!("prefix_{label}_ttft_ms"), json!(ttft));
    }
    if let Some(path) = args.output_json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}
