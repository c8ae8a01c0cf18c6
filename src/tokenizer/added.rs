//! The vocabulary's special and user-defined tokens as Hugging Face added tokens: matched in
//! raw text before splitting, so `<|im_start|>` in a rendered chat template is one id.

use std::path::Path;

use tokenizers::{AddedToken, Tokenizer};

use super::error::TokenizerError;
use super::vocab::{TOKEN_TYPE_CONTROL, TOKEN_TYPE_UNKNOWN, TOKEN_TYPE_USER_DEFINED};

/// Adds control and unknown tokens as special, user-defined ones as plain added tokens.
/// SentencePiece user-defined pieces spelled with `▁` match the normalised text instead.
pub fn add_vocabulary_specials(
    tokenizer: &mut Tokenizer,
    path: &Path,
    tokens: &[String],
    token_types: Option<&[i32]>,
) -> Result<(), TokenizerError> {
    let Some(types) = token_types else {
        return Ok(());
    };
    if types.len() != tokens.len() {
        return Err(TokenizerError::Length {
            path: path.to_path_buf(),
            what: "token_type",
            found: types.len(),
            tokens: tokens.len(),
        });
    }
    let added: Vec<AddedToken> = types
        .iter()
        .zip(tokens)
        .filter_map(|(&ty, text)| match ty {
            TOKEN_TYPE_CONTROL | TOKEN_TYPE_UNKNOWN => Some(AddedToken::from(text.clone(), true).normalized(false)),
            TOKEN_TYPE_USER_DEFINED => Some(AddedToken::from(text.clone(), false).normalized(text.contains('▁'))),
            _ => None,
        })
        .collect();
    tokenizer.add_tokens(&added);
    Ok(())
}
