//! The model seam: one file per architecture, behind [`Architecture`]. The decoder layer is
//! written once (`model::decoder`); an architecture only says, as data, how its layer
//! differs ([`ArchFeatures`]) and how its weights are named and laid out ([`WeightLayout`]).
//!
//! Adding one: a file here implementing the trait, a line in [`ARCHITECTURES`], and a
//! parity fixture under `tests/data/tiny/` (docs/09-design.md, "Adding an architecture").

mod gemma3;
mod llama;
mod mistral;
mod phi3;
mod qwen2;
mod qwen3;

use super::config::{ArchFeatures, HfConfig};
use super::gguf::GgufFile;

/// One architecture: how to recognise it, read its features, and find its weights.
pub trait Architecture: Sync {
    /// The GGUF `general.architecture` value.
    fn name(&self) -> &'static str;
    /// The `config.json` `model_type` values and `architectures` class names it serves.
    fn hf_names(&self) -> &'static [&'static str];
    /// How the layer differs from Llama's, from the model's metadata; an error names what
    /// is set that kiln does not implement.
    fn features(&self, meta: &Metadata<'_>) -> Result<ArchFeatures, String>;
    /// Tensor names and layout; Llama's unless overridden.
    fn layout(&self) -> WeightLayout {
        WeightLayout::LLAMA
    }
}

/// How an architecture stores its weights. Both formats are addressed by GGUF tensor names.
#[derive(Debug, Clone, Copy)]
pub struct WeightLayout {
    /// Hugging Face parameter names → GGUF names, for layer parameters (after
    /// `model.layers.N.`) and the rest alike.
    pub hf_names: &'static [(&'static str, &'static str)],
    /// Q, K and V as one `attn_qkv` tensor (Phi-3) instead of three.
    pub fused_qkv: bool,
    /// Gate and up as one `ffn_up` tensor of twice the rows (Phi-3) instead of two.
    pub fused_gate_up: bool,
    /// GGUF Q/K rows are permuted for llama.cpp's interleaved RoPE (its Llama converter).
    pub gguf_qk_interleaved: bool,
    /// Added to every Hugging Face norm weight (Gemma stores `w` for a `1 + w` gain; its GGUF
    /// converter adds the 1).
    pub hf_norm_offset: f32,
}

impl WeightLayout {
    pub const LLAMA: WeightLayout = WeightLayout {
        hf_names: LLAMA_HF_NAMES,
        fused_qkv: false,
        fused_gate_up: false,
        gguf_qk_interleaved: true,
        hf_norm_offset: 0.0,
    };
}

/// Llama's Hugging Face names; other architectures extend or reuse them.
pub const LLAMA_HF_NAMES: &[(&str, &str)] = &[
    ("model.embed_tokens.weight", "token_embd.weight"),
    ("model.norm.weight", "output_norm.weight"),
    ("lm_head.weight", "output.weight"),
    ("input_layernorm.weight", "attn_norm.weight"),
    ("self_attn.q_proj.weight", "attn_q.weight"),
    ("self_attn.k_proj.weight", "attn_k.weight"),
    ("self_attn.v_proj.weight", "attn_v.weight"),
    ("self_attn.o_proj.weight", "attn_output.weight"),
    ("post_attention_layernorm.weight", "ffn_norm.weight"),
    ("mlp.gate_proj.weight", "ffn_gate.weight"),
    ("mlp.up_proj.weight", "ffn_up.weight"),
    ("mlp.down_proj.weight", "ffn_down.weight"),
];

/// Every supported architecture.
pub static ARCHITECTURES: &[&dyn Architecture] = &[
    &llama::Llama,
    &mistral::Mistral,
    &qwen2::Qwen2,
    &qwen3::Qwen3,
    &gemma3::Gemma3,
    &phi3::Phi3,
];

/// The names kiln supports, for refusals.
pub fn supported_names() -> String {
    ARCHITECTURES.iter().map(|a| a.name()).collect::<Vec<_>>().join(", ")
}

/// The architecture of a GGUF `general.architecture` value.
pub fn by_name(name: &str) -> Option<&'static dyn Architecture> {
    ARCHITECTURES.iter().copied().find(|a| a.name() == name)
}

/// The architecture a `config.json` names: `model_type`, else its `architectures` classes;
/// a config naming neither is taken as Llama (as kiln always did).
pub fn for_hf_config(hf: &HfConfig) -> Result<&'static dyn Architecture, String> {
    let names: Vec<&str> = hf
        .model_type
        .iter()
        .chain(&hf.architectures)
        .map(String::as_str)
        .collect();
    if names.is_empty() {
        return Ok(&llama::Llama);
    }
    ARCHITECTURES
        .iter()
        .copied()
        .find(|a| names.iter().any(|n| a.hf_names().contains(n)))
        .ok_or_else(|| {
            format!(
                "architecture `{}` (supported: {})",
                names.join("` / `"),
                supported_names()
            )
        })
}

/// Qwen's optional windowed layers (`use_sliding_window`, off in every released Qwen2.5 and
/// Qwen3) are refused rather than ignored.
fn refuse_qwen_window(meta: &Metadata<'_>) -> Result<(), String> {
    match meta.hf("use_sliding_window").and_then(|v| v.as_bool()) {
        Some(true) => Err("`use_sliding_window` (Qwen's windowed layers) is not supported".into()),
        _ => Ok(()),
    }
}

/// A model's metadata in either format, read by GGUF key (without the `<arch>.` prefix) or
/// `config.json` key.
pub enum Metadata<'a> {
    Gguf {
        file: &'a GgufFile,
        arch: &'a str,
    },
    Hf {
        config: &'a HfConfig,
        json: &'a serde_json::Value,
    },
}

impl Metadata<'_> {
    /// An unsigned integer (JSON `null` reads as absent).
    pub fn usize(&self, gguf_key: &str, hf_key: &str) -> Option<usize> {
        match self {
            Metadata::Gguf { file, arch } => file.get_u32(&format!("{arch}.{gguf_key}")).map(|v| v as usize),
            Metadata::Hf { json, .. } => json.get(hf_key)?.as_u64().map(|v| v as usize),
        }
    }

    pub fn f32(&self, gguf_key: &str, hf_key: &str) -> Option<f32> {
        match self {
            Metadata::Gguf { file, arch } => file.get_f32(&format!("{arch}.{gguf_key}")),
            Metadata::Hf { json, .. } => json.get(hf_key)?.as_f64().map(|v| v as f32),
        }
    }

    /// A `config.json` value (GGUF files have none).
    pub fn hf(&self, key: &str) -> Option<&serde_json::Value> {
        match self {
            Metadata::Gguf { .. } => None,
            Metadata::Hf { json, .. } => json.get(key).filter(|v| !v.is_null()),
        }
    }

    /// Whether this is a GGUF file's metadata.
    pub fn is_gguf(&self) -> bool {
        matches!(self, Metadata::Gguf { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hf(extra: serde_json::Value) -> HfConfig {
        crate::model::config::minimal_hf_config(extra)
    }

    #[test]
    fn hf_configs_pick_their_architecture_or_are_refused_naming_the_supported_list() {
        let by_type = for_hf_config(&hf(serde_json::json!({"model_type": "llama"}))).expect("llama");
        assert_eq!(by_type.name(), "llama");
        let by_class = for_hf_config(&hf(serde_json::json!({"architectures": ["LlamaForCausalLM"]})));
        assert_eq!(by_class.expect("llama").name(), "llama");
        let err = for_hf_config(&hf(serde_json::json!({"model_type": "falcon"})))
            .err()
            .expect("refused");
        assert!(err.contains("falcon") && err.contains("llama"), "{err}");
        assert!(by_name("falcon").is_none());
    }
}
