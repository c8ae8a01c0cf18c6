//! Opens a model path (a `.gguf` file or a Hugging Face folder) and returns everything the
//! server needs: the runtime config, tokenizer, special tokens, chat template and weights.

use std::path::{Path, PathBuf};

use tokenizers::Tokenizer;

use super::arch::{self, Metadata};
use super::config::{HfConfig, ModelConfig};
use super::error::ModelError;
use super::gguf::GgufFile;
use super::rope::scaling::RopeScaling;
use super::sources::{GgufWeights, SafetensorsWeights};
use super::weights::WeightSource;
use crate::tokenizer::{SpecialTokens, hf_folder_tokenizer, token_id_bound, tokenizer_from_vocab};

/// A model on disk, opened and described, weights not yet on the device.
pub struct ModelFiles {
    pub name: String,
    pub config: ModelConfig,
    pub tokenizer: Tokenizer,
    pub special_tokens: SpecialTokens,
    /// The model's Jinja chat template, if it ships one.
    pub chat_template: Option<String>,
    pub weights: Box<dyn WeightSource + Send>,
}

/// Opens `path` as GGUF (a file) or a Hugging Face folder (a directory).
pub fn open_model(path: &Path) -> Result<ModelFiles, ModelError> {
    if path.is_dir() {
        open_hf_folder(path)
    } else if path.exists() {
        open_gguf(path)
    } else {
        Err(ModelError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or folder"),
        })
    }
}

fn open_gguf(path: &Path) -> Result<ModelFiles, ModelError> {
    let file = GgufFile::open(path)?;
    let name = file.get_str("general.architecture").unwrap_or("llama");
    let unsupported = |message: String| ModelError::Unsupported {
        path: path.to_path_buf(),
        message,
    };
    let architecture = arch::by_name(name).ok_or_else(|| {
        unsupported(format!(
            "architecture `{name}` (supported: {})",
            arch::supported_names()
        ))
    })?;
    let arch = architecture.name();
    let key = |k: &str| format!("{arch}.{k}");
    let required = |k: &str| {
        file.get_u32(&key(k))
            .map(|v| v as usize)
            .ok_or_else(|| ModelError::InvalidFile {
                path: path.to_path_buf(),
                message: format!("metadata key `{}` is missing", key(k)),
            })
    };
    let hidden_size = required("embedding_length")?;
    let num_heads = required("attention.head_count")?;
    let num_kv_heads = file
        .get_u32(&key("attention.head_count_kv"))
        .map_or(num_heads, |v| v as usize);
    let vocab = file.tokenizer_vocab();
    let tokenizer = tokenizer_from_vocab(&vocab)?;
    let vocab_size = file
        .get_u32(&key("vocab_size"))
        .map(|v| v as usize)
        .unwrap_or_else(|| tokenizer.get_vocab_size(true));
    let head_dim = file
        .get_u32(&key("attention.key_length"))
        .or_else(|| file.get_u32(&key("rope.dimension_count")))
        .map_or(hidden_size / num_heads.max(1), |v| v as usize);
    if let Some(rotary) = file.get_u32(&key("rope.dimension_count"))
        && rotary as usize != head_dim
    {
        return Err(unsupported(format!(
            "partial rotary embedding ({rotary} of {head_dim} dimensions)"
        )));
    }
    let meta = Metadata::Gguf { file: &file, arch };
    let features = architecture.features(&meta).map_err(unsupported)?;
    let config = ModelConfig {
        architecture: arch,
        vocab_size,
        hidden_size,
        intermediate_size: required("feed_forward_length")?,
        num_layers: required("block_count")?,
        num_heads,
        num_kv_heads,
        head_dim,
        rope_theta: file.get_f32(&key("rope.freq_base")).unwrap_or(10_000.0),
        rope_scaling: gguf_rope_scaling(&file, arch, head_dim).map_err(unsupported)?,
        rms_norm_eps: file.get_f32(&key("attention.layer_norm_rms_epsilon")).unwrap_or(1e-5),
        max_position_embeddings: required("context_length")?,
        tie_word_embeddings: file.tensor_info("output.weight").is_none(),
        features,
    };
    check_config(&config, path)?;
    check_vocabulary(&tokenizer, &config, path)?;
    let special_tokens = SpecialTokens::from_vocab(&vocab);
    let chat_template = file
        .get_str("tokenizer.chat_template")
        .map(str::to_string)
        .or_else(|| architecture_chat_template(architecture));
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "model".into());
    let name = name.split('.').next().unwrap_or(&name).to_string();
    Ok(ModelFiles {
        name,
        config,
        tokenizer,
        special_tokens,
        chat_template,
        weights: Box::new(GgufWeights::new(file, path.to_path_buf())),
    })
}

fn open_hf_folder(dir: &Path) -> Result<ModelFiles, ModelError> {
    let config_path = dir.join("config.json");
    let text = std::fs::read_to_string(&config_path).map_err(|source| ModelError::Io {
        path: config_path.clone(),
        source,
    })?;
    let invalid = |message: String| ModelError::InvalidFile {
        path: config_path.clone(),
        message,
    };
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    let hf: HfConfig = serde_json::from_value(json.clone()).map_err(|e| invalid(e.to_string()))?;
    let architecture = arch::for_hf_config(&hf).map_err(|message| ModelError::Unsupported {
        path: config_path.clone(),
        message,
    })?;
    let head_dim = hf.head_dim.unwrap_or(hf.hidden_size / hf.num_attention_heads.max(1));
    let meta = Metadata::Hf {
        config: &hf,
        json: &json,
    };
    let config = ModelConfig {
        architecture: architecture.name(),
        vocab_size: hf.vocab_size,
        hidden_size: hf.hidden_size,
        intermediate_size: hf.intermediate_size,
        num_layers: hf.num_hidden_layers,
        num_heads: hf.num_attention_heads,
        num_kv_heads: hf.num_key_value_heads.unwrap_or(hf.num_attention_heads),
        head_dim,
        rope_theta: hf.rope_theta(),
        rope_scaling: hf.rope_scaling(head_dim).map_err(invalid)?,
        rms_norm_eps: hf.rms_norm_eps,
        max_position_embeddings: hf.max_position_embeddings,
        tie_word_embeddings: hf.tie_word_embeddings,
        features: architecture.features(&meta).map_err(invalid)?,
    };
    check_config(&config, &config_path)?;
    let (tokenizer, special_tokens) = hf_folder_tokenizer(dir)?;
    check_vocabulary(&tokenizer, &config, &config_path)?;
    let chat_template = read_hf_chat_template(dir).or_else(|| architecture_chat_template(architecture));
    let name = dir
        .file_name()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "model".into());
    Ok(ModelFiles {
        name,
        config,
        tokenizer,
        special_tokens,
        chat_template,
        weights: Box::new(SafetensorsWeights::open(dir, architecture.layout())?),
    })
}

/// The RoPE scaling a GGUF file asks for: Llama 3.1's `rope_freqs` tensor, or
/// `rope.scaling.type` linear; any other type is refused by name.
fn gguf_rope_scaling(file: &GgufFile, arch: &str, head_dim: usize) -> Result<RopeScaling, String> {
    let kind = file.get_str(&format!("{arch}.rope.scaling.type")).unwrap_or("none");
    let frequencies = file.tensor_info("rope_freqs.weight").is_some();
    match (kind, frequencies) {
        ("none", false) => Ok(RopeScaling::None),
        ("none", true) => {
            let t = file.tensor_f32("rope_freqs.weight").map_err(|e| e.to_string())?;
            if t.data.len() != head_dim / 2 {
                return Err(format!(
                    "`rope_freqs` has {} values for {} frequencies",
                    t.data.len(),
                    head_dim / 2
                ));
            }
            Ok(RopeScaling::Frequencies(t.data))
        }
        ("linear", false) => file
            .get_f32(&format!("{arch}.rope.scaling.factor"))
            .map(RopeScaling::Linear)
            .ok_or_else(|| "linear RoPE scaling without a factor".to_string()),
        (other, _) => Err(format!(
            "RoPE scaling `{other}`{} is not supported (kiln implements linear and llama3's `rope_freqs`)",
            if frequencies { " with `rope_freqs`" } else { "" }
        )),
    }
}

/// The architecture's chat template, for a model that carries none; logged, as it is a guess.
fn architecture_chat_template(architecture: &dyn arch::Architecture) -> Option<String> {
    let template = architecture.default_chat_template()?;
    tracing::info!(
        architecture = architecture.name(),
        "the model has no chat template; using its architecture's"
    );
    Some(template.to_string())
}

/// `tokenizer_config.json`'s `chat_template` (a string), when present.
fn read_hf_chat_template(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("tokenizer_config.json")).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    value.get("chat_template")?.as_str().map(str::to_string)
}

/// Every token id the tokenizer can produce must have an embedding row; a model that breaks
/// this would read past the embedding for some prompts. (More rows than ids is padding: the
/// executor never samples those.)
fn check_vocabulary(tokenizer: &Tokenizer, c: &ModelConfig, path: &Path) -> Result<(), ModelError> {
    let bound = token_id_bound(tokenizer);
    if bound > c.vocab_size {
        return Err(ModelError::InvalidFile {
            path: path.to_path_buf(),
            message: format!(
                "the tokenizer has token id {} but the embedding has only {} rows",
                bound - 1,
                c.vocab_size
            ),
        });
    }
    Ok(())
}

fn check_config(c: &ModelConfig, path: &Path) -> Result<(), ModelError> {
    let bad = |message: String| ModelError::InvalidFile {
        path: PathBuf::from(path),
        message,
    };
    if c.num_heads == 0 || c.num_kv_heads == 0 || !c.num_heads.is_multiple_of(c.num_kv_heads) {
        return Err(bad(format!(
            "{} attention heads cannot be grouped over {} KV heads",
            c.num_heads, c.num_kv_heads
        )));
    }
    if c.head_dim == 0 || !c.head_dim.is_multiple_of(2) || c.hidden_size == 0 || c.vocab_size == 0 || c.num_layers == 0
    {
        return Err(bad(format!("implausible shape {c:?}")));
    }
    if c.max_position_embeddings == 0 || c.max_position_embeddings > 1 << 20 {
        return Err(bad(format!("implausible context length {}", c.max_position_embeddings)));
    }
    Ok(())
}
