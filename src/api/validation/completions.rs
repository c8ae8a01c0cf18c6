//! The rules of a completions body: a non-empty prompt, `stream_options` only with `stream`,
//! `max_tokens` (default 16) and `logprobs` as the sampling group's knobs, `echo` (with
//! `max_tokens: 0`, the prompt alone), and `best_of`, if sent, equal to `n` (generating extra
//! candidates to rank is not supported). `suffix` is checked when the prompt is built, which
//! knows the tokenizer.

use super::limits::PromptSize;
use super::prompt::{ParamNames, check_prompt_input};
use super::sampling::{EndpointKnobs, sampling_params};
use super::{Body, Checked, Delivery};
use crate::api::errors::ApiError;
use crate::api::openai_types::CommonFields;
use crate::api::openai_types::{CompletionRequest, PromptInput};
use crate::api::prompt::PromptSource;
use crate::api::tool_calls::ToolCallParser;
use crate::engine::sampling_params::SamplingParams;

impl Body for CompletionRequest {
    /// Completions word their answer from the engine's output alone.
    type Output = ();

    fn common(&self) -> &CommonFields {
        &self.common
    }

    fn check(self, _tool_parser: Option<ToolCallParser>) -> Result<Checked<()>, ApiError> {
        check_prompt_input(&self.prompt)?;
        let delivery = Delivery::of(self.common.stream, self.sampling.stream_options.as_ref())?;
        // `echo` with `max_tokens: 0` is the prompt alone (vLLM): one step, not sent.
        let echo = self.echo == Some(true);
        let echo_only = echo && self.max_tokens == Some(0);
        let max_tokens = if echo_only { Some(1) } else { self.max_tokens };
        let knobs = EndpointKnobs {
            max_tokens: max_tokens.or(SamplingParams::default().max_tokens),
            max_tokens_param: "max_tokens",
            logprobs: self.logprobs,
            logprobs_param: "logprobs",
            echo,
            echo_only,
        };
        let params = sampling_params(&self.common, &self.sampling, knobs)?;
        if let Some(best_of) = self.best_of.filter(|&b| b != params.n) {
            return Err(ApiError::invalid(
                "best_of",
                format!("`best_of` must equal `n` ({}) when set; got {best_of}", params.n),
            ));
        }
        Ok(Checked {
            params,
            tool_constraint: None,
            constraints: self.constraints,
            size: prompt_size(&self.prompt),
            prompt: PromptSource::Completion {
                prompt: self.prompt,
                suffix: self.suffix,
            },
            names: ParamNames {
                prompt: "prompt",
                max_tokens: "max_tokens",
            },
            delivery,
            output: (),
        })
    }
}

/// How many prompts, and their bytes of text (token ids count none: the context bounds them).
fn prompt_size(prompt: &PromptInput) -> PromptSize {
    let (prompts, text_bytes) = match prompt {
        PromptInput::Text(text) => (1, text.len()),
        PromptInput::TextBatch(texts) => (texts.len(), texts.iter().map(String::len).sum()),
        PromptInput::Tokens(_) => (1, 0),
        PromptInput::TokenBatch(batch) => (batch.len(), 0),
    };
    PromptSize { prompts, text_bytes }
}
