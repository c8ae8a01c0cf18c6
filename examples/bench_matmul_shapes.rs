//! Times `matmul_packed` on synthetic matrices of issue 27's model shapes (Gemma 3's head and
//! MLP, SmolLM2's) at several token counts: the median over repeats, and GFLOP/s.
//!
//!   RAYON_NUM_THREADS=1 target/release/examples/bench_matmul_shapes 1,8,16,32
use std::time::Instant;

use kiln::kernels::{GgmlType, PackedMatrix, matmul_packed};
use kiln::model::gguf::quantize;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let tokens_list: Vec<usize> = args
        .get(1)
        .map(|s| s.split(',').map(|t| t.parse().unwrap()).collect())
        .unwrap_or(vec![1, 8, 16, 32]);
    let shapes = [
        ("gemma head Q8_0", GgmlType::Q8_0, 262144usize, 640usize),
        ("gemma gate_up Q4_1", GgmlType::Q4_1, 4096, 640),
        ("gemma down Q8_0", GgmlType::Q8_0, 640, 2048),
        ("smol gate_up Q4_1", GgmlType::Q4_1, 3072, 576),
        ("smol head Q8_0", GgmlType::Q8_0, 49152, 576),
    ];
    for (name, ty, rows, cols) in shapes {
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 500.0)
            .collect();
        let bytes = quantize(ty, &w).unwrap();
        let m = PackedMatrix::from_ggml(ty, &bytes, rows, cols).unwrap();
        drop(w);
        for &t in &tokens_list {
            let x: Vec<f32> = (0..t * cols).map(|i| (i % 13) as f32 / 13.0 - 0.5).collect();
            let reps = (2e9 / (2.0 * (rows * cols * t) as f64)).clamp(3.0, 200.0) as usize;
            let mut times = Vec::new();
            for _ in 0..reps {
                let s = Instant::now();
                std::hint::black_box(matmul_packed(&x, t, &m));
                times.push(s.elapsed().as_secs_f64());
            }
            times.sort_by(f64::total_cmp);
            let med = times[times.len() / 2];
            println!(
                "{name} {rows}x{cols} tokens {t}: {:.3} ms, {:.1} GFLOP/s",
                med * 1e3,
                2.0 * (rows * cols * t) as f64 / med / 1e9
            );
        }
    }
}
