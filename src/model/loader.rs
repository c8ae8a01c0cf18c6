//! Opens a model path (a `.gguf` file or a Hugging Face folder) and returns everything the
//! server needs: the runtime config, tokenizer, special tokens, chat template and weights.

use std::path::{Path, PathBuf};

use tokenizers::Tokenizer;

use super::config::{HfLlamaConfig, LlamaConfig};
use super::error::ModelError;
use super::gguf::GgufFile;
use super::sources::{GgufWeights, SafetensorsWeights};
use super::weights::WeightSource;
use crate::tokenizer::{SpecialTokens, hf_folder_tokenizer, token_id_bound, tokenizer_from_vocab};

/// A model on disk, opened and described, weights not yet on the device.
pub struct ModelFiles {
    pub name: String,
    pub config: LlamaConfig,
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
    let arch = file.get_str("general.architecture").unwrap_or("llama").to_string();
    if arch != "llama" {
        return Err(ModelError::Unsupported {
            path: path.to_path_buf(),
            message: format!("architecture `{arch}` (only llama is supported)"),
        });
    }
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
        .get_u32(&key("rope.dimension_count"))
        .map_or(hidden_size / num_heads.max(1), |v| v as usize);
    let config = LlamaConfig {
        vocab_size,
        hidden_size,
        intermediate_size: required("feed_forward_length")?,
        num_layers: required("block_count")?,
        num_heads,
        num_kv_heads,
        head_dim,
        rope_theta: file.get_f32(&key("rope.freq_base")).unwrap_or(10_000.0),
        rms_norm_eps: file.get_f32(&key("attention.layer_norm_rms_epsilon")).unwrap_or(1e-5),
        max_position_embeddings: required("context_length")?,
        tie_word_embeddings: file.tensor_info("output.weight").is_none(),
    };
    check_config(&config, path)?;
    check_vocabulary(&tokenizer, &config, path)?;
    let special_tokens = SpecialTokens::from_vocab(&vocab);
    let chat_template = file.get_str("tokenizer.chat_template").map(str::to_string);
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
    let hf: HfLlamaConfig = serde_json::from_str(&text).map_err(|e| ModelError::InvalidFile {
        path: config_path.clone(),
        message: e.to_string(),
    })?;
    if let Some(rope_type) = hf.unsupported_rope_type() {
        return Err(ModelError::InvalidFile {
            path: config_path,
            message: format!("RoPE type {rope_type:?} is not supported (kiln implements the default RoPE)"),
        });
    }
    let config = LlamaConfig::from(&hf);
    check_config(&config, &config_path)?;
    let (tokenizer, special_tokens) = hf_folder_tokenizer(dir)?;
    check_vocabulary(&tokenizer, &config, &config_path)?;
    let chat_template = read_hf_chat_template(dir);
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
        weights: Box::new(SafetensorsWeights::open(dir)?),
    })
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
fn check_vocabulary(tokenizer: &Tokenizer, c: &LlamaConfig, path: &Path) -> Result<(), ModelError> {
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

fn check_config(c: &LlamaConfig, path: &Path) -> Result<(), ModelError> {
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
