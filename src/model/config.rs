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
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f32,
    #[serde(default = "default_rms_eps")]
    pub rms_norm_eps: f32,
    #[serde(default = "default_max_positions")]
    pub max_position_embeddings: usize,
    #[serde(default)]
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<serde_json::Value>,
    pub eos_token_id: Option<serde_json::Value>,
}

fn default_rope_theta() -> f32 {
    10_000.0
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
            rope_theta: hf.rope_theta,
            rms_norm_eps: hf.rms_norm_eps,
            max_position_embeddings: hf.max_position_embeddings,
            tie_word_embeddings: hf.tie_word_embeddings,
        }
    }
}
