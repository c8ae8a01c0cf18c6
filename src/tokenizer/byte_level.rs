//! llama.cpp's `gpt2` tokenizer model: byte-level BPE from the vocabulary and merges, split
//! first by the pre-tokenizer its `tokenizer.ggml.pre` names.

use std::path::Path;

use tokenizers::Tokenizer;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::models::bpe::{BPE, Vocab};

use super::added::add_vocabulary_specials;
use super::error::TokenizerError;
use super::pre_split::{pre_split, supported_pre};

/// Byte-level BPE from a vocabulary (id = index), merges (`"a b"`), optional llama.cpp token
/// types, and `pre` (`tokenizer.ggml.pre`); `path` only labels errors. An unknown `pre` is
/// refused: guessing the split gives wrong ids without any error.
pub fn build_bpe_tokenizer(
    path: &Path,
    tokens: &[String],
    merges: &[String],
    token_types: Option<&[i32]>,
    pre: &str,
) -> Result<Tokenizer, TokenizerError> {
    let build_err = |e: tokenizers::Error| TokenizerError::Build {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let split = pre_split(pre)
        .ok_or_else(|| TokenizerError::UnsupportedPre {
            path: path.to_path_buf(),
            pre: pre.to_string(),
            supported: supported_pre(),
        })?
        .map_err(build_err)?;
    let vocab: Vocab = tokens
        .iter()
        .enumerate()
        .map(|(id, t)| (t.clone(), id as u32))
        .collect();
    if vocab.len() != tokens.len() {
        tracing::warn!(path = %path.display(), "GGUF vocabulary has duplicate tokens; later ids win");
    }
    let merges = parse_merges(path, merges)?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(split.ignore_merges)
        .build()
        .map_err(build_err)?;

    let mut tokenizer = Tokenizer::new(bpe);
    tokenizer.with_normalizer(split.normalizer);
    tokenizer.with_pre_tokenizer(Some(split.pre_tokenizer));
    tokenizer.with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevel::default())));
    add_vocabulary_specials(&mut tokenizer, path, tokens, token_types)?;
    Ok(tokenizer)
}

/// `"a b"` pairs; the separator is the first space after the first character, as llama.cpp
/// reads them.
fn parse_merges(path: &Path, merges: &[String]) -> Result<Vec<(String, String)>, TokenizerError> {
    merges
        .iter()
        .enumerate()
        .map(|(index, m)| {
            let split = m.char_indices().skip(1).find(|&(_, c)| c == ' ').map(|(i, _)| i);
            match split {
                Some(i) => Ok((m[..i].to_string(), m[i + 1..].to_string())),
                None => Err(TokenizerError::BadMerge {
                    path: path.to_path_buf(),
                    index,
                    merge: m.clone(),
                }),
            }
        })
        .collect()
}
