//! llama.cpp's `llama` tokenizer model: SentencePiece BPE (Llama 2, Mistral, Gemma, Phi-3)
//! with scores, byte fallback (`<0xXX>` pieces) and `▁` for spaces, built as Hugging Face's
//! converter builds `tokenizer.json` from a `tokenizer.model`: merges ordered by score.

use std::path::Path;

use tokenizers::Tokenizer;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::replace::Replace;
use tokenizers::normalizers::{NormalizerWrapper, Prepend, Sequence as NormalizerSequence};

use super::added::add_vocabulary_specials;
use super::error::TokenizerError;
use super::vocab::TOKEN_TYPE_UNKNOWN;

/// SentencePiece's space marker.
const SPACE: &str = "▁";

/// A SentencePiece BPE tokenizer. `add_space_prefix` (`tokenizer.ggml.add_space_prefix`,
/// default on; Gemma turns it off) puts `▁` before the text as SentencePiece's dummy prefix.
pub fn build_spm_tokenizer(
    path: &Path,
    tokens: &[String],
    scores: &[f32],
    token_types: Option<&[i32]>,
    add_space_prefix: bool,
) -> Result<Tokenizer, TokenizerError> {
    let build_err = |e: tokenizers::Error| TokenizerError::Build {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    if scores.len() != tokens.len() {
        return Err(TokenizerError::Length {
            path: path.to_path_buf(),
            what: "scores",
            found: scores.len(),
            tokens: tokens.len(),
        });
    }
    let vocab: Vocab = tokens
        .iter()
        .enumerate()
        .map(|(id, t)| (t.clone(), id as u32))
        .collect();
    let unknown = token_types
        .and_then(|types| types.iter().position(|&t| t == TOKEN_TYPE_UNKNOWN))
        .map(|id| tokens[id].clone());
    let merges = merges_by_score(tokens, scores, &vocab);
    let mut builder = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(unknown) = unknown {
        builder = builder.unk_token(unknown);
    }
    let bpe = builder.build().map_err(build_err)?;

    let mut tokenizer = Tokenizer::new(bpe);
    let spaces = NormalizerWrapper::Replace(Replace::new(" ", SPACE).map_err(build_err)?);
    let normalizer = if add_space_prefix {
        NormalizerWrapper::Sequence(NormalizerSequence::new(vec![
            NormalizerWrapper::Prepend(Prepend::new(SPACE.to_string())),
            spaces,
        ]))
    } else {
        spaces
    };
    tokenizer.with_normalizer(Some(normalizer));
    let mut decoders = vec![
        DecoderWrapper::Replace(tokenizers::normalizers::replace::Replace::new(SPACE, " ").map_err(build_err)?),
        DecoderWrapper::ByteFallback(ByteFallback::new()),
        DecoderWrapper::Fuse(Fuse::new()),
    ];
    if add_space_prefix {
        decoders.push(DecoderWrapper::Strip(Strip::new(' ', 1, 0)));
    }
    tokenizer.with_decoder(Some(DecoderWrapper::Sequence(DecoderSequence::new(decoders))));
    add_vocabulary_specials(&mut tokenizer, path, tokens, token_types)?;
    Ok(tokenizer)
}

/// Every split of every piece into two pieces of the vocabulary, best score first (then the
/// longer left part, the longer right part, the piece's id, the parts' ids): Hugging Face's
/// `generate_merges`, so the merge order, and thus the ids, are those of its tokenizer.
fn merges_by_score(tokens: &[String], scores: &[f32], vocab: &Vocab) -> Vec<(String, String)> {
    struct Merge<'a> {
        score: f32,
        lengths: (usize, usize),
        ids: (usize, u32, u32),
        pair: (&'a str, &'a str),
    }
    let mut merges = Vec::new();
    for (id, (piece, &score)) in tokens.iter().zip(scores).enumerate() {
        for (split, _) in piece.char_indices().skip(1) {
            let (left, right) = piece.split_at(split);
            if let (Some(&l), Some(&r)) = (vocab.get(left), vocab.get(right)) {
                merges.push(Merge {
                    score,
                    lengths: (left.chars().count(), right.chars().count()),
                    ids: (id, l, r),
                    pair: (left, right),
                });
            }
        }
    }
    merges.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.lengths.cmp(&a.lengths))
            .then(a.ids.cmp(&b.ids))
    });
    merges
        .into_iter()
        .map(|m| (m.pair.0.to_string(), m.pair.1.to_string()))
        .collect()
}
