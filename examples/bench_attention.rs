//! Prefill attention against the packed matmul, in GFLOP/s (issue 31, item 4): one prefill
//! chunk of `--chunk` new tokens at the end of a 2k, 4k and 8k-token context, in the default
//! model's head layout (9 query heads over 3 KV heads of 64), beside a Q4_1 matmul of the
//! same tokens through its gate projection (576 → 1536). Prints a table and JSON with the CPU.
//!
//! ```text
//! cargo run --release --example bench_attention -- [--chunk 512] [--rounds 5] [--output-json FILE]
//! ```
//! Attention FLOPs count QKᵀ and PV over the causal pairs: 4 × heads × head_dim × pairs.

#[path = "common/cpu_info.rs"]
mod cpu_info;

use std::time::Instant;

use clap::Parser;
use kiln::kernels::GgmlType;
use kiln::kernels::attention::{HeadShape, SequenceSpan, paged_attention};
use kiln::kernels::matmul::matmul_packed;
use kiln::kernels::packed::PackedMatrix;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

#[derive(Parser)]
struct Args {
    /// New tokens in the chunk (the step budget keeps long-context chunks about this size).
    #[arg(long, default_value_t = 512)]
    chunk: usize,
    /// Timed runs per case; the best counts (the machine is shared).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    #[arg(long)]
    output_json: Option<String>,
}

const SHAPE: HeadShape = HeadShape {
    num_heads: 9,
    num_kv_heads: 3,
    head_dim: 64,
};

fn random(rng: &mut StdRng, len: usize) -> Vec<f32> {
    (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// Best seconds of `rounds` runs of `f` (after one warm-up run).
fn best_seconds(rounds: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..rounds)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// A Q4_1 matrix of random nibbles with a plausible scale and minimum.
fn q4_1(rng: &mut StdRng, rows: usize, cols: usize) -> PackedMatrix {
    let blocks = rows * cols / 32;
    let mut data = Vec::with_capacity(blocks * 20);
    for _ in 0..blocks {
        data.extend_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
        data.extend_from_slice(&half::f16::from_f32(-0.08).to_le_bytes());
        data.extend((0..16).map(|_| rng.random::<u8>()));
    }
    PackedMatrix::from_ggml(GgmlType::Q4_1, &data, rows, cols).expect("Q4_1 has a packed kernel")
}

fn main() {
    let args = Args::parse();
    let mut rng = StdRng::seed_from_u64(0);
    let (q_width, kv_width) = (SHAPE.num_heads * SHAPE.head_dim, SHAPE.num_kv_heads * SHAPE.head_dim);
    let chunk = args.chunk;

    let (rows, cols) = (1536, 576);
    let w = q4_1(&mut rng, rows, cols);
    let x = random(&mut rng, chunk * cols);
    let matmul_s = best_seconds(args.rounds, || {
        std::hint::black_box(matmul_packed(&x, chunk, &w));
    });
    let matmul_gflops = 2.0 * (chunk * rows * cols) as f64 / matmul_s / 1e9;

    let mut cases = Vec::new();
    println!("| context | chunk | attention ms | attention GFLOP/s | matmul GFLOP/s | ratio |");
    println!("|---|---|---|---|---|---|");
    for context in [2048usize, 4096, 8192] {
        let q = random(&mut rng, chunk * q_width);
        let k = random(&mut rng, context * kv_width);
        let v = random(&mut rng, context * kv_width);
        let slots: Vec<i64> = (0..context as i64).collect();
        let spans = [SequenceSpan {
            first_row: 0,
            len: chunk,
            slots: &slots,
        }];
        let seconds = best_seconds(args.rounds, || {
            std::hint::black_box(paged_attention(&q, &k, &v, &spans, SHAPE));
        });
        // Query i of the chunk sees context - chunk + i + 1 positions.
        let pairs: usize = (0..chunk).map(|i| context - chunk + i + 1).sum();
        let flops = 4.0 * (SHAPE.num_heads * SHAPE.head_dim * pairs) as f64;
        let gflops = flops / seconds / 1e9;
        println!(
            "| {context} | {chunk} | {:.1} | {gflops:.1} | {matmul_gflops:.1} | {:.2} |",
            seconds * 1e3,
            gflops / matmul_gflops
        );
        cases.push(json!({"context": context, "chunk": chunk, "attention_s": seconds,
                          "attention_gflops": gflops, "matmul_gflops": matmul_gflops}));
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let report = json!({
        "cpu": cpu_info::cpu_info(),
        "load_average": load.split_whitespace().take(3).collect::<Vec<_>>(),
        "rayon_threads": rayon::current_num_threads(),
        "head_shape": {"num_heads": SHAPE.num_heads, "num_kv_heads": SHAPE.num_kv_heads, "head_dim": SHAPE.head_dim},
        "matmul": {"type": "Q4_1", "rows": rows, "cols": cols, "tokens": chunk, "seconds": matmul_s, "gflops": matmul_gflops},
        "cases": cases,
    });
    println!("{}", serde_json::to_string_pretty(&report).expect("json"));
    if let Some(path) = args.output_json {
        std::fs::write(&path, report.to_string()).expect("write JSON");
    }
}
