//! Prompt preparation shared by chat and completions: tokenisation off the async threads,
//! token-id checks, and fitting `max_tokens` into the context.

use std::sync::Arc;

use actix_web::web;
use tokenizers::Tokenizer;

use super::errors::ApiError;
use crate::engine::sampling_params::SamplingParams;
use crate::tokenizer::encode_prompt;

/// Tokenises texts on the blocking pool (tokenising a long prompt takes milliseconds), with
/// the model's BOS when it asks for one (once, even if the text starts with it).
pub async fn tokenize(tokenizer: &Arc<Tokenizer>, texts: Vec<String>) -> Result<Vec<Vec<u32>>, ApiError> {
    let tokenizer = Arc::clone(tokenizer);
    web::block(move || {
        texts
            .iter()
            .map(|t| encode_prompt(&tokenizer, t, true))
            .collect::<Result<Vec<_>, _>>()
    })
    .await
    .map_err(|e| ApiError::EngineError(format!("tokeniser task failed: {e}")))?
    .map_err(|e| ApiError::InvalidParameter {
        param: "prompt".into(),
        message: format!("cannot tokenise: {e}"),
    })
}

/// Refuses empty prompts and token ids outside the vocabulary.
pub fn check_prompt(ids: &[u32], vocab_size: usize, param: &str) -> Result<(), ApiError> {
    if ids.is_empty() {
        return Err(ApiError::invalid(param, format!("`{param}` must not be empty")));
    }
    check_prompt_ids(ids, vocab_size, param)
}

/// Refuses token ids outside the vocabulary (an empty list passes).
pub fn check_prompt_ids(ids: &[u32], vocab_size: usize, param: &str) -> Result<(), ApiError> {
    if let Some(bad) = ids.iter().find(|&&t| t as usize >= vocab_size) {
        return Err(ApiError::invalid(
            param,
            format!("token id {bad} is out of range (vocabulary size {vocab_size})"),
        ));
    }
    Ok(())
}

/// The request fields an error about the context names, as the client spelled them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamNames {
    /// `prompt` or `messages`.
    pub prompt: &'static str,
    /// `max_tokens` or `max_completion_tokens`.
    pub max_tokens: &'static str,
}

/// Clamps an open `max_tokens` to the room left in the context, and refuses a prompt that
/// with `max_tokens` exceeds it.
pub fn fit_to_context(
    prompt_len: usize,
    params: &mut SamplingParams,
    max_model_len: usize,
    names: ParamNames,
) -> Result<(), ApiError> {
    let exceeded = |max_tokens: u32| ApiError::ContextLengthExceeded {
        prompt_tokens: prompt_len as u32,
        max_tokens,
        max_model_len: max_model_len as u32,
        prompt_param: names.prompt,
        max_tokens_param: names.max_tokens,
    };
    if prompt_len >= max_model_len {
        return Err(exceeded(params.max_tokens.unwrap_or(1).min(1)));
    }
    let room = (max_model_len - prompt_len) as u32;
    match params.max_tokens {
        None => params.max_tokens = Some(room),
        Some(asked) if asked > room => return Err(exceeded(asked)),
        Some(_) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAT: ParamNames = ParamNames {
        prompt: "messages",
        max_tokens: "max_completion_tokens",
    };

    #[test]
    fn open_max_tokens_is_clamped_and_explicit_overflow_refused() {
        let mut p = SamplingParams {
            max_tokens: None,
            ..Default::default()
        };
        fit_to_context(100, &mut p, 128, CHAT).expect("fits");
        assert_eq!(p.max_tokens, Some(28));
        let mut p = SamplingParams {
            max_tokens: Some(29),
            ..Default::default()
        };
        let err = fit_to_context(100, &mut p, 128, CHAT).unwrap_err();
        assert!(matches!(err, ApiError::ContextLengthExceeded { .. }));
        assert_eq!(err.param(), Some("max_completion_tokens"));
        let mut p = SamplingParams::default();
        let err = fit_to_context(128, &mut p, 128, CHAT).unwrap_err();
        assert_eq!(err.param(), Some("messages"));
    }

    #[test]
    fn out_of_vocabulary_ids_are_refused() {
        assert!(check_prompt(&[1, 2, 3], 10, "prompt").is_ok());
        assert!(check_prompt(&[1, 10], 10, "prompt").is_err());
        assert!(check_prompt(&[], 10, "prompt").is_err());
    }
}
