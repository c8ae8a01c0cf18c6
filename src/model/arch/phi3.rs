//! Phi-3: Llama with Q, K and V stored as one fused tensor, gate and up as another, and a
//! sliding window when the model sets one.

use super::{Architecture, Metadata, WeightLayout};
use crate::model::config::ArchFeatures;

pub struct Phi3;

const PHI3_HF_NAMES: &[(&str, &str)] = &[
    ("model.embed_tokens.weight", "token_embd.weight"),
    ("model.norm.weight", "output_norm.weight"),
    ("lm_head.weight", "output.weight"),
    ("input_layernorm.weight", "attn_norm.weight"),
    ("self_attn.qkv_proj.weight", "attn_qkv.weight"),
    ("self_attn.o_proj.weight", "attn_output.weight"),
    ("post_attention_layernorm.weight", "ffn_norm.weight"),
    ("mlp.gate_up_proj.weight", "ffn_up.weight"),
    ("mlp.down_proj.weight", "ffn_down.weight"),
];

impl Architecture for Phi3 {
    fn name(&self) -> &'static str {
        "phi3"
    }

    fn hf_names(&self) -> &'static [&'static str] {
        &["phi3", "Phi3ForCausalLM"]
    }

    fn features(&self, meta: &Metadata<'_>) -> Result<ArchFeatures, String> {
        if let Metadata::Gguf { file, .. } = meta
            && file.tensor_info("rope_factors_long.weight").is_some()
        {
            return Err("Phi-3 with LongRoPE factors (`rope_factors_long`) is not supported".into());
        }
        if let Some(factor) = meta.f32("", "partial_rotary_factor")
            && factor != 1.0
        {
            return Err(format!("partial rotary embedding (factor {factor})"));
        }
        Ok(ArchFeatures {
            sliding_window: meta
                .usize("attention.sliding_window", "sliding_window")
                .filter(|&w| w > 0),
            ..ArchFeatures::default()
        })
    }

    fn layout(&self) -> WeightLayout {
        WeightLayout {
            hf_names: PHI3_HF_NAMES,
            fused_qkv: true,
            fused_gate_up: true,
            gguf_qk_interleaved: false,
            hf_norm_offset: 0.0,
        }
    }
}
