//! Constrained decoding's compile side: the served model's vocabulary as llguidance's token
//! environment, and the compiler (limits, blocking pool, cache) that turns a request's
//! [`StructuredOutput`](crate::engine::structured_output::StructuredOutput) into the
//! [`CompiledGrammar`](crate::engine::structured_output::CompiledGrammar) the executor masks
//! with.

pub mod compiler;
pub mod gbnf;
mod regex_size;
pub mod vocabulary;

pub use compiler::{CompileOutcome, GrammarCompiler, GrammarLimits};
pub use vocabulary::{VocabularySpec, token_env};

/// Why a constraint cannot be used; each becomes a 400 naming the request's parameter.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GrammarError {
    #[error("the constraint is {bytes} bytes; the limit is {limit}")]
    TooLarge { bytes: usize, limit: usize },
    #[error("the regex expands to {positions} positions (its counted repetitions multiplied); the limit is {limit}")]
    RegexTooLarge { positions: u64, limit: u64 },
    #[error("the constraint does not compile: {0}")]
    Invalid(String),
    #[error("the constraint did not compile within {0:?}")]
    Timeout(std::time::Duration),
    #[error("structured outputs are not available for this model's tokenizer: {0}")]
    Vocabulary(String),
}

impl GrammarError {
    /// The label of the compile-failure metric and the log.
    pub fn reason(&self) -> &'static str {
        match self {
            GrammarError::TooLarge { .. } | GrammarError::RegexTooLarge { .. } => "too_large",
            GrammarError::Invalid(_) => "invalid",
            GrammarError::Timeout(_) => "timeout",
            GrammarError::Vocabulary(_) => "unavailable",
        }
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use std::path::Path;
    use std::sync::Arc;

    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::engine::structured_output::CompiledGrammar;
    use crate::tokenizer::{build_bpe_tokenizer, tiny_test_vocab};

    /// The end token of the tiny vocabulary (`<|im_end|>`).
    pub const TINY_END: u32 = 2;
    /// Rows of the tiny model's logits: the vocabulary plus padding, which must stay masked.
    pub const TINY_VOCAB_ROWS: usize = 270;

    /// A compiler over kiln's tiny byte-level vocabulary (every byte is a token).
    pub fn tiny_compiler(limits: GrammarLimits) -> GrammarCompiler {
        let (tokens, merges, types) = tiny_test_vocab();
        let tokenizer =
            build_bpe_tokenizer(Path::new("tiny"), &tokens, &merges, Some(&types), "smollm").expect("tokenizer");
        let spec = VocabularySpec {
            vocab_size: TINY_VOCAB_ROWS,
            end_tokens: vec![TINY_END],
        };
        let env = token_env(Arc::new(tokenizer), &spec).expect("token env");
        GrammarCompiler::new(&env, limits).expect("compiler")
    }

    /// Generates under `grammar` by picking uniformly among the allowed tokens, as a model at
    /// high temperature might: the bytes produced before the end token (`None` when
    /// `max_tokens` ran out first).
    pub fn random_walk(grammar: &CompiledGrammar, seed: u64, max_tokens: usize) -> Option<Vec<u8>> {
        let mut matcher = grammar.start();
        let trie = matcher.tok_env().expect("env").tok_trie().clone();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut tokens = Vec::new();
        for _ in 0..max_tokens {
            let mask = matcher.compute_mask_or_eos().expect("mask");
            let allowed = mask.to_list();
            assert!(!allowed.is_empty(), "a mask always allows something");
            assert!(
                allowed
                    .iter()
                    .all(|&t| (t as usize) < TINY_VOCAB_ROWS && t != 0 && t != 1),
                "padding rows and non-end special tokens are never allowed: {allowed:?}"
            );
            let token = allowed[rng.random_range(0..allowed.len())];
            if token == TINY_END {
                return Some(trie.decode(&tokens));
            }
            matcher.consume_token(token).expect("an allowed token is accepted");
            tokens.push(token);
        }
        None
    }
}

#[cfg(test)]
mod tests;
