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

/// Adds every group's deltas for `target` of layer `layer` to the projection output `y`
/// (`[tokens, out_width]`) of the input `x` (`[tokens, in_width]`): a plain f32 loop, shrink
/// (`x·Aᵀ`) then expand (`·Bᵀ`) per row.
pub fn add_lora(
    groups: &[LoraRows<'_>],
    layer: usize,
    target: Target,
    x: &[f32],
    in_width: usize,
    y: &mut [f32],
    out_width: usize,
) {
    let mut shrunk = Vec::new();
    for group in groups {
        for d in group.adapter.layers[layer].deltas(target) {
            debug_assert_eq!(d.inputs, in_width);
            shrunk.resize(d.rank, 0.0);
            for row in group.rows.clone() {
                let x_row = &x[row * in_width..(row + 1) * in_width];
                for (s, a_row) in shrunk.iter_mut().zip(d.a.chunks_exact(d.inputs)) {
                    *s = a_row.iter().zip(x_row).map(|(a, x)| a * x).sum();
                }
                let y_row = &mut y[row * out_width + d.offset..row * out_width + d.offset + d.outputs];
                for (y, b_row) in y_row.iter_mut().zip(d.b.chunks_exact(d.rank)) {
                    *y += b_row.iter().zip(&shrunk).map(|(b, s)| b * s).sum::<f32>();
                }
            }
        }
    }
}
