//! A LoRA adapter's weights as plain data (read by `model::lora`, applied by the model), here
//! because run-time loads carry them to the executor inside a step (`step::LoraChange`).

use std::path::PathBuf;

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

    pub(crate) fn deltas_mut(&mut self, target: Target) -> &mut Vec<LoraDelta> {
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
