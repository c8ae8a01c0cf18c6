//! The engine without HTTP: prefill and decode tokens per second at batch sizes 1, 8 and 32
//! and at one stream deep into a long context, the model's achieved GFLOP/s against the
//! matmul rate measured in the same run, and where a one-stream decode step goes (bytes per
//! token against the memory bandwidth measured in the same run).
//!
//! Every step goes through the server's step loop (`kiln::testing::drive`): with async
//! scheduling on, as `kiln serve` has it by default, the next step is scheduled while the
//! executor thread runs the one before, and the figures include that overlap;
//! `--sync-scheduling` measures the engine without it.
//!
//! Run by `bench_engine` and by `gpu_kit bench`.

use std::time::Instant;

use burn::tensor::{Distribution, Tensor};
use kiln::kernels::GgmlType;
use kiln::kernels::{PackedMatrix, matmul_packed};
use kiln::model::gguf::quantize;
use kiln::model::loader::open_model;
use kiln::model::{Backend, default_device};
use kiln::testing::{DirectDriver, direct_engine, drive, greedy_request};

#[path = "cpu_info.rs"]
mod cpu_info;
#[path = "decode_profile.rs"]
mod decode_profile;
#[path = "reference_check.rs"]
mod reference_check;
use serde_json::json;

/// What to measure; `bench_engine` and `gpu_kit bench` take the same flags.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    pub model: String,
    #[arg(long, default_value_t = 512)]
    pub prefill_len: usize,
    #[arg(long, default_value_t = 32)]
    pub decode_steps: usize,
    #[arg(long)]
    pub output_json: Option<String>,
    /// Widen quantised weights to f32 (burn's matmul) instead of the packed CPU kernel.
    #[arg(long)]
    pub dequantize_weights: bool,
    /// CPU kernels: auto, avx512, avx2 or portable (as `kiln serve --cpu-kernels`).
    #[arg(long, value_enum, default_value = "auto")]
    pub cpu_kernels: kiln::config::CpuKernels,
    /// Activations in the many-token matmuls: f32 or int8 (as `kiln serve --cpu-activations`).
    #[arg(long, value_enum, default_value = "f32")]
    pub cpu_activations: kiln::config::Activations,
    /// Context length of the long-context decode case (its prompt is prefilled first); 0
    /// skips it.
    #[arg(long, default_value_t = 4096)]
    pub long_context: usize,
    /// Streams of the short-context decode cases (comma-separated; empty skips them).
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    pub decode_batches: Vec<usize>,
    /// Prompt tokens of each stream in those cases: 4 by default; 128 or more measures decode
    /// at a serving-like context, where attention is a larger share of the step.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub decode_prompt_len: u32,
    /// Passes over the model's matrices for the one-stream decode profile; 0 skips it.
    #[arg(long, default_value_t = 5)]
    pub profile_passes: usize,
    /// A greedy reference (the format of `../shared/reference/smollm2-greedy.json`) to check
    /// the engine against first; a mismatch ends the run with an error before any figure.
    #[arg(long)]
    pub reference: Option<String>,
    /// Largest allowed first-step logit difference against `--reference`.
    #[arg(long, default_value_t = 1e-3)]
    pub logit_tolerance: f32,
    /// Skip the kernel-rate table (the packed kernels are the CPU's; on a GPU they say nothing
    /// about the device).
    #[arg(long)]
    pub skip_kernel_rates: bool,
    /// Schedule each step only after the one before came back (`kiln serve
    /// --async-scheduling false`); by default the next step is scheduled while one runs.
    #[arg(long)]
    pub sync_scheduling: bool,
    /// The step-time budget (`kiln serve --max-step-ms`; 0: the token budget alone); default:
    /// the server's.
    #[arg(long)]
    pub max_step_ms: Option<f64>,
    /// How the KV cache stores K and V (as `kiln serve --kv-cache-dtype`).
    #[arg(long, value_enum, default_value = "auto")]
    pub kv_cache_dtype: kiln::config::KvCacheDtype,
}

impl Args {
    /// The engine settings every case shares.
    fn engine_config(&self, c: &mut kiln::config::Config) {
        c.model.dequantize_weights = self.dequantize_weights;
        c.engine.cpu_kernels = self.cpu_kernels;
        c.engine.cpu_activations = self.cpu_activations;
        c.engine.kv_cache_dtype = self.kv_cache_dtype;
        c.engine.async_scheduling = !self.sync_scheduling;
        if let Some(ms) = self.max_step_ms {
            c.scheduler.max_step_ms = ms;
        }
    }

    fn scheduling(&self) -> &'static str {
        if self.sync_scheduling { "sync" } else { "async" }
    }
}

/// Median GFLOP/s over 15 runs of `product`, which does `2 · rows · k · n` FLOPs.
fn median_gflops(rows: usize, k: usize, n: usize, mut product: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..15)
        .map(|_| {
            let start = Instant::now();
            product();
            start.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    2.0 * (rows * k * n) as f64 / times[times.len() / 2] / 1e9
}

/// GFLOP/s of burn's `[rows, k] × [k, n]` on the model's backend.
fn matmul_rate(rows: usize, k: usize, n: usize) -> f64 {
    let device = default_device();
    let a = Tensor::<Backend, 2>::random([rows, k], Distribution::Default, &device);
    let b = Tensor::<Backend, 2>::random([k, n], Distribution::Default, &device);
    median_gflops(rows, k, n, || {
        let _ = a.clone().matmul(b.clone()).into_data(); // forces the computation
    })
}

/// GFLOP/s of the packed Q4_1 kernel for `[rows, k] × [n, k]ᵀ`.
fn packed_rate(rows: usize, k: usize, n: usize) -> f64 {
    let weights: Vec<f32> = (0..n * k).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 500.0).collect();
    let bytes = quantize(GgmlType::Q4_1, &weights).expect("whole blocks");
    let w = PackedMatrix::from_ggml(GgmlType::Q4_1, &bytes, n, k).expect("packable");
    let x: Vec<f32> = (0..rows * k).map(|i| (i % 13) as f32 / 13.0).collect();
    median_gflops(rows, k, n, || {
        std::hint::black_box(matmul_packed(&x, rows, &w));
    })
}

/// Runs every case `args` asks for, printing tables and writing the JSON report.
pub fn run(args: Args) -> anyhow::Result<()> {
    let path = std::path::Path::new(&args.model);
    let cfg = open_model(path)?.config;
    // Weight FLOPs per token (2 per multiply-add), without attention and the output head.
    let q = cfg.num_heads * cfg.head_dim;
    let per_layer =
        cfg.hidden_size * (q + 2 * cfg.kv_dim()) + q * cfg.hidden_size + 3 * cfg.hidden_size * cfg.intermediate_size;
    let flops_per_token = 2.0 * (cfg.num_layers * per_layer) as f64;
    let head_flops = 2.0 * (cfg.hidden_size * cfg.vocab_size) as f64;
    let mut report = serde_json::Map::new();
    let kernels = kiln::kernels::KernelPath::chosen(args.cpu_kernels).map_err(anyhow::Error::msg)?;
    kiln::kernels::dispatch::set_active(kernels);
    println!("CPU kernels: {}", kernels.name());
    report.insert("cpu".into(), cpu_info::cpu_info());
    report.insert("cpu_kernels".into(), kernels.name().into());
    kiln::kernels::dispatch::set_activations(args.cpu_activations);
    let activations = match args.cpu_activations {
        kiln::config::Activations::F32 => "f32".to_string(),
        kiln::config::Activations::Int8 => {
            format!("int8 ({})", kiln::kernels::dispatch::int8_kernel_name(kernels))
        }
    };
    println!("CPU activations: {activations}");
    report.insert("cpu_activations".into(), activations.into());
    println!("Scheduling: {} (the server's step loop)", args.scheduling());
    report.insert("async_scheduling".into(), (!args.sync_scheduling).into());
    println!("KV cache dtype: {}", args.kv_cache_dtype.resolved().name());
    report.insert("kv_cache_dtype".into(), args.kv_cache_dtype.resolved().name().into());

    if let Some(reference) = &args.reference {
        println!("| reference case | greedy tokens | first-step logits |");
        println!("|---|---|---|");
        let parity = reference_check::check(path, std::path::Path::new(reference), args.logit_tolerance)?;
        report.insert("reference_parity".into(), parity);
    }

    // The two kernels on the model's largest projection shape, in this run.
    println!("| rows | burn f32 matmul GFLOP/s | packed Q4_1 kernel GFLOP/s |");
    println!("|---|---|---|");
    let mut rates = Vec::new();
    // (rows, burn f32, packed Q4_1) GFLOP/s, kept so the phases below reuse these runs.
    let mut measured: Vec<(usize, f64, f64)> = Vec::new();
    let kernel_rows: &[usize] = if args.skip_kernel_rates {
        &[]
    } else {
        &[1, 8, 32, args.prefill_len]
    };
    for &rows in kernel_rows {
        let dense = matmul_rate(rows, cfg.hidden_size, cfg.intermediate_size);
        let packed = packed_rate(rows, cfg.hidden_size, cfg.intermediate_size);
        println!("| {rows} | {dense:.1} | {packed:.1} |");
        rates.push(json!({"rows": rows, "burn_f32_gflops": dense, "packed_q4_1_gflops": packed}));
        measured.push((rows, dense, packed));
    }
    report.insert("matmul_rates".into(), rates.into());
    // The kernel this run's weights use, at `rows`: from the table above, or measured now for a
    // batch size the table does not have.
    let rate = |rows: usize| {
        if args.skip_kernel_rates {
            return f64::NAN;
        }
        let from_table = measured.iter().find(|m| m.0 == rows);
        match (from_table, args.dequantize_weights) {
            (Some(&(_, dense, _)), true) => dense,
            (Some(&(_, _, packed)), false) => packed,
            (None, true) => matmul_rate(rows, cfg.hidden_size, cfg.intermediate_size),
            (None, false) => packed_rate(rows, cfg.hidden_size, cfg.intermediate_size),
        }
    };

    let (mut s, mut r) = direct_engine(path, |c| {
        c.engine.max_num_batched_tokens = args.prefill_len.max(2048);
        args.engine_config(c);
    })?;
    // Token ids spread over the model's vocabulary (any model, the tiny test one included).
    let vocab = cfg.vocab_size as u32;
    let token = |i: u32| (100 + i * 37) % vocab;
    let prompt: Vec<u32> = (0..args.prefill_len as u32).map(token).collect();
    s.add(greedy_request("prefill", prompt, 1, true), Instant::now())?;
    // Every step until the first token: the step-time budget (`--max-step-ms`) splits the
    // prompt into chunks, as the server does.
    let prefill_s = drive(&mut s, &mut r, |d| {
        let start = Instant::now();
        while d.has_work() {
            step(d)?;
        }
        anyhow::Ok(start.elapsed().as_secs_f64())
    })?;
    let prefill_tps = args.prefill_len as f64 / prefill_s;
    let prefill_rate = rate(args.prefill_len);
    let scheduling = args.scheduling();
    println!("| phase | batch | scheduling | tok/s | achieved GFLOP/s | kernel GFLOP/s at this batch |");
    println!("|---|---|---|---|---|---|");
    let prefill_gflops = prefill_tps * flops_per_token / 1e9;
    println!(
        "| prefill {} tokens | 1 | {scheduling} | {prefill_tps:.1} | {prefill_gflops:.1} | {prefill_rate:.1} |",
        args.prefill_len
    );
    report.insert("prefill".into(), json!({"tokens": args.prefill_len, "tok_s": prefill_tps, "gflops": prefill_gflops, "matmul_gflops": prefill_rate}));

    let decode_context = args.decode_prompt_len as usize + args.decode_steps + 1;
    if !args.decode_batches.is_empty() && decode_context > cfg.max_position_embeddings {
        anyhow::bail!(
            "--decode-prompt-len {} plus {} decode steps exceeds the model's context of {} tokens",
            args.decode_prompt_len,
            args.decode_steps,
            cfg.max_position_embeddings
        );
    }
    for &batch_size in &args.decode_batches {
        let (mut s, mut r) = direct_engine(path, |c| args.engine_config(c))?;
        for i in 0..batch_size {
            s.add(
                greedy_request(
                    &format!("d{i}"),
                    decode_prompt(i as u32, args.decode_prompt_len, vocab),
                    args.decode_steps as u32 + 1,
                    true,
                ),
                Instant::now(),
            )?;
        }
        // Time only the decode steps: every stream has its first token once a step generates
        // one token for each (a budgeted prefill may take several steps and start some
        // streams early).
        let (tps, timed_tokens) = drive(&mut s, &mut r, |d| {
            while step(d)? < batch_size as u64 {}
            decode_rate(d, batch_size as u64)
        })?;
        let gflops = tps * (flops_per_token + head_flops) / 1e9;
        let rate = rate(batch_size);
        println!("| decode | {batch_size} | {scheduling} | {tps:.1} | {gflops:.1} | {rate:.1} |");
        report.insert(
            format!("decode_{batch_size}"),
            json!({"tok_s": tps, "gflops": gflops, "matmul_gflops": rate,
                "prompt_tokens": args.decode_prompt_len, "timed_tokens": timed_tokens}),
        );
    }
    let one_stream_tps = report
        .get("decode_1")
        .and_then(|d| d["tok_s"].as_f64())
        .unwrap_or(f64::NAN);
    // The prompt and its decode steps must fit the model's context.
    let context = args
        .long_context
        .min(cfg.max_position_embeddings.saturating_sub(args.decode_steps + 1));
    if context > 0 {
        let tps = long_context_decode(path, &args, context, vocab)?;
        println!("| decode at {context} tokens of context | 1 | {scheduling} | {tps:.1} | | |");
        report.insert(
            "decode_long_context".into(),
            json!({"context": context, "tok_s": tps, "short_context_tok_s": one_stream_tps}),
        );
    }
    // The profile times the packed CPU kernels on the GGUF's own matrices.
    let packed_gguf = !args.dequantize_weights && path.extension().is_some_and(|e| e == "gguf");
    if args.profile_passes > 0 && packed_gguf {
        // Inside the pool, as the engine runs its forward pass: from outside, every kernel would pay
        // the handoff to rayon that the engine no longer pays.
        let profile = rayon::scope(|_| decode_profile::profile(path, args.profile_passes))?;
        report.insert("decode_profile".into(), print_profile(&profile, one_stream_tps));
    }
    if let Some(path) = args.output_json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}

/// One stream decoding at `context` tokens of context: the prompt is prefilled in
/// chunks first, then only the decode steps are timed.
fn long_context_decode(path: &std::path::Path, args: &Args, context: usize, vocab: u32) -> anyhow::Result<f64> {
    let (mut s, mut r) = direct_engine(path, |c| {
        args.engine_config(c);
        c.engine.kv_cache_memory = "1GiB".into();
    })?;
    let prompt: Vec<u32> = (0..context as u32).map(|i| (100 + i * 37) % vocab).collect();
    s.add(
        greedy_request("long", prompt, args.decode_steps as u32 + 1, true),
        Instant::now(),
    )?;
    drive(&mut s, &mut r, |d| {
        // The prompt is prefilled in chunks until the first token comes.
        while step(d)? == 0 {}
        Ok(decode_rate(d, 1)?.0)
    })
}

/// One engine step as the server runs it (with async scheduling, the next one is sent
/// before this one is waited for); the tokens it generated.
fn step(d: &mut DirectDriver<'_>) -> anyhow::Result<u64> {
    let result = d.step()?.ok_or_else(|| anyhow::anyhow!("no step to run"))?;
    Ok(result.iteration_stats.num_generation_tokens)
}

/// Stream `i`'s prompt of `len` tokens: four fixed ones, then ids spread over the vocabulary.
fn decode_prompt(i: u32, len: u32, vocab: u32) -> Vec<u32> {
    let fixed = [504 + i, 3575, 282, 4649];
    (0..len)
        .map(|j| fixed.get(j as usize).copied().unwrap_or(100 + (j + i * 1000) * 37) % vocab)
        .collect()
}

/// Generated tokens per second of the steps in which all `streams` decode, and those tokens.
/// Timing stops at the first step with fewer (streams that began early finish early); the
/// rest run untimed.
fn decode_rate(d: &mut DirectDriver<'_>, streams: u64) -> anyhow::Result<(f64, u64)> {
    let (mut tokens, start) = (0u64, Instant::now());
    let mut last = start;
    let mut timing = true;
    while d.has_work() {
        let generated = step(d)?;
        timing &= generated == streams;
        if timing {
            tokens += generated;
            last = Instant::now();
        }
    }
    anyhow::ensure!(tokens > 0, "no step had all {streams} streams decoding");
    Ok((tokens as f64 / (last - start).as_secs_f64(), tokens))
}

/// Prints where a one-stream step goes and returns it for the JSON.
fn print_profile(profile: &decode_profile::DecodeProfile, one_stream_tps: f64) -> serde_json::Value {
    let step_ms = 1e3 / one_stream_tps;
    println!("\nOne-stream decode step: {step_ms:.2} ms ({one_stream_tps:.1} tok/s)");
    println!("| part | ms per token | share of the step | weight MB read | GB/s achieved |");
    println!("|---|---|---|---|---|");
    let mut parts = Vec::new();
    let (mut accounted, mut bytes) = (0.0, 0u64);
    for part in &profile.parts {
        let ms = part.seconds_per_token * 1e3;
        accounted += ms;
        bytes += part.bytes;
        let rate = if part.bytes > 0 {
            format!("{:.1}", part.bytes as f64 / part.seconds_per_token / 1e9)
        } else {
            String::new()
        };
        println!(
            "| {} | {ms:.3} | {:.1} % | {:.1} | {rate} |",
            part.name,
            ms / step_ms * 100.0,
            part.bytes as f64 / 1e6
        );
        parts.push(json!({"part": part.name, "ms": ms, "bytes": part.bytes}));
    }
    let rest = step_ms - accounted;
    println!(
        "| the rest (attention, norms, RoPE, residuals, engine) | {rest:.3} | {:.1} % | | |",
        rest / step_ms * 100.0
    );
    let floor_ms = bytes as f64 / profile.bandwidth_gb_s / 1e6;
    println!(
        "Weights read per token: {:.1} MB; memory bandwidth {:.1} GB/s, so the floor is {floor_ms:.2} ms a token \
         ({:.0} tok/s); the step is {:.1}x the floor.",
        bytes as f64 / 1e6,
        profile.bandwidth_gb_s,
        1e3 / floor_ms,
        step_ms / floor_ms
    );
    json!({"step_ms": step_ms, "parts": parts, "rest_ms": rest, "weight_bytes_per_token": bytes,
        "bandwidth_gb_s": profile.bandwidth_gb_s, "bandwidth_floor_ms": floor_ms})
}
