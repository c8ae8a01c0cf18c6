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

/// Below this many multiply-adds a projection's deltas run on the calling thread: a decode
/// step of a few rows is not worth the hand-off to the pool.
const PARALLEL_MACS: usize = 1 << 16;

/// Adds every group's deltas for `target` of layer `layer` to the projection output `y`
/// (`[tokens, out_width]`) of the input `x` (`[tokens, in_width]`): per row, shrink (`x·Aᵀ`)
/// then expand (`·Bᵀ`), the rows spread over the pool when there is enough work.
pub fn add_lora(
    groups: &[LoraRows<'_>],
    layer: usize,
    target: Target,
    x: &[f32],
    in_width: usize,
    y: &mut [f32],
    out_width: usize,
) {
    let tokens = y.len() / out_width.max(1);
    let mut deltas_of: Vec<&[LoraDelta]> = vec![&[]; tokens];
    let mut macs = 0;
    for group in groups {
        let deltas = group.adapter.layers[layer].deltas(target);
        let per_row: usize = deltas.iter().map(|d| d.rank * (d.inputs + d.outputs)).sum();
        for row in group.rows.clone() {
            deltas_of[row] = deltas;
            macs += per_row;
        }
    }
    if macs == 0 {
        return;
    }
    let apply = |(row, y_row): (usize, &mut [f32])| {
        let x_row = &x[row * in_width..(row + 1) * in_width];
        let mut shrunk = Vec::new();
        for d in deltas_of[row] {
            debug_assert_eq!(d.inputs, in_width);
            shrunk.clear();
            shrunk.extend(d.a.chunks_exact(d.inputs).map(|a_row| dot(a_row, x_row)));
            for (y, b_row) in y_row[d.offset..d.offset + d.outputs]
                .iter_mut()
                .zip(d.b.chunks_exact(d.rank))
            {
                *y += dot(b_row, &shrunk);
            }
        }
    };
    if macs < PARALLEL_MACS {
        y.chunks_exact_mut(out_width).enumerate().for_each(apply);
    } else {
        use rayon::prelude::*;
        y.par_chunks_exact_mut(out_width).enumerate().for_each(apply);
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
