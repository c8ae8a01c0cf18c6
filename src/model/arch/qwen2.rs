//! Qwen2 / Qwen2.5: Llama with biases on the Q, K and V projections.

use super::{Architecture, Metadata, WeightLayout, refuse_qwen_window};
use crate::model::config::ArchFeatures;

pub struct Qwen2;

/// Llama's names plus the Q/K/V biases.
pub(super) const QWEN2_HF_NAMES: &[(&str, &str)] = &[
    ("model.embed_tokens.weight", "token_embd.weight"),
    ("model.norm.weight", "output_norm.weight"),
    ("lm_head.weight", "output.weight"),
    ("input_layernorm.weight", "attn_norm.weight"),
    ("self_attn.q_proj.weight", "attn_q.weight"),
    ("self_attn.k_proj.weight", "attn_k.weight"),
    ("self_attn.v_proj.weight", "attn_v.weight"),
    ("self_attn.q_proj.bias", "attn_q.bias"),
    ("self_attn.k_proj.bias", "attn_k.bias"),
    ("self_attn.v_proj.bias", "attn_v.bias"),
    ("self_attn.o_proj.weight", "attn_output.weight"),
    ("post_attention_layernorm.weight", "ffn_norm.weight"),
    ("mlp.gate_proj.weight", "ffn_gate.weight"),
    ("mlp.up_proj.weight", "ffn_up.weight"),
    ("mlp.down_proj.weight", "ffn_down.weight"),
];

impl Architecture for Qwen2 {
    fn name(&self) -> &'static str {
        "qwen2"
    }

    fn hf_names(&self) -> &'static [&'static str] {
        &["qwen2", "Qwen2ForCausalLM"]
    }

    fn features(&self, meta: &Metadata<'_>) -> Result<ArchFeatures, String> {
        refuse_qwen_window(meta)?;
        Ok(ArchFeatures {
            qkv_bias: true,
            ..ArchFeatures::default()
        })
    }

    fn layout(&self) -> WeightLayout {
        WeightLayout {
            hf_names: QWEN2_HF_NAMES,
            gguf_qk_interleaved: false,
            ..WeightLayout::LLAMA
        }
    }
}
