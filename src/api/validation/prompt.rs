//! The prompt: a completions prompt must hold text or ids (each prompt of a batch too), every
//! tokenised prompt must be non-empty with each id in the vocabulary, and each must leave room
//! in the context for `max_tokens` (an open one is fitted to the room left).

use std::sync::Arc;

use super::ValidPrompt;
use crate::api::errors::ApiError;
use crate::api::openai_types::PromptInput;
use crate::engine::sampling_params::SamplingParams;

/// The request fields an error about the prompt or the context names, as the client spelled
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamNames {
    /// `prompt`, `messages` or `input`.
    pub prompt: &'static str,
    /// `max_tokens`, `max_completion_tokens` or `max_output_tokens`.
    pub max_tokens: &'static str,
}

/// Refuses an empty completions prompt, or a batch holding an empty one.
pub fn check_prompt_input(prompt: &PromptInput) -> Result<(), ApiError> {
    let empty = match prompt {
        PromptInput::Text(s) => s.is_empty(),
        PromptInput::TextBatch(v) => v.is_empty() || v.iter().any(String::is_empty),
        PromptInput::Tokens(v) => v.is_empty(),
        PromptInput::TokenBatch(v) => v.is_empty() || v.iter().any(Vec::is_empty),
    };
    if empty {
        return Err(ApiError::invalid(
            "prompt",
            "`prompt` must not be empty (nor contain an empty prompt)",
        ));
    }
    Ok(())
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

/// Each prompt with the body's parameters fitted to it: an open `max_tokens` becomes the room
/// the prompt leaves in the context; a prompt that with `max_tokens` exceeds the context
/// refuses the whole body. Prompts whose parameters come out the same share one `Arc`.
pub fn fit_to_context(
    prompts: Vec<Vec<u32>>,
    params: &Arc<SamplingParams>,
    max_model_len: usize,
    names: ParamNames,
) -> Result<Vec<ValidPrompt>, ApiError> {
    let mut shared = Arc::clone(params);
    prompts
        .into_iter()
        .map(|token_ids| {
            let max_tokens = fitted_max_tokens(token_ids.len(), params.max_tokens, max_model_len, names)?;
            if max_tokens != shared.max_tokens {
                shared = Arc::new(SamplingParams {
                    max_tokens,
                    ..(**params).clone()
                });
            }
            Ok(ValidPrompt {
                token_ids,
                params: Arc::clone(&shared),
            })
        })
        .collect()
}

/// `max_tokens` for a prompt of `prompt_len` tokens: an open bound is the room left in the
/// context; one past that room, or a prompt that fills the context, is refused.
fn fitted_max_tokens(
    prompt_len: usize,
    max_tokens: Option<u32>,
    max_model_len: usize,
    names: ParamNames,
) -> Result<Option<u32>, ApiError> {
    let exceeded = |max_tokens: u32| ApiError::ContextLengthExceeded {
        prompt_tokens: prompt_len as u32,
        max_tokens,
        max_model_len: max_model_len as u32,
        prompt_param: names.prompt,
        max_tokens_param: names.max_tokens,
    };
    if prompt_len >= max_model_len {
        return Err(exceeded(max_tokens.unwrap_or(1).min(1)));
    }
    let room = (max_model_len - prompt_len) as u32;
    match max_tokens {
        None => Ok(Some(room)),
        Some(asked) if asked > room => Err(exceeded(asked)),
        Some(asked) => Ok(Some(asked)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAT: ParamNames = ParamNames {
        prompt: "messages",
        max_tokens: "max_completion_tokens",
    };

    fn fit(prompt_lens: &[usize], params: SamplingParams, max_model_len: usize) -> Result<Vec<ValidPrompt>, ApiError> {
        let prompts = prompt_lens.iter().map(|&len| vec![1; len]).collect();
        fit_to_context(prompts, &Arc::new(params), max_model_len, CHAT)
    }

    #[test]
    fn open_max_tokens_is_clamped_and_explicit_overflow_refused() {
        let open = SamplingParams {
            max_tokens: None,
            ..Default::default()
        };
        let fitted = fit(&[100], open, 128).expect("fits");
        assert_eq!(fitted[0].params.max_tokens, Some(28));
        let asked = SamplingParams {
            max_tokens: Some(29),
            ..Default::default()
        };
        let err = fit(&[100], asked, 128).unwrap_err();
        assert!(matches!(err, ApiError::ContextLengthExceeded { .. }));
        assert_eq!(err.param(), Some("max_completion_tokens"));
        let err = fit(&[128], SamplingParams::default(), 128).unwrap_err();
        assert_eq!(err.param(), Some("messages"));
    }

    #[test]
    fn open_max_tokens_is_fitted_per_prompt_and_equal_fits_share_one_copy() {
        let open = SamplingParams {
            max_tokens: None,
            ..Default::default()
        };
        let fitted = fit(&[4, 4, 7], open, 10).expect("fits");
        let max: Vec<Option<u32>> = fitted.iter().map(|p| p.params.max_tokens).collect();
        assert_eq!(max, [Some(6), Some(6), Some(3)]);
        assert!(Arc::ptr_eq(&fitted[0].params, &fitted[1].params));
        let params = Arc::new(SamplingParams {
            max_tokens: Some(4),
            ..Default::default()
        });
        let fitted = fit_to_context(vec![vec![1; 2], vec![1; 3]], &params, 10, CHAT).expect("fits");
        assert!(
            fitted.iter().all(|p| Arc::ptr_eq(&p.params, &params)),
            "a bound that fits keeps the body's copy"
        );
    }

    #[test]
    fn one_prompt_too_long_refuses_the_whole_body() {
        let params = SamplingParams {
            max_tokens: Some(4),
            ..Default::default()
        };
        let err = fit(&[2, 6], params, 8).unwrap_err();
        assert!(matches!(err, ApiError::ContextLengthExceeded { .. }), "{err:?}");
    }

    #[test]
    fn out_of_vocabulary_ids_are_refused() {
        assert!(check_prompt(&[1, 2, 3], 10, "prompt").is_ok());
        assert!(check_prompt(&[1, 10], 10, "prompt").is_err());
        assert!(check_prompt(&[], 10, "prompt").is_err());
    }
}
