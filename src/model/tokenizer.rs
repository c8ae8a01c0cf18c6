//! Tokenizers for kiln models: rebuilt from GGUF metadata (byte-level BPE, llama.cpp's
//! `gpt2` tokenizer model) or loaded from a Hugging Face `tokenizer.json`, plus the special
//! token ids that drive BOS insertion and stopping.

use crate::model::gguf::{GgufError, GgufFile};
use std::path::{Path, PathBuf};
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, Tokenizer};

/// llama.cpp's `LLAMA_TOKEN_TYPE_CONTROL`: special tokens such as `<|im_start|>`.
const TOKEN_TYPE_CONTROL: i32 = 3;
/// llama.cpp's `LLAMA_TOKEN_TYPE_USER_DEFINED`: added tokens matched verbatim in text.
const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// Texts that end a turn or a document in common vocabularies. llama.cpp also stops on
/// these whatever `eos_token_id` says, because converters often record the wrong EOS.
const END_TOKENS: [&str; 6] = [
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|end|>",
    "</s>",
    "<|end_of_text|>",
];

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("{path}: tokenizer model '{model}' is not supported (only 'gpt2' byte-level BPE)")]
    UnsupportedModel { path: PathBuf, model: String },
    #[error("{path}: tokenizer.ggml.merges[{index}] = {merge:?} is not two space-separated tokens")]
    BadMerge { path: PathBuf, index: usize, merge: String },
    #[error("{path}: tokenizer.ggml.token_type has {types} entries but there are {tokens} tokens")]
    TokenTypeLength { path: PathBuf, types: usize, tokens: usize },
    #[error("{path}: cannot build tokenizer: {message}")]
    Build { path: PathBuf, message: String },
    #[error("{path}: cannot read {what}: {message}")]
    Load {
        path: PathBuf,
        what: &'static str,
        message: String,
    },
}

/// Builds the tokenizer described by a GGUF file's `tokenizer.ggml.*` metadata.
/// One past the tokenizer's largest token id (added tokens included): every id a request may
/// send or the model may be allowed to sample is below it.
pub fn token_id_bound(tokenizer: &Tokenizer) -> usize {
    tokenizer
        .get_vocab(true)
        .values()
        .max()
        .map_or(0, |&id| id as usize + 1)
}

pub fn tokenizer_from_gguf(gguf: &GgufFile) -> Result<Tokenizer, TokenizerError> {
    let path = gguf.path();
    let model = gguf.require_str("tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(TokenizerError::UnsupportedModel {
            path: path.to_path_buf(),
            model: model.to_string(),
        });
    }
    let tokens = gguf.require_string_array("tokenizer.ggml.tokens")?;
    let merges = gguf.require_string_array("tokenizer.ggml.merges")?;
    let types = gguf.get_i32_array("tokenizer.ggml.token_type");
    let pre = gguf.get_str("tokenizer.ggml.pre");
    build_bpe_tokenizer(path, &tokens, &merges, types.as_deref(), pre)
}

/// Byte-level BPE from a vocabulary (id = index), merges (`"a b"`), and optional llama.cpp
/// token types. `pre` is `tokenizer.ggml.pre`, which selects the pre-tokenizer; `path` only
/// labels errors.
pub fn build_bpe_tokenizer(
    path: &Path,
    tokens: &[String],
    merges: &[String],
    token_types: Option<&[i32]>,
    pre: Option<&str>,
) -> Result<Tokenizer, TokenizerError> {
    let build_err = |e: tokenizers::Error| TokenizerError::Build {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    if let Some(types) = token_types
        && types.len() != tokens.len()
    {
        return Err(TokenizerError::TokenTypeLength {
            path: path.to_path_buf(),
            types: types.len(),
            tokens: tokens.len(),
        });
    }
    let vocab: Vocab = tokens
        .iter()
        .enumerate()
        .map(|(id, t)| (t.clone(), id as u32))
        .collect();
    if vocab.len() != tokens.len() {
        tracing::warn!(path = %path.display(), "GGUF vocabulary has duplicate tokens; later ids win");
    }
    let merges = merges
        .iter()
        .enumerate()
        .map(|(index, m)| match m.split_once(' ') {
            Some((a, b)) => Ok((a.to_string(), b.to_string())),
            None => Err(TokenizerError::BadMerge {
                path: path.to_path_buf(),
                index,
                merge: m.clone(),
            }),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(build_err)?;

    let mut tokenizer = Tokenizer::new(bpe);
    tokenizer.with_pre_tokenizer(Some(pre_tokenizer(path, pre)));
    tokenizer.with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevel::default())));

    // Added tokens are matched in raw text before pre-tokenization, so "<|im_start|>" in a
    // rendered chat template becomes its single id instead of being split into bytes.
    let added: Vec<AddedToken> = token_types
        .unwrap_or(&[])
        .iter()
        .zip(tokens)
        .filter(|(ty, _)| matches!(**ty, TOKEN_TYPE_CONTROL | TOKEN_TYPE_USER_DEFINED))
        .map(|(ty, t)| AddedToken::from(t.clone(), *ty == TOKEN_TYPE_CONTROL).normalized(false))
        .collect();
    tokenizer.add_tokens(&added);
    Ok(tokenizer)
}

/// The pre-tokenizer for llama.cpp's `tokenizer.ggml.pre`. Only the GPT-2 regex family is
/// available here; other families get it too, with a warning, rather than failing to load.
fn pre_tokenizer(path: &Path, pre: Option<&str>) -> PreTokenizerWrapper {
    let byte_level = PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, true));
    match pre {
        Some("gpt2") | None => byte_level,
        Some(other) => {
            if !matches!(other, "smollm" | "starcoder" | "refact") {
                tracing::warn!(path = %path.display(), pre = other,
                    "unknown tokenizer.ggml.pre; using digits + GPT-2 byte-level splitting");
            }
            PreTokenizerWrapper::Sequence(Sequence::new(vec![
                PreTokenizerWrapper::Digits(Digits::new(true)),
                byte_level,
            ]))
        }
    }
}

/// Loads a Hugging Face `tokenizer.json`.
pub fn load_tokenizer_json(path: &Path) -> Result<Tokenizer, TokenizerError> {
    Tokenizer::from_file(path).map_err(|e| TokenizerError::Load {
        path: path.to_path_buf(),
        what: "tokenizer.json",
        message: e.to_string(),
    })
}

/// The special token ids generation needs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SpecialTokens {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// Ids that end generation: the vocabulary's end-of-turn/text tokens, plus `eos` unless
    /// its text is a start token (some GGUFs record `<|im_start|>` as EOS).
    pub end_of_generation: Vec<u32>,
    /// Whether to prepend `bos` to prompts.
    pub add_bos: bool,
}

impl SpecialTokens {
    /// From `tokenizer.ggml.{bos,eos}_token_id` and `add_bos_token` (default false).
    pub fn from_gguf(gguf: &GgufFile) -> SpecialTokens {
        let tokens = gguf.get_string_array("tokenizer.ggml.tokens").unwrap_or_default();
        let text_of = |id: u32| tokens.get(id as usize).cloned();
        let id_of = |text: &str| tokens.iter().position(|t| t == text).map(|i| i as u32);
        Self::build(
            gguf.get_u32("tokenizer.ggml.bos_token_id"),
            gguf.get_u32("tokenizer.ggml.eos_token_id"),
            gguf.get_bool("tokenizer.ggml.add_bos_token").unwrap_or(false),
            text_of,
            id_of,
        )
    }

    /// Best effort from a Hugging Face model folder: `tokenizer.json` for the vocabulary,
    /// `tokenizer_config.json` (`bos_token`, `eos_token`, `add_bos_token`) and `config.json`
    /// (`bos_token_id`, `eos_token_id`) when present. Missing or unreadable configs are skipped.
    pub fn from_hf_folder(dir: &Path) -> Result<SpecialTokens, TokenizerError> {
        let tokenizer = load_tokenizer_json(&dir.join("tokenizer.json"))?;
        Ok(Self::from_hf_config(dir, &tokenizer))
    }

    /// As [`from_hf_folder`](Self::from_hf_folder) with an already loaded tokenizer.
    pub fn from_hf_config(dir: &Path, tokenizer: &Tokenizer) -> SpecialTokens {
        let read = |name: &str| -> Option<serde_json::Value> {
            let text = std::fs::read_to_string(dir.join(name)).ok()?;
            serde_json::from_str(&text)
                .inspect_err(|e| tracing::warn!(file = name, error = %e, "ignoring unparsable config"))
                .ok()
        };
        let tok_config = read("tokenizer_config.json");
        let config = read("config.json");
        let id_of = |text: &str| tokenizer.token_to_id(text);
        // tokenizer_config names the token (a string or {"content": ...}); config.json gives
        // ids (an int or, for multi-EOS models, a list whose first entry is the main one).
        let from_configs = |name: &str| {
            let by_text = tok_config.as_ref().and_then(|c| {
                let v = c.get(format!("{name}_token"))?;
                id_of(v.as_str().or_else(|| v.get("content")?.as_str())?)
            });
            by_text.or_else(|| {
                let v = config.as_ref()?.get(format!("{name}_token_id"))?;
                let v = v.as_array().and_then(|a| a.first()).unwrap_or(v);
                v.as_u64().and_then(|id| u32::try_from(id).ok())
            })
        };
        let add_bos = tok_config
            .as_ref()
            .and_then(|c| c.get("add_bos_token")?.as_bool())
            .unwrap_or(false);
        let mut special = Self::build(
            from_configs("bos"),
            from_configs("eos"),
            add_bos,
            |id| tokenizer.id_to_token(id),
            id_of,
        );
        // Multi-EOS models (Llama 3 instruct) list every stop id in config.json.
        if let Some(ids) = config.as_ref().and_then(|c| c.get("eos_token_id")?.as_array().cloned()) {
            for id in ids.iter().filter_map(|v| v.as_u64()?.try_into().ok()) {
                if !special.end_of_generation.contains(&id) {
                    special.end_of_generation.push(id);
                }
            }
        }
        special
    }

    fn build(
        bos: Option<u32>,
        eos: Option<u32>,
        add_bos: bool,
        text_of: impl Fn(u32) -> Option<String>,
        id_of: impl Fn(&str) -> Option<u32>,
    ) -> SpecialTokens {
        let mut end = Vec::new();
        if let Some(eos) = eos {
            match text_of(eos) {
                Some(text) if is_start_token(&text) => tracing::warn!(
                    eos, text = %text, "EOS token looks like a start token; not stopping on it"
                ),
                _ => end.push(eos),
            }
        }
        for id in END_TOKENS.iter().filter_map(|t| id_of(t)) {
            if !end.contains(&id) {
                end.push(id);
            }
        }
        SpecialTokens {
            bos,
            eos,
            end_of_generation: end,
            add_bos,
        }
    }

    pub fn is_end(&self, id: u32) -> bool {
        self.end_of_generation.contains(&id)
    }
}

fn is_start_token(text: &str) -> bool {
    text == "<s>" || text.contains("start") || text.contains("begin")
}

/// GPT-2's reversible byte→printable-char map (`bytes_to_unicode`): byte-level vocabularies
/// store token text in this form (e.g. a space is `Ġ`).
pub fn byte_to_unicode(b: u8) -> char {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let rank = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + rank).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// A tiny byte-level vocabulary for tests and kiln's synthetic models: `<|endoftext|>`,
/// `<|im_start|>`, `<|im_end|>` (control) at ids 0..3, the 256 byte tokens at ids `3 + byte`,
/// then four merged tokens (`Ġt`, `he`, `Ġthe`, `lo`). Returns `(tokens, merges, token_types)`.
pub fn tiny_test_vocab() -> (Vec<String>, Vec<String>, Vec<i32>) {
    let mut tokens: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        .map(String::from)
        .to_vec();
    tokens.extend((0..=255u8).map(|b| byte_to_unicode(b).to_string()));
    tokens.extend(["Ġt", "he", "Ġthe", "lo"].map(String::from));
    let merges = ["Ġ t", "h e", "Ġt he", "l o"].map(String::from).to_vec();
    let mut types = vec![TOKEN_TYPE_CONTROL; 3];
    types.resize(tokens.len(), 1);
    (tokens, merges, types)
}

#[cfg(test)]
#[path = "tokenizer_tests.rs"]
mod tests;
