//! The runtime shape of a decoder-only model, separate from the on-disk config formats
//! (GGUF metadata, Hugging Face `config.json`), as candle does. What differs between
//! architectures is data here ([`ArchFeatures`]), read by the files under `arch/`.

use serde::Deserialize;

use super::rope::scaling::RopeScaling;

/// Hyper-parameters the forward pass needs; built from GGUF metadata or `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// The architecture's GGUF name (`llama`, `qwen3`, ...), which picks its `arch/` file.
    pub architecture: &'static str,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub rope_theta: f32,
    /// Long-context scaling of the RoPE frequencies (of every layer without a local base).
    pub rope_scaling: RopeScaling,
    pub rms_norm_eps: f32,
    /// The context length the model was trained for.
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
    pub features: ArchFeatures,
}

/// How an architecture's decoder layer differs from Llama's; the default is Llama.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchFeatures {
    /// Q, K and V projections carry biases (Qwen2).
    pub qkv_bias: bool,
    /// Q and K are RMS-normalised per head before RoPE (Qwen3, Gemma 3).
    pub qk_norm: bool,
    /// The attention and MLP outputs are RMS-normalised before the residual add (Gemma 3).
    pub post_norms: bool,
    pub activation: Activation,
    /// Embeddings are multiplied by this (Gemma: `sqrt(hidden)`).
    pub embedding_scale: f32,
    /// Queries are multiplied by this on top of attention's `1 / sqrt(head_dim)` (Gemma 3's
    /// `query_pre_attn_scalar`).
    pub query_scale: f32,
    /// The number of positions a windowed layer sees, itself included (`None`: no window).
    pub sliding_window: Option<usize>,
    /// Per layer, whether it attends through the window (empty: every layer, when one is set).
    pub sliding_layers: Vec<bool>,
    /// The RoPE base of the windowed layers, when it differs from `rope_theta` (Gemma 3);
    /// those layers use no scaling.
    pub local_rope_theta: Option<f32>,
}

/// The gated MLP's activation: `down(act(gate) * up)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Silu,
    /// GELU with the tanh approximation (`gelu_pytorch_tanh`).
    GeluTanh,
}

impl Default for ArchFeatures {
    fn default() -> Self {
        Self {
            qkv_bias: false,
            qk_norm: false,
            post_norms: false,
            activation: Activation::Silu,
            embedding_scale: 1.0,
            query_scale: 1.0,
            sliding_window: None,
            sliding_layers: Vec::new(),
            local_rope_theta: None,
        }
    }
}

impl ModelConfig {
    /// Width of one K (or V) row in the cache: all KV heads of one token.
    pub fn kv_dim(&self) -> usize {
        self.num_kv_heads * self.head_dim
    }

    /// Width of the query rows: all query heads of one token.
    pub fn q_dim(&self) -> usize {
        self.num_heads * self.head_dim
    }

    /// Bytes of K and V for one token across all layers at `bytes_per_value`.
    pub fn kv_bytes_per_token(&self, bytes_per_value: usize) -> usize {
        2 * self.num_layers * self.kv_dim() * bytes_per_value
    }

    /// The window layer `index` attends through, if any.
    pub fn layer_window(&self, index: usize) -> Option<usize> {
        let f = &self.features;
        let windowed = f
            .sliding_layers
            .get(index)
            .copied()
            .unwrap_or(f.sliding_layers.is_empty());
        f.sliding_window.filter(|_| windowed)
    }

    /// A Llama of the given shape (tests and the tiny-model writer).
    #[allow(clippy::too_many_arguments)]
    pub fn llama(
        vocab_size: usize,
        hidden_size: usize,
        intermediate_size: usize,
        num_layers: usize,
        num_heads: usize,
        num_kv_heads: usize,
        head_dim: usize,
        max_position_embeddings: usize,
    ) -> Self {
        Self {
            architecture: "llama",
            vocab_size,
            hidden_size,
            intermediate_size,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            rope_theta: 10_000.0,
            rope_scaling: RopeScaling::None,
            rms_norm_eps: 1e-5,
            max_position_embeddings,
            tie_word_embeddings: true,
            features: ArchFeatures::default(),
        }
    }
}

/// The architecture-independent subset of a Hugging Face `config.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct HfConfig {
    pub model_type: Option<String>,
    #[serde(default)]
    pub architectures: Vec<String>,
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
    /// transformers 5: `{"rope_type": "default", "rope_theta": ...}`, or one such object per
    /// layer type (`full_attention`, `sliding_attention`).
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
#[derive(Debug, Clone, Default, Deserialize)]
pub struct HfRopeParameters {
    /// `type` in older configs.
    #[serde(alias = "type")]
    pub rope_type: Option<String>,
    pub rope_theta: Option<f32>,
    pub factor: Option<f32>,
    pub low_freq_factor: Option<f32>,
    pub high_freq_factor: Option<f32>,
    pub original_max_position_embeddings: Option<usize>,
    /// transformers 5, per layer type: the global layers' RoPE.
    pub full_attention: Option<Box<HfRopeParameters>>,
    /// transformers 5, per layer type: the windowed layers' RoPE.
    pub sliding_attention: Option<Box<HfRopeParameters>>,
}

impl HfConfig {
    /// The global layers' RoPE parameters: `rope_parameters` (its `full_attention` entry
    /// when split per layer type), else `rope_scaling`.
    fn global_rope(&self) -> Option<&HfRopeParameters> {
        match &self.rope_parameters {
            Some(p) => Some(p.full_attention.as_deref().unwrap_or(p)),
            None => self.rope_scaling.as_ref(),
        }
    }

    /// The RoPE base: top level, then `rope_parameters`, then Llama's default of 10000.
    pub fn rope_theta(&self) -> f32 {
        self.rope_theta
            .or_else(|| self.global_rope()?.rope_theta)
            .unwrap_or(10_000.0)
    }

    /// The RoPE scaling of the global layers; an unimplemented variant is an error naming it
    /// (loading it would give wrong answers, not an error).
    pub fn rope_scaling(&self, head_dim: usize) -> Result<RopeScaling, String> {
        let Some(p) = self.global_rope() else {
            return Ok(RopeScaling::None);
        };
        let factor = || p.factor.ok_or("RoPE scaling without a `factor`".to_string());
        match p.rope_type.as_deref().unwrap_or("default") {
            "default" => Ok(RopeScaling::None),
            "linear" => Ok(RopeScaling::Linear(factor()?)),
            "llama3" => Ok(RopeScaling::llama3(
                head_dim,
                self.rope_theta(),
                factor()?,
                p.low_freq_factor.unwrap_or(1.0),
                p.high_freq_factor.unwrap_or(4.0),
                p.original_max_position_embeddings.unwrap_or(8192),
            )),
            other => Err(format!(
                "RoPE type {other:?} is not supported (kiln implements default, linear and llama3)"
            )),
        }
    }

    /// The windowed layers' RoPE base, when `rope_parameters` is split per layer type.
    pub fn local_rope_theta(&self) -> Option<f32> {
        self.rope_parameters.as_ref()?.sliding_attention.as_ref()?.rope_theta
    }
}

fn default_rms_eps() -> f32 {
    1e-6
}
fn default_max_positions() -> usize {
    2048
}

/// Tests: the smallest `config.json` that parses, with `extra`'s keys added or replaced.
#[cfg(test)]
pub(crate) fn minimal_hf_config(extra: serde_json::Value) -> HfConfig {
    let mut config = serde_json::json!({
        "vocab_size": 32, "hidden_size": 8, "intermediate_size": 16,
        "num_hidden_layers": 1, "num_attention_heads": 2,
    });
    config
        .as_object_mut()
        .expect("an object")
        .extend(extra.as_object().expect("an object").clone());
    serde_json::from_value(config).expect("parses")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(rope: serde_json::Value) -> HfConfig {
        minimal_hf_config(rope)
    }

    #[test]
    fn rope_theta_is_read_from_either_transformers_layout() {
        let v4 = parse(serde_json::json!({"rope_theta": 100000.0, "rope_scaling": null}));
        let v5 = parse(serde_json::json!({"rope_parameters": {"rope_type": "default", "rope_theta": 100000.0}}));
        let per_layer = parse(serde_json::json!({"rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 100000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10.0}}}));
        let neither = parse(serde_json::json!({}));
        assert_eq!(v4.rope_theta(), 100_000.0);
        assert_eq!(v5.rope_theta(), 100_000.0);
        assert_eq!(per_layer.rope_theta(), 100_000.0);
        assert_eq!(per_layer.local_rope_theta(), Some(10.0));
        assert_eq!(neither.rope_theta(), 10_000.0);
        for plain in [v4, v5, neither, per_layer] {
            assert_eq!(plain.rope_scaling(4), Ok(RopeScaling::None));
        }
    }

    #[test]
    fn scaled_rope_variants_are_read_or_named_as_unsupported() {
        let llama3 = parse(serde_json::json!({"rope_theta": 500000.0,
            "rope_scaling": {"rope_type": "llama3", "factor": 32.0}}));
        let old_linear = parse(serde_json::json!({"rope_scaling": {"type": "linear", "factor": 2.0}}));
        let v5_yarn = parse(serde_json::json!({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6}}));
        assert!(matches!(llama3.rope_scaling(4), Ok(RopeScaling::Frequencies(f)) if f.len() == 2));
        assert_eq!(old_linear.rope_scaling(4), Ok(RopeScaling::Linear(2.0)));
        let err = v5_yarn.rope_scaling(4).expect_err("yarn is refused");
        assert!(err.contains("yarn"), "{err}");
    }
}
