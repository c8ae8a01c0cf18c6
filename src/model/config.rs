//! The runtime shape of a Llama-family model, separate from the on-disk config formats
//! (GGUF metadata, Hugging Face `config.json`), as candle does.

use serde::Deserialize;

/// Hyper-parameters the forward pass needs; built from GGUF metadata or `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub rope_theta: f32,
    pub rms_norm_eps: f32,
    /// The context length the model was trained for.
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
}

impl LlamaConfig {
    /// Width of one K (or V) row in the cache: all KV heads of one token.
    pub fn kv_dim(&self) -> usize {
        self.num_kv_heads * self.head_dim
    }

    /// Query heads per KV head (grouped-query attention).
    pub fn group_size(&self) -> usize {
        self.num_heads / self.num_kv_heads
    }

    /// Bytes of K and V for one token across all layers at `bytes_per_value`.
    pub fn kv_bytes_per_token(&self, bytes_per_value: usize) -> usize {
        2 * self.num_layers * self.kv_dim() * bytes_per_value
    }
}

/// The subset of a Hugging Face `config.json` that a Llama needs.
#[derive(Debug, Clone, Deserialize)]
pub struct HfLlamaConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: Option<usize>,
    pub head_dim: Option<usize>,
    /// transformers < 5 writes `rope_theta` here; transformers 5 moves it into
    /// `rope_parameters`.
    pub rope_theta: Option<f32>,
    /// transformers 5: `{"rope_type": "default", "rope_theta": ...}`.
    pub rope_parameters: Option<HfRopeParameters>,
    /// transformers < 5: the scaling of a long-context RoPE (`null` for plain RoPE).
    pub rope_scaling: Option<HfRopeParameters>,
    #[serde(default = "default_rms_eps")]
    pub rms_norm_eps: f32,
    #[serde(default = "default_max_positions")]
    pub max_position_embeddings: usize,
    #[serde(default)]
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<serde_json::Value>,
    pub eos_token_id: Option<serde_json::Value>,
}

/// RoPE settings in either of transformers' layouts.
#[derive(Debug, Clone, Deserialize)]
pub struct HfRopeParameters {
    /// `type` in older configs.
    #[serde(alias = "type")]
    pub rope_type: Option<String>,
    pub rope_theta: Option<f32>,
}

impl HfLlamaConfig {
    /// The RoPE base: top level, then `rope_parameters`, then Llama's default of 10000.
    pub fn rope_theta(&self) -> f32 {
        self.rope_theta
            .or_else(|| self.rope_parameters.as_ref()?.rope_theta)
            .unwrap_or(10_000.0)
    }

    /// A RoPE variant other than the plain one (`llama3`, `yarn`, `linear`, ...), which kiln
    /// does not implement: loading such a model would give wrong answers, not an error.
    pub fn unsupported_rope_type(&self) -> Option<&str> {
        [&self.rope_parameters, &self.rope_scaling]
            .into_iter()
            .flatten()
            .filter_map(|p| p.rope_type.as_deref())
            .find(|t| *t != "default")
    }
}

fn default_rms_eps() -> f32 {
    1e-6
}
fn default_max_positions() -> usize {
    2048
}

impl From<&HfLlamaConfig> for LlamaConfig {
    fn from(hf: &HfLlamaConfig) -> Self {
        let num_kv_heads = hf.num_key_value_heads.unwrap_or(hf.num_attention_heads);
        LlamaConfig {
            vocab_size: hf.vocab_size,
            hidden_size: hf.hidden_size,
            intermediate_size: hf.intermediate_size,
            num_layers: hf.num_hidden_layers,
            num_heads: hf.num_attention_heads,
            num_kv_heads,
            head_dim: hf.head_dim.unwrap_or(hf.hidden_size / hf.num_attention_heads),
            rope_theta: hf.rope_theta(),
            rms_norm_eps: hf.rms_norm_eps,
            max_position_embeddings: hf.max_position_embeddings,
            tie_word_embeddings: hf.tie_word_embeddings,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(rope: serde_json::Value) -> HfLlamaConfig {
        let mut config = serde_json::json!({
            "vocab_size": 32, "hidden_size": 8, "intermediate_size": 16,
            "num_hidden_layers": 1, "num_attention_heads": 2,
        });
        config
            .as_object_mut()
            .unwrap()
            .extend(rope.as_object().unwrap().clone());
        serde_json::from_value(config).expect("parses")
    }

    #[test]
    fn rope_theta_is_read_from_either_transformers_layout() {
        let v4 = parse(serde_json::json!({"rope_theta": 100000.0, "rope_scaling": null}));
        let v5 = parse(serde_json::json!({"rope_parameters": {"rope_type": "default", "rope_theta": 100000.0}}));
        let neither = parse(serde_json::json!({}));
        assert_eq!(LlamaConfig::from(&v4).rope_theta, 100_000.0);
        assert_eq!(LlamaConfig::from(&v5).rope_theta, 100_000.0);
        assert_eq!(LlamaConfig::from(&neither).rope_theta, 10_000.0);
        for plain in [v4, v5, neither] {
            assert_eq!(plain.unsupported_rope_type(), None);
        }
    }

    #[test]
    fn scaled_rope_variants_are_named_as_unsupported() {
        let llama3 = parse(serde_json::json!({"rope_theta": 500000.0,
            "rope_scaling": {"rope_type": "llama3", "factor": 32.0}}));
        let old_linear = parse(serde_json::json!({"rope_scaling": {"type": "linear", "factor": 2.0}}));
        let v5_yarn = parse(serde_json::json!({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6}}));
        assert_eq!(llama3.unsupported_rope_type(), Some("llama3"));
        assert_eq!(old_linear.unsupported_rope_type(), Some("linear"));
        assert_eq!(v5_yarn.unsupported_rope_type(), Some("yarn"));
    }
}
