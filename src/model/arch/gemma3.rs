//! Gemma 3 (text): windowed layers with their own RoPE base between global ones, Q/K norms,
//! `(1 + w)` RMSNorm before and after attention and the MLP, a GELU-tanh gated MLP,
//! embeddings scaled by `sqrt(hidden)`, and a tied head.

use super::{Architecture, Metadata, WeightLayout};
use crate::model::config::{Activation, ArchFeatures};
use crate::model::gguf::GgufValue;

pub struct Gemma3;

const GEMMA3_HF_NAMES: &[(&str, &str)] = &[
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
    ("post_attention_layernorm.weight", "post_attention_norm.weight"),
    ("pre_feedforward_layernorm.weight", "ffn_norm.weight"),
    ("post_feedforward_layernorm.weight", "post_ffw_norm.weight"),
    ("mlp.gate_proj.weight", "ffn_gate.weight"),
    ("mlp.up_proj.weight", "ffn_up.weight"),
    ("mlp.down_proj.weight", "ffn_down.weight"),
];

/// Gemma 3 puts one global layer after every five windowed ones unless told otherwise.
const DEFAULT_PATTERN: usize = 6;

impl Architecture for Gemma3 {
    fn name(&self) -> &'static str {
        "gemma3"
    }

    fn hf_names(&self) -> &'static [&'static str] {
        &["gemma3_text", "Gemma3ForCausalLM"]
    }

    fn features(&self, meta: &Metadata<'_>) -> Result<ArchFeatures, String> {
        let layers = meta.usize("block_count", "num_hidden_layers").ok_or("no layer count")?;
        let hidden = meta.usize("embedding_length", "hidden_size").ok_or("no hidden size")?;
        let heads = meta
            .usize("attention.head_count", "num_attention_heads")
            .ok_or("no head count")?;
        let head_dim = meta.usize("attention.key_length", "head_dim").unwrap_or(hidden / heads);
        for softcap in ["final_logit_softcapping", "attn_logit_softcapping"] {
            if meta.f32(softcap, softcap).is_some_and(|v| v != 0.0) {
                return Err(format!("Gemma 3 with `{softcap}` is not supported"));
            }
        }
        if let Some(act) = meta.hf("hidden_activation").and_then(|v| v.as_str())
            && act != "gelu_pytorch_tanh"
        {
            return Err(format!("Gemma 3 with activation `{act}` is not supported"));
        }
        // Attention scales by `query_pre_attn_scalar ^ -0.5`; llama.cpp's GGUF has no key for
        // it and uses head_dim (hidden / heads for the 62-layer 27B), as here.
        let pre_attn_scalar = match meta {
            Metadata::Hf { .. } => meta.f32("", "query_pre_attn_scalar").unwrap_or(head_dim as f32),
            Metadata::Gguf { .. } if layers == 62 => (hidden / heads) as f32,
            Metadata::Gguf { .. } => head_dim as f32,
        };
        Ok(ArchFeatures {
            qk_norm: true,
            post_norms: true,
            activation: Activation::GeluTanh,
            embedding_scale: (hidden as f32).sqrt(),
            query_scale: (head_dim as f32 / pre_attn_scalar).sqrt(),
            sliding_window: meta
                .usize("attention.sliding_window", "sliding_window")
                .filter(|&w| w > 0),
            sliding_layers: sliding_layers(meta, layers)?,
            local_rope_theta: Some(local_rope_theta(meta)),
            ..ArchFeatures::default()
        })
    }

    /// Gemma 3's own template (google/gemma-3-*-it): base-model conversions such as
    /// gemma-3-270m's GGUF carry none.
    fn default_chat_template(&self) -> Option<&'static str> {
        Some(include_str!("gemma3_chat.jinja"))
    }

    fn layout(&self) -> WeightLayout {
        WeightLayout {
            hf_names: GEMMA3_HF_NAMES,
            gguf_qk_interleaved: false,
            hf_norm_offset: 1.0,
            ..WeightLayout::LLAMA
        }
    }
}

/// Which layers are windowed: `layer_types` (transformers 5), else a pattern of
/// `sliding_window_pattern` (default 6) with the last of each group global.
fn sliding_layers(meta: &Metadata<'_>, layers: usize) -> Result<Vec<bool>, String> {
    if let Some(types) = meta.hf("layer_types").and_then(|v| v.as_array()) {
        if types.len() != layers {
            return Err(format!("{} `layer_types` for {layers} layers", types.len()));
        }
        return Ok(types.iter().map(|t| t.as_str() == Some("sliding_attention")).collect());
    }
    if let Metadata::Gguf { file, arch } = meta
        && let Some(values) = file.get_array(&format!("{arch}.attention.sliding_window_pattern"))
    {
        return Ok(values.iter().map(|v| matches!(v, GgufValue::Bool(true))).collect());
    }
    let pattern = meta
        .usize("attention.sliding_window_pattern", "sliding_window_pattern")
        .unwrap_or(DEFAULT_PATTERN);
    Ok((0..layers).map(|i| pattern == 0 || i % pattern < pattern - 1).collect())
}

/// The windowed layers' RoPE base (10000 unless the model says otherwise).
fn local_rope_theta(meta: &Metadata<'_>) -> f32 {
    match meta {
        Metadata::Hf { config, .. } => config
            .local_rope_theta()
            .or_else(|| meta.f32("", "rope_local_base_freq"))
            .unwrap_or(10_000.0),
        Metadata::Gguf { .. } => meta.f32("rope.freq_base_swa", "").unwrap_or(10_000.0),
    }
}
