//! Tokenizers for kiln models, as `tokenizers::Tokenizer`s: rebuilt from GGUF metadata
//! (llama.cpp's `gpt2` byte-level BPE with its pre-tokenizer, or its `llama` SentencePiece)
//! so that ids match the model's Hugging Face tokenizer, or loaded from a `tokenizer.json`;
//! plus BOS insertion and the special ids that stop generation. Anything else is refused.

mod added;
mod bos;
mod byte_level;
mod error;
mod hf_folder;
mod pre_split;
mod sentencepiece;
mod special_tokens;
mod vocab;

pub use bos::{adds_bos, encode_prompt, set_bos};
pub use byte_level::build_bpe_tokenizer;
pub use error::TokenizerError;
pub use hf_folder::{hf_folder_tokenizer, load_tokenizer_json, special_tokens_from_hf_config};
pub use pre_split::supported_pre;
pub use sentencepiece::build_spm_tokenizer;
pub use special_tokens::SpecialTokens;
pub use vocab::{GgufVocab, TOKEN_TYPE_BYTE, TOKEN_TYPE_CONTROL, TOKEN_TYPE_NORMAL, TOKEN_TYPE_USER_DEFINED};

pub use tokenizers::Tokenizer;

/// The `tokenizer.ggml.model` values kiln builds, for error messages.
pub const SUPPORTED_MODELS: &str = "gpt2 (byte-level BPE), llama (SentencePiece)";

/// Builds the tokenizer a GGUF file's `tokenizer.ggml.*` metadata describes, BOS insertion
/// included.
pub fn tokenizer_from_vocab(vocab: &GgufVocab) -> Result<Tokenizer, TokenizerError> {
    let path = vocab.source.as_path();
    let missing = |key: &'static str| TokenizerError::Missing {
        path: path.to_path_buf(),
        key,
    };
    let model = vocab.model.as_deref().ok_or_else(|| missing("tokenizer.ggml.model"))?;
    let tokens = vocab
        .tokens
        .as_deref()
        .ok_or_else(|| missing("tokenizer.ggml.tokens"))?;
    let types = vocab.token_types.as_deref();
    let mut tokenizer = match model {
        "gpt2" => {
            let merges = vocab
                .merges
                .as_deref()
                .ok_or_else(|| missing("tokenizer.ggml.merges"))?;
            let pre = vocab.pre.as_deref().unwrap_or("(missing)");
            build_bpe_tokenizer(path, tokens, merges, types, pre)?
        }
        "llama" => {
            let scores = vocab
                .scores
                .as_deref()
                .ok_or_else(|| missing("tokenizer.ggml.scores"))?;
            build_spm_tokenizer(path, tokens, scores, types, vocab.add_space_prefix.unwrap_or(true))?
        }
        other => {
            return Err(TokenizerError::UnsupportedModel {
                path: path.to_path_buf(),
                model: other.to_string(),
                supported: SUPPORTED_MODELS.to_string(),
            });
        }
    };
    let add_bos = vocab
        .add_bos
        .unwrap_or_else(|| bos::default_add_bos(model, vocab.pre.as_deref()));
    let bos = vocab
        .bos
        .filter(|_| add_bos)
        .and_then(|id| Some((tokens.get(id as usize)?.as_str(), id)));
    set_bos(&mut tokenizer, bos).map_err(|message| TokenizerError::Build {
        path: path.to_path_buf(),
        message,
    })?;
    Ok(tokenizer)
}

/// One past the tokenizer's largest token id (added tokens included): every id a request may
/// send or the model may be allowed to sample is below it.
pub fn token_id_bound(tokenizer: &Tokenizer) -> usize {
    tokenizer
        .get_vocab(true)
        .values()
        .max()
        .map_or(0, |&id| id as usize + 1)
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

/// A tiny byte-level vocabulary for tests and kiln's synthetic models (`tokenizer.ggml.pre`
/// `smollm`): `<|endoftext|>`, `<|im_start|>`, `<|im_end|>` (control) at ids 0..3, the 256
/// byte tokens at ids `3 + byte`, then four merged tokens (`Ġt`, `he`, `Ġthe`, `lo`).
/// Returns `(tokens, merges, token_types)`.
pub fn tiny_test_vocab() -> (Vec<String>, Vec<String>, Vec<i32>) {
    let mut tokens: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        .map(String::from)
        .to_vec();
    tokens.extend((0..=255u8).map(|b| byte_to_unicode(b).to_string()));
    tokens.extend(["Ġt", "he", "Ġthe", "lo"].map(String::from));
    let merges = ["Ġ t", "h e", "Ġt he", "l o"].map(String::from).to_vec();
    let mut types = vec![TOKEN_TYPE_CONTROL; 3];
    types.resize(tokens.len(), TOKEN_TYPE_NORMAL);
    (tokens, merges, types)
}

#[cfg(test)]
mod tests;
