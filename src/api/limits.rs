//! What one request may ask for (`[limits]` in the config): how many sequences a body starts,
//! how much prompt text, how many stop strings' bytes and stop token ids. Checked before
//! tokenisation, so an oversized body costs almost nothing; each refusal names its parameter.

use super::errors::ApiError;
use crate::config::LimitsConfig;
use crate::engine::sampling_params::SamplingParams;

/// The size of a body's prompt input, measured before tokenisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptSize {
    /// Prompts in the body (a completions batch), each of which runs `n` times.
    pub prompts: usize,
    /// Bytes of prompt text (token-id prompts count none: the context bounds them).
    pub text_bytes: usize,
}

/// Refuses a request over any limit; `prompt_param` names the prompt field.
pub fn check_limits(
    limits: &LimitsConfig,
    size: PromptSize,
    params: &SamplingParams,
    prompt_param: &'static str,
) -> Result<(), ApiError> {
    if size.text_bytes > limits.max_prompt_bytes {
        return Err(ApiError::invalid(
            prompt_param,
            format!(
                "`{prompt_param}` holds {} bytes of text; at most {} are allowed",
                size.text_bytes, limits.max_prompt_bytes
            ),
        ));
    }
    let choices = size.prompts.saturating_mul(params.n.max(1) as usize);
    if choices > limits.max_choices_per_request {
        let param = if size.prompts > limits.max_choices_per_request {
            prompt_param
        } else {
            "n"
        };
        return Err(ApiError::invalid(
            param,
            format!(
                "{} prompts × n = {} = {choices} sequences; one request may start at most {}",
                size.prompts, params.n, limits.max_choices_per_request
            ),
        ));
    }
    let stop_bytes: usize = params.stop.iter().map(String::len).sum();
    if stop_bytes > limits.max_stop_bytes {
        return Err(ApiError::invalid(
            "stop",
            format!(
                "`stop` strings hold {stop_bytes} bytes together; at most {} are allowed",
                limits.max_stop_bytes
            ),
        ));
    }
    if params.stop_token_ids.len() > limits.max_stop_token_ids {
        return Err(ApiError::invalid(
            "stop_token_ids",
            format!(
                "`stop_token_ids` holds {} ids; at most {} are allowed",
                params.stop_token_ids.len(),
                limits.max_stop_token_ids
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> LimitsConfig {
        LimitsConfig {
            max_choices_per_request: 8,
            max_stop_bytes: 10,
            max_stop_token_ids: 2,
            max_prompt_bytes: 100,
            ..LimitsConfig::default()
        }
    }

    fn size(prompts: usize, text_bytes: usize) -> PromptSize {
        PromptSize { prompts, text_bytes }
    }

    fn param_of(result: Result<(), ApiError>) -> Option<String> {
        result.err().and_then(|e| e.param().map(str::to_owned))
    }

    #[test]
    fn each_limit_names_its_parameter_and_the_edge_passes() {
        let p = |n: u32| SamplingParams {
            n,
            ..Default::default()
        };
        let l = limits();
        assert_eq!(param_of(check_limits(&l, size(4, 100), &p(2), "prompt")), None);
        assert_eq!(
            param_of(check_limits(&l, size(1, 101), &p(1), "messages")).as_deref(),
            Some("messages")
        );
        assert_eq!(
            param_of(check_limits(&l, size(3, 0), &p(3), "prompt")).as_deref(),
            Some("n")
        );
        assert_eq!(
            param_of(check_limits(&l, size(9, 0), &p(1), "prompt")).as_deref(),
            Some("prompt")
        );
        let stops = SamplingParams {
            stop: vec!["abcde".into(), "fghij".into()],
            stop_token_ids: vec![1, 2],
            ..Default::default()
        };
        assert_eq!(param_of(check_limits(&l, size(1, 0), &stops, "prompt")), None);
        let long_stop = SamplingParams {
            stop: vec!["abcde".into(), "fghijk".into()],
            ..Default::default()
        };
        assert_eq!(
            param_of(check_limits(&l, size(1, 0), &long_stop, "prompt")).as_deref(),
            Some("stop")
        );
        let many_ids = SamplingParams {
            stop_token_ids: vec![1, 2, 3],
            ..Default::default()
        };
        assert_eq!(
            param_of(check_limits(&l, size(1, 0), &many_ids, "prompt")).as_deref(),
            Some("stop_token_ids")
        );
    }
}
