//! Qwen3 (dense): Llama with a per-head RMSNorm of Q and K before RoPE.

use super::{Architecture, Metadata, WeightLayout, refuse_qwen_window};
use crate::model::config::ArchFeatures;

pub struct Qwen3;

/// Llama's names plus the Q/K norms.
const QWEN3_HF_NAMES: &[(&str, &str)] = &[
    ("model.embed_tokens.weight", "token_embd.weight"),
    ("model.norm.weight", "output_norm.weight"),
    ("lm_head.weight", "output.weight"),
    ("input_layernorm.weight", "attn_norm.weight"),
    ("self_attn.q_proj.weight", "attn_q.weight"),
    ("self_attn.k_proj.weight", "attn_k.weight"),
    ("self_attn.v_proj.weight", "attn_v.weight"),
    ("self_attn.q_norm.weight", "attn_q_norm.weight"),
    ("self_attn.k_norm.weight", "attn_k_norm.weight"),
    ("self_attn.o_proj.weight", "attn_output.weight"),
    ("post_attention_layernorm.weight", "ffn_norm.weight"),
    ("mlp.gate_proj.weight", "ffn_gate.weight"),
    ("mlp.up_proj.weight", "ffn_up.weight"),
    ("mlp.down_proj.weight", "ffn_down.weight"),
];

impl Architecture for Qwen3 {
    fn name(&self) -> &'static str {
        "qwen3"
    }

    fn hf_names(&self) -> &'static [&'static str] {
        &["qwen3", "Qwen3ForCausalLM"]
    }

    fn features(&self, meta: &Metadata<'_>) -> Result<ArchFeatures, String> {
        refuse_qwen_window(meta)?;
        if meta.hf("attention_bias").and_then(|v| v.as_bool()) == Some(true) {
            return Err("Qwen3 with `attention_bias` is not supported".into());
        }
        Ok(ArchFeatures {
            qk_norm: true,
            ..ArchFeatures::default()
        })
    }

    fn layout(&self) -> WeightLayout {
        WeightLayout {
            hf_names: QWEN3_HF_NAMES,
            gguf_qk_interleaved: false,
            ..WeightLayout::LLAMA
        }
    }
}
