//! Times `matmul_packed` on synthetic matrices of issue 27's model shapes (Gemma 3's head and
//! MLP, SmolLM2's) at several token counts: the median over repeats, and GFLOP/s.
//!
//!   RAYON_NUM_THREADS=1 target/release/examples/bench_matmul_shapes 1,8,16,32 [f32|int8] [name filter]
//!
//! The second argument picks the activations (`--cpu-activations`; f32 by default), the third
//! keeps only the shapes whose name contains it. Each line gives the median wall time and
//! the CPU time a call (all threads; steadier than wall time on a shared machine).
use std::time::Instant;

use kiln::kernels::dispatch::{Activations, set_activations};
use kiln::kernels::{GgmlType, PackedMatrix, matmul_packed};
use kiln::model::gguf::quantize;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let tokens_list: Vec<usize> = args
        .get(1)
        .map(|s| s.split(',').map(|t| t.parse().unwrap()).collect())
        .unwrap_or(vec![1, 8, 16, 32]);
    let mode = match args.get(2).map(String::as_str) {
        None | Some("f32") => Activations::F32,
        Some("int8") => Activations::Int8,
        Some(other) => panic!("activations `{other}` are not f32 or int8"),
    };
    set_activations(mode);
    println!("activations: {mode:?}");
    let filter = args.get(3).cloned().unwrap_or_default();
    let shapes = [
        ("gemma head Q8_0", GgmlType::Q8_0, 262144usize, 640usize),
        ("gemma gate_up Q4_1", GgmlType::Q4_1, 4096, 640),
        ("gemma gate_up Q5_0", GgmlType::Q5_0, 4096, 640),
        ("gemma down Q8_0", GgmlType::Q8_0, 640, 2048),
        ("smol gate_up Q4_1", GgmlType::Q4_1, 3072, 576),
        ("smol head Q8_0", GgmlType::Q8_0, 49152, 576),
    ];
    for (name, ty, rows, cols) in shapes.into_iter().filter(|s| s.0.contains(filter.as_str())) {
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 500.0)
            .collect();
        let bytes = quantize(ty, &w).unwrap_or_else(|_| pseudo_random_blocks(ty, rows * cols));
        let m = PackedMatrix::from_ggml(ty, &bytes, rows, cols).unwrap();
        drop(w);
        for &t in &tokens_list {
            let x: Vec<f32> = (0..t * cols).map(|i| (i % 13) as f32 / 13.0 - 0.5).collect();
            let reps = (2e9 / (2.0 * (rows * cols * t) as f64)).clamp(3.0, 200.0) as usize;
            let mut times = Vec::new();
            let cpu_start = cpu_seconds();
            for _ in 0..reps {
                let s = Instant::now();
                std::hint::black_box(matmul_packed(&x, t, &m));
                times.push(s.elapsed().as_secs_f64());
            }
            let cpu = (cpu_seconds() - cpu_start) / reps as f64;
            times.sort_by(f64::total_cmp);
            let med = times[times.len() / 2];
            println!(
                "{name} {rows}x{cols} tokens {t}: {:.3} ms, {:.1} GFLOP/s; CPU time {:.3} ms a call, {:.1} GFLOP/s of CPU",
                med * 1e3,
                2.0 * (rows * cols * t) as f64 / med / 1e9,
                cpu * 1e3,
                2.0 * (rows * cols * t) as f64 / cpu / 1e9
            );
        }
    }
}

/// Seconds this process's threads have run on a CPU (the sum of each thread's
/// `/proc/self/task/*/schedstat`), which a loaded machine's waiting does not inflate.
fn cpu_seconds() -> f64 {
    let mut ns = 0u64;
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task").flatten() {
        if let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) {
            ns += stat
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    ns as f64 / 1e9
}

/// Blocks of `ty` for `elements` weights, for the types `quantize` does not write (Q5_0):
/// pseudo-random bytes under a small f16 scale (the timing does not depend on the values).
fn pseudo_random_blocks(ty: GgmlType, elements: usize) -> Vec<u8> {
    let (block_elements, block_bytes) = ty.block_layout();
    let blocks = elements / block_elements as usize;
    let scale = half::f16::from_f32(0.01).to_le_bytes();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut out = Vec::with_capacity(blocks * block_bytes as usize);
    for _ in 0..blocks {
        out.extend_from_slice(&scale);
        for _ in 2..block_bytes {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            out.push(state as u8);
        }
    }
    out
}
