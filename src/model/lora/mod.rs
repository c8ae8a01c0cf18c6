//! LoRA adapters (PEFT folders and llama.cpp's GGUF LoRA files) on the base model's projections: loaded once, applied per
//! group of rows beside the base matmul, so one step can mix adapters and the base model.

mod config;
mod gguf;
mod load;
#[cfg(test)]
mod tests;

use std::ops::Range;
use std::path::{Path, PathBuf};

pub use crate::engine::lora::{LayerLora, LoraAdapter, LoraDelta, Target};
pub use config::AdapterConfig;

#[derive(Debug, thiserror::Error)]
pub enum LoraError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Gguf(#[from] crate::model::gguf::GgufError),
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("{path}: unsupported LoRA adapter: {message}")]
    Unsupported { path: PathBuf, message: String },
    #[error("{path}: LoRA rank {rank} is above --max-lora-rank {max_rank}")]
    RankTooLarge {
        path: PathBuf,
        rank: usize,
        max_rank: usize,
    },
    #[error("{path}: {module} does not fit the base model: expected {expected}, found {found}")]
    ShapeMismatch {
        path: PathBuf,
        module: String,
        expected: String,
        found: String,
    },
}

/// Loads the adapter at `path` for the base `model`; `id` is its slot in requests. A folder is
/// read as PEFT's, a file as llama.cpp's GGUF LoRA.
pub fn load_adapter(
    id: u32,
    name: &str,
    path: &Path,
    model: &crate::model::config::ModelConfig,
    max_rank: usize,
) -> Result<LoraAdapter, LoraError> {
    let read = if path.is_file() {
        gguf::read_gguf_adapter(path, model)?
    } else {
        load::read_peft_folder(path, model, max_rank)?
    };
    load::assemble(id, name, path, model, max_rank, read)
}

/// The rows of one step's activations that run under one adapter.
#[derive(Debug, Clone)]
pub struct LoraRows<'a> {
    pub adapter: &'a LoraAdapter,
    pub rows: Range<usize>,
}

/// Below this many multiply-adds a module's delta runs on the calling thread: a decode step of
/// a few rows is not worth the hand-off to the pool.
const PARALLEL_MACS: usize = 1 << 16;

/// Adds every group's deltas for `target` of layer `layer` to the projection output `y`
/// (`[tokens, out_width]`) of the input `x` (`[tokens, in_width]`): shrink (`x·Aᵀ`) then
/// expand (`·Bᵀ`), one adapter group at a time.
pub fn add_lora(
    groups: &[LoraRows<'_>],
    layer: usize,
    target: Target,
    x: &[f32],
    in_width: usize,
    y: &mut [f32],
    out_width: usize,
) {
    for group in groups {
        let rows = group.rows.clone();
        if rows.is_empty() {
            continue;
        }
        let x = &x[rows.start * in_width..rows.end * in_width];
        let y = &mut y[rows.start * out_width..rows.end * out_width];
        for delta in group.adapter.layers[layer].deltas(target) {
            debug_assert_eq!(delta.inputs, in_width);
            add_delta(delta, x, y, out_width);
        }
    }
}

/// One module's delta on one group's rows. The products run matrix-row-major, so each row of
/// A and of B is read once for the whole group (the adapters' weights, not the arithmetic, are
/// what a decode step waits on), and split over the pool by those rows, so one request's step
/// is spread too.
fn add_delta(d: &LoraDelta, x: &[f32], y: &mut [f32], out_width: usize) {
    use rayon::prelude::*;
    let n = x.len() / d.inputs;
    let parallel = n * d.rank * (d.inputs + d.outputs) >= PARALLEL_MACS;
    // shrink: by_rank[k][i] = A_k · x_i
    let mut by_rank = vec![0.0f32; d.rank * n];
    let shrink = |(a_row, out): (&[f32], &mut [f32])| {
        for (o, x_row) in out.iter_mut().zip(x.chunks_exact(d.inputs)) {
            *o = dot(a_row, x_row);
        }
    };
    if parallel {
        d.a.par_chunks_exact(d.inputs)
            .zip(by_rank.par_chunks_exact_mut(n))
            .for_each(shrink);
    } else {
        d.a.chunks_exact(d.inputs)
            .zip(by_rank.chunks_exact_mut(n))
            .for_each(shrink);
    }
    let shrunk: Vec<f32> = (0..n)
        .flat_map(|i| by_rank.iter().skip(i).step_by(n).copied())
        .collect();
    // expand: by_output[o][i] = B_o · shrunk_i
    let mut by_output = vec![0.0f32; d.outputs * n];
    let expand = |(b_row, out): (&[f32], &mut [f32])| {
        for (o, s) in out.iter_mut().zip(shrunk.chunks_exact(d.rank)) {
            *o = dot(b_row, s);
        }
    };
    if parallel {
        d.b.par_chunks_exact(d.rank)
            .zip(by_output.par_chunks_exact_mut(n))
            .with_min_len(32)
            .for_each(expand);
    } else {
        d.b.chunks_exact(d.rank)
            .zip(by_output.chunks_exact_mut(n))
            .for_each(expand);
    }
    for (o, column) in by_output.chunks_exact(n).enumerate() {
        for (i, v) in column.iter().enumerate() {
            y[i * out_width + d.offset + o] += v;
        }
    }
}

/// A dot product in eight lanes, which the compiler turns into SIMD (a plain `sum` of
/// products keeps the serial order and stays scalar).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8.remainder().iter().zip(b8.remainder()).map(|(a, b)| a * b).sum();
    let mut lanes = [0.0f32; 8];
    for (a, b) in a8.zip(b8) {
        // Fixed-size arrays, so the lanes unroll into vector registers.
        let (a, b): (&[f32; 8], &[f32; 8]) = (a.try_into().expect("8"), b.try_into().expect("8"));
        #[allow(clippy::needless_range_loop)] // indexing measured faster than zipped iterators here
        for i in 0..8 {
            lanes[i] += a[i] * b[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}
