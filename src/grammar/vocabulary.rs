//! The token environment llguidance masks over, built from kiln's own tokenizer: every
//! token's bytes (byte-level BPE text mapped back to bytes, special tokens marked with
//! llguidance's `0xff` prefix) in a [`TokTrie`], and kiln's tokenizer for the text llguidance
//! tokenises itself (grammar literals, forced tokens).

use std::sync::Arc;

use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use tokenizers::Tokenizer;

use super::GrammarError;

/// kiln's tokenizer as llguidance sees it.
struct KilnTokenizerEnv {
    trie: TokTrie,
    tokenizer: Arc<Tokenizer>,
}

impl TokenizerEnv for KilnTokenizerEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    /// kiln's own (canonical) tokenisation for text; bytes that are not UTF-8 fall back to
    /// the trie's greedy split.
    fn tokenize_bytes(&self, bytes: &[u8]) -> Vec<TokenId> {
        match std::str::from_utf8(bytes) {
            Ok(text) => match self.tokenizer.encode_fast(text, false) {
                Ok(encoding) => encoding.get_ids().to_vec(),
                Err(_) => self.trie.greedy_tokenize(bytes),
            },
            Err(_) => self.trie.greedy_tokenize(bytes),
        }
    }
}

/// What the vocabulary of the served model looks like to the grammar engine.
#[derive(Debug, Clone)]
pub struct VocabularySpec {
    /// Rows of the model's logits (may exceed the tokenizer's ids: padding is never allowed).
    pub vocab_size: usize,
    /// Ids that end generation; a completed grammar allows exactly these.
    pub end_tokens: Vec<u32>,
}

/// Builds the token environment for `tokenizer` (byte-level BPE, or the metaspace and
/// byte-fallback forms of Hugging Face `tokenizer.json`).
pub fn token_env(tokenizer: Arc<Tokenizer>, spec: &VocabularySpec) -> Result<TokEnv, GrammarError> {
    let json = tokenizer
        .to_string(false)
        .map_err(|e| GrammarError::Vocabulary(e.to_string()))?;
    let json: serde_json::Value = serde_json::from_str(&json).map_err(|e| GrammarError::Vocabulary(e.to_string()))?;
    let mut words =
        llguidance::token_bytes_from_tokenizer_json(&json).map_err(|e| GrammarError::Vocabulary(e.to_string()))?;
    // Padding rows of the model's embedding carry no token: empty words, never allowed.
    let vocab_size = spec.vocab_size.max(words.len());
    words.resize(vocab_size, Vec::new());
    let eos = *spec
        .end_tokens
        .first()
        .ok_or_else(|| GrammarError::Vocabulary("the model has no end-of-generation token".into()))?;
    let info = TokRxInfo::new(vocab_size as u32, eos);
    let trie = TokTrie::from(&info, &words).with_eos_tokens(&spec.end_tokens);
    Ok(Arc::new(KilnTokenizerEnv { trie, tokenizer }))
}
