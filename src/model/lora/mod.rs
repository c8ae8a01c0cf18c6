//! LoRA adapters (PEFT folders) on the base model's projections: loaded once, applied per
//! group of rows beside the base matmul, so one step can mix adapters and the base model.

mod config;
mod load;
#[cfg(test)]
mod tests;

use std::ops::Range;
use std::path::PathBuf;

pub use config::AdapterConfig;
pub use load::load_adapter;

#[derive(Debug, thiserror::Error)]
pub enum LoraError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
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

/// The fused projection of a decoder layer an adapter module adds to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Qkv,
    AttnOut,
    GateUp,
    Down,
}

/// One module's low-rank update: `y[.., offset .. offset + outputs] += (x·Aᵀ)·Bᵀ`, with
/// the adapter's scaling already folded into B.
#[derive(Debug, Clone)]
pub struct LoraDelta {
    /// `[rank, inputs]`
    pub a: Vec<f32>,
    /// `[outputs, rank]`, times the scaling.
    pub b: Vec<f32>,
    pub rank: usize,
    pub inputs: usize,
    /// First output column of the fused projection this module writes.
    pub offset: usize,
    pub outputs: usize,
}

/// An adapter's deltas on one layer, by fused projection.
#[derive(Debug, Clone, Default)]
pub struct LayerLora {
    pub qkv: Vec<LoraDelta>,
    pub attn_out: Vec<LoraDelta>,
    pub gate_up: Vec<LoraDelta>,
    pub down: Vec<LoraDelta>,
}

impl LayerLora {
    pub fn deltas(&self, target: Target) -> &[LoraDelta] {
        match target {
            Target::Qkv => &self.qkv,
            Target::AttnOut => &self.attn_out,
            Target::GateUp => &self.gate_up,
            Target::Down => &self.down,
        }
    }

    fn deltas_mut(&mut self, target: Target) -> &mut Vec<LoraDelta> {
        match target {
            Target::Qkv => &mut self.qkv,
            Target::AttnOut => &mut self.attn_out,
            Target::GateUp => &mut self.gate_up,
            Target::Down => &mut self.down,
        }
    }
}

/// A loaded adapter.
#[derive(Debug, Clone)]
pub struct LoraAdapter {
    /// Its id in requests (vLLM's `lora_int_id`, from 1).
    pub id: u32,
    pub name: String,
    pub path: PathBuf,
    pub rank: usize,
    /// The base model the adapter says it was trained on.
    pub base_model_name_or_path: Option<String>,
    /// One entry per base layer (empty deltas where the adapter leaves a layer alone).
    pub layers: Vec<LayerLora>,
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
