//! What one request may ask for (`[limits]` in the config): how many sequences a body starts,
//! how much prompt text, how many stop strings' bytes and stop token ids, checked before
//! tokenisation, so an oversized body costs almost nothing; and, once the prompt is
//! tokenised, how many prompt logprobs. Each refusal names its parameter.

use crate::api::errors::ApiError;
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

/// Refuses a request whose prompt logprobs would cost more than
/// `limits.max_prompt_logprob_entries` to compute, decode and write: every prompt token's
/// logprob and its `k` alternatives, for each of the `n` choices of each prompt.
pub fn check_prompt_logprob_work(
    limits: &LimitsConfig,
    prompts: &[Vec<u32>],
    params: &SamplingParams,
) -> Result<(), ApiError> {
    let Some(k) = params.prompt_logprobs else {
        return Ok(());
    };
    let tokens: usize = prompts.iter().map(Vec::len).sum();
    let n = params.n.max(1) as usize;
    let entries = tokens.saturating_mul(k as usize + 1).saturating_mul(n);
    if entries <= limits.max_prompt_logprob_entries {
        return Ok(());
    }
    // `echo` with `logprobs` asks for the prompt's logprobs under another name.
    let (param, asked) = if params.echo && params.logprobs == Some(k) {
        ("logprobs", format!("`echo` with `logprobs` {k}"))
    } else {
        ("prompt_logprobs", format!("`prompt_logprobs` {k}"))
    };
    Err(ApiError::invalid(
        param,
        format!(
            "{asked} over {tokens} prompt tokens with `n` {n} asks for {tokens} × ({k} + 1) × {n} = {entries} \
             prompt logprob entries; at most {} are allowed: lower `{param}`, `n` or the prompt's length",
            limits.max_prompt_logprob_entries
        ),
    ))
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

    #[test]
    fn prompt_logprob_entries_count_tokens_alternatives_and_choices() {
        let l = LimitsConfig {
            max_prompt_logprob_entries: 600,
            ..LimitsConfig::default()
        };
        let prompts = vec![vec![1u32; 50], vec![2u32; 50]];
        let asking = |prompt_logprobs: Option<u32>, n: u32| SamplingParams {
            prompt_logprobs,
            n,
            ..Default::default()
        };
        // 100 tokens × (2 + 1) × 2 = 600: the edge passes; one more choice does not.
        assert_eq!(
            param_of(check_prompt_logprob_work(&l, &prompts, &asking(Some(2), 2))),
            None
        );
        let refused = check_prompt_logprob_work(&l, &prompts, &asking(Some(2), 3)).expect_err("over");
        assert_eq!(refused.param(), Some("prompt_logprobs"));
        assert!(refused.to_string().contains("900"), "{refused}");
        assert_eq!(
            param_of(check_prompt_logprob_work(&l, &prompts, &asking(None, 100))),
            None
        );
        // `echo` with `logprobs` is the same work, named by the field that asked for it:
        // 100 × (6 + 1) = 700.
        let echo = SamplingParams {
            echo: true,
            logprobs: Some(6),
            prompt_logprobs: Some(6),
            ..Default::default()
        };
        assert_eq!(
            param_of(check_prompt_logprob_work(&l, &prompts, &echo)).as_deref(),
            Some("logprobs")
        );
    }
}
