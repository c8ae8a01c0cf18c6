//! Request validation: turns a parsed request into [`SamplingParams`] or an
//! [`ApiError::InvalidParameter`] that names the offending field.
//!
//! Rules (OpenAI's ranges unless noted; each error names the parameter):
//! - `temperature` in `[0, 2]` (default 1).
//! - `top_p` in `(0, 1]` (default 1).
//! - `top_k` (vLLM) is `-1`/`0` (disabled) or `>= 1`.
//! - `min_p` (vLLM) in `[0, 1]` (default 0).
//! - `n` in `[1, 16]`; `best_of` (completions), if sent, must equal `n`:
//!   generating extra candidates to rank is not supported.
//! - `max_tokens` / `max_completion_tokens` `>= 1` (each, when both are sent). Completions
//!   default to 16;
//!   chat defaults to `u32::MAX` ("up to the context"), which the server
//!   clamps to `max_model_len - prompt_len`.
//! - `presence_penalty`, `frequency_penalty` in `[-2, 2]`.
//! - `repetition_penalty` (vLLM) `> 0` and finite (default 1).
//! - completions `logprobs` `<= 20` (vLLM's cap; OpenAI's is 5).
//! - chat `top_logprobs` `<= 20` and only with `logprobs: true`.
//! - `stop`: at most 4 strings (OpenAI); empty strings are dropped, since
//!   they would match everywhere.
//! - `min_tokens` (vLLM): at most `max_tokens` (when that is sent).
//! - `prompt_logprobs` (vLLM) `<= 20`.
//! - `stream_options` only with `stream: true` (as OpenAI and vLLM).
//! - completions `suffix` only where the model has fill-in-the-middle tokens
//!   (checked by the endpoint, which knows the tokenizer).
//! - `logit_bias` keys are token ids (below the vocabulary size: checked by
//!   the pipeline) and values in `[-100, 100]`.
//! - the prompt (or each prompt of a batch) and `messages` must be non-empty.
//!
//! Checks needing the model (token ids < vocab size, prompt length vs
//! context) belong to the server, which knows the tokenizer and
//! `max_model_len`.

use std::collections::HashMap;

use crate::api::errors::ApiError;
use crate::api::openai_types::{ChatCompletionRequest, CompletionRequest, PromptInput, StopInput};
use crate::engine::sampling_params::SamplingParams;

/// Most choices one request may ask for.
pub const MAX_N: u32 = 16;
/// Most top logprobs per token.
pub const MAX_LOGPROBS: u32 = 20;
/// Most stop strings (OpenAI's limit).
pub const MAX_STOP: usize = 4;

/// The knobs both endpoints share, with endpoint-specific defaults already
/// resolved (`max_tokens`, `logprobs`), so the range rules live in one place.
#[derive(Debug, Clone, Default)]
pub struct SamplingInputs<'a> {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i32>,
    pub min_p: Option<f32>,
    pub n: Option<u32>,
    /// Resolved value (`None`: chat's open bound, fitted to the context later) and the name
    /// the client used for it.
    pub max_tokens: Option<u32>,
    pub max_tokens_param: &'static str,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub seed: Option<i64>,
    pub stop: Option<&'a StopInput>,
    pub stop_token_ids: Option<&'a [u32]>,
    pub ignore_eos: Option<bool>,
    pub min_tokens: Option<u32>,
    pub logit_bias: Option<&'a HashMap<String, f64>>,
    pub prompt_logprobs: Option<u32>,
    /// Resolved top-logprobs count and the parameter that carries it.
    pub logprobs: Option<u32>,
    pub logprobs_param: &'static str,
}

fn check_range(param: &str, value: Option<f32>, ok: impl Fn(f32) -> bool, rule: &str) -> Result<(), ApiError> {
    match value {
        Some(v) if !ok(v) => Err(ApiError::invalid(param, format!("`{param}` must be {rule}, got {v}"))),
        _ => Ok(()),
    }
}

/// Applies the shared rules (see the module docs) and resolves defaults.
pub fn validate_sampling(inputs: &SamplingInputs<'_>) -> Result<SamplingParams, ApiError> {
    let d = SamplingParams::default();
    check_range(
        "temperature",
        inputs.temperature,
        |v| (0.0..=2.0).contains(&v),
        "between 0 and 2",
    )?;
    check_range(
        "top_p",
        inputs.top_p,
        |v| v > 0.0 && v <= 1.0,
        "greater than 0 and at most 1",
    )?;
    check_range("min_p", inputs.min_p, |v| (0.0..=1.0).contains(&v), "between 0 and 1")?;
    for (param, value) in [
        ("presence_penalty", inputs.presence_penalty),
        ("frequency_penalty", inputs.frequency_penalty),
    ] {
        check_range(param, value, |v| (-2.0..=2.0).contains(&v), "between -2 and 2")?;
    }
    check_range(
        "repetition_penalty",
        inputs.repetition_penalty,
        |v| v > 0.0 && v.is_finite(),
        "greater than 0",
    )?;

    let top_k = match inputs.top_k {
        None | Some(-1) | Some(0) => None,
        Some(k) if k >= 1 => Some(k.unsigned_abs()),
        Some(k) => {
            return Err(ApiError::invalid(
                "top_k",
                format!("`top_k` must be -1 (disabled) or at least 1, got {k}"),
            ));
        }
    };

    let n = inputs.n.unwrap_or(1);
    if !(1..=MAX_N).contains(&n) {
        return Err(ApiError::invalid(
            "n",
            format!("`n` must be between 1 and {MAX_N}, got {n}"),
        ));
    }
    if inputs.max_tokens == Some(0) {
        let p = inputs.max_tokens_param;
        return Err(ApiError::invalid(p, format!("`{p}` must be at least 1")));
    }
    if let Some(k) = inputs.logprobs.filter(|&k| k > MAX_LOGPROBS) {
        let p = inputs.logprobs_param;
        return Err(ApiError::invalid(
            p,
            format!("`{p}` must be at most {MAX_LOGPROBS}, got {k}"),
        ));
    }
    let min_tokens = inputs.min_tokens.unwrap_or(0);
    if let Some(max_tokens) = inputs.max_tokens.filter(|&m| min_tokens > m) {
        let p = inputs.max_tokens_param;
        return Err(ApiError::invalid(
            "min_tokens",
            format!("`min_tokens` ({min_tokens}) must be at most `{p}` ({max_tokens})"),
        ));
    }
    if let Some(k) = inputs.prompt_logprobs.filter(|&k| k > MAX_LOGPROBS) {
        return Err(ApiError::invalid(
            "prompt_logprobs",
            format!("`prompt_logprobs` must be at most {MAX_LOGPROBS}, got {k}"),
        ));
    }
    let logit_bias = inputs.logit_bias.map(parse_logit_bias).transpose()?.unwrap_or_default();

    let stop: Vec<String> = inputs
        .stop
        .map(StopInput::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|s| !s.is_empty())
        .cloned()
        .collect();
    if stop.len() > MAX_STOP {
        return Err(ApiError::invalid(
            "stop",
            format!("`stop` may hold at most {MAX_STOP} strings, got {}", stop.len()),
        ));
    }

    Ok(SamplingParams {
        temperature: inputs.temperature.unwrap_or(d.temperature),
        top_p: inputs.top_p.unwrap_or(d.top_p),
        top_k,
        min_p: inputs.min_p.unwrap_or(d.min_p),
        // Bit-cast: any i64 is a valid, deterministic seed.
        seed: inputs.seed.map(|s| s as u64),
        presence_penalty: inputs.presence_penalty.unwrap_or(d.presence_penalty),
        frequency_penalty: inputs.frequency_penalty.unwrap_or(d.frequency_penalty),
        repetition_penalty: inputs.repetition_penalty.unwrap_or(d.repetition_penalty),
        max_tokens: inputs.max_tokens,
        stop,
        stop_token_ids: inputs.stop_token_ids.map(<[u32]>::to_vec).unwrap_or_default(),
        ignore_eos: inputs.ignore_eos.unwrap_or(false),
        logprobs: inputs.logprobs,
        n,
        // Set by the structured-output parsing of the endpoint (response_format, tools).
        structured: None,
        grammar: None,
        logit_bias,
        min_tokens,
        prompt_logprobs: inputs.prompt_logprobs,
        return_prompt_logprobs: inputs.prompt_logprobs.is_some(),
        // Completions only: set by `CompletionRequest::sampling_params`.
        echo: false,
        echo_only: false,
    })
}

/// OpenAI's `logit_bias`: token ids as decimal strings, biases in `[-100, 100]`; sorted by id.
fn parse_logit_bias(bias: &HashMap<String, f64>) -> Result<Vec<(u32, f32)>, ApiError> {
    let mut parsed = Vec::with_capacity(bias.len());
    for (token, &value) in bias {
        match token.parse::<u32>() {
            Ok(id) if (-100.0..=100.0).contains(&value) => parsed.push((id, value as f32)),
            _ => {
                return Err(ApiError::invalid(
                    "logit_bias",
                    format!("`logit_bias` maps token ids to values in [-100, 100]; got {token:?}: {value}"),
                ));
            }
        }
    }
    parsed.sort_unstable_by_key(|&(id, _)| id);
    Ok(parsed)
}

/// Refuses `logit_bias` keys outside the served vocabulary (`token_id_bound` is one past the
/// largest id), naming `logit_bias`.
pub fn check_logit_bias_ids(params: &SamplingParams, token_id_bound: usize) -> Result<(), ApiError> {
    match params.logit_bias.iter().find(|(id, _)| *id as usize >= token_id_bound) {
        Some((id, _)) => Err(ApiError::invalid(
            "logit_bias",
            format!("`logit_bias` names token id {id}, outside the vocabulary (size {token_id_bound})"),
        )),
        None => Ok(()),
    }
}

/// `stream_options` is meaningless without streaming; OpenAI rejects it.
fn check_stream_options(stream: Option<bool>, has_options: bool) -> Result<(), ApiError> {
    if has_options && stream != Some(true) {
        return Err(ApiError::invalid(
            "stream_options",
            "`stream_options` is only allowed when `stream` is true",
        ));
    }
    Ok(())
}

fn check_prompt(prompt: &PromptInput) -> Result<(), ApiError> {
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

impl CompletionRequest {
    /// Validates the whole request (see the module docs) and returns its
    /// sampling parameters. The handler's single validation entry point.
    pub fn sampling_params(&self) -> Result<SamplingParams, ApiError> {
        check_prompt(&self.prompt)?;
        check_stream_options(self.stream, self.stream_options.is_some())?;
        // `echo` with `max_tokens: 0` is the prompt alone (vLLM): one step, not sent.
        let echo_only = self.echo == Some(true) && self.max_tokens == Some(0);
        let max_tokens = if echo_only { Some(1) } else { self.max_tokens };
        let mut params = validate_sampling(&SamplingInputs {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            min_p: self.min_p,
            n: self.n,
            max_tokens: max_tokens.or(SamplingParams::default().max_tokens),
            max_tokens_param: "max_tokens",
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            repetition_penalty: self.repetition_penalty,
            seed: self.seed,
            stop: self.stop.as_ref(),
            stop_token_ids: self.stop_token_ids.as_deref(),
            ignore_eos: self.ignore_eos,
            min_tokens: self.min_tokens,
            logit_bias: self.logit_bias.as_ref(),
            prompt_logprobs: self.prompt_logprobs,
            logprobs: self.logprobs,
            logprobs_param: "logprobs",
        })?;
        params.echo_only = echo_only;
        // `echo` with `logprobs` answers with the prompt tokens' logprobs too (as vLLM does).
        params.echo = self.echo == Some(true);
        if let Some(k) = params.logprobs.filter(|_| params.echo) {
            params.prompt_logprobs = Some(params.prompt_logprobs.unwrap_or(0).max(k));
        }
        if let Some(best_of) = self.best_of.filter(|&b| b != params.n) {
            return Err(ApiError::invalid(
                "best_of",
                format!("`best_of` must equal `n` ({}) when set; got {best_of}", params.n),
            ));
        }
        Ok(params)
    }
}

impl ChatCompletionRequest {
    /// Validates the whole request (see the module docs) and returns its
    /// sampling parameters. Message contents are checked by
    /// [`ChatCompletionRequest::flattened_messages`].
    pub fn sampling_params(&self) -> Result<SamplingParams, ApiError> {
        if self.messages.is_empty() {
            return Err(ApiError::invalid(
                "messages",
                "`messages` must contain at least one message",
            ));
        }
        if self.chat_template.is_some() {
            return Err(ApiError::invalid(
                "chat_template",
                "`chat_template` is not accepted in requests: the server renders only the model's \
                 template or the one its operator configured",
            ));
        }
        check_stream_options(self.stream, self.stream_options.is_some())?;
        if self.prompt_logprobs.is_some() && self.stream == Some(true) {
            return Err(ApiError::invalid(
                "prompt_logprobs",
                "`prompt_logprobs` is not available with `stream: true` on chat (as in vLLM)",
            ));
        }
        let logprobs_on = self.logprobs == Some(true);
        if self.top_logprobs.is_some() && !logprobs_on {
            return Err(ApiError::invalid(
                "top_logprobs",
                "`top_logprobs` requires `logprobs` to be true",
            ));
        }
        // `max_completion_tokens` wins, but a `max_tokens` sent beside it must still be valid.
        if self.max_tokens == Some(0) {
            return Err(ApiError::invalid("max_tokens", "`max_tokens` must be at least 1"));
        }
        let (max_tokens, max_tokens_param) = match (self.max_completion_tokens, self.max_tokens) {
            (Some(m), _) => (Some(m), "max_completion_tokens"),
            (None, Some(m)) => (Some(m), "max_tokens"),
            (None, None) => (None, "max_tokens"),
        };
        validate_sampling(&SamplingInputs {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            min_p: self.min_p,
            n: self.n,
            max_tokens,
            max_tokens_param,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            repetition_penalty: self.repetition_penalty,
            seed: self.seed,
            stop: self.stop.as_ref(),
            stop_token_ids: self.stop_token_ids.as_deref(),
            ignore_eos: self.ignore_eos,
            min_tokens: self.min_tokens,
            logit_bias: self.logit_bias.as_ref(),
            prompt_logprobs: self.prompt_logprobs,
            logprobs: logprobs_on.then(|| self.top_logprobs.unwrap_or(0)),
            logprobs_param: "top_logprobs",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn completion(extra: Value) -> Result<SamplingParams, ApiError> {
        let mut body = json!({"model": "m", "prompt": "hi"});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        let req: CompletionRequest = serde_json::from_value(body).expect("test body parses");
        req.sampling_params()
    }

    fn chat(extra: Value) -> Result<SamplingParams, ApiError> {
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        let req: ChatCompletionRequest = serde_json::from_value(body).expect("test body parses");
        req.sampling_params()
    }

    fn rejected_param(r: Result<SamplingParams, ApiError>) -> String {
        match r {
            Err(e) => e.param().unwrap_or("<none>").to_owned(),
            Ok(p) => panic!("expected an error, got {p:?}"),
        }
    }

    #[test]
    fn defaults() {
        let p = completion(json!({})).unwrap();
        assert_eq!(p, SamplingParams::default());
        let p = chat(json!({})).unwrap();
        assert_eq!(p.max_tokens, None);
        assert_eq!(p.logprobs, None);
    }

    #[test]
    fn a_request_cannot_bring_its_own_chat_template() {
        for template in [json!("{{ 'x' }}"), json!(""), json!({"a": 1})] {
            assert_eq!(
                rejected_param(chat(json!({ "chat_template": template }))),
                "chat_template"
            );
        }
        // `null` is the same as leaving it out.
        assert!(chat(json!({"chat_template": null})).is_ok());
    }

    #[test]
    fn each_bad_value_names_its_parameter() {
        let cases = [
            (json!({"temperature": 2.5}), "temperature"),
            (json!({"temperature": -0.1}), "temperature"),
            (json!({"top_p": 0}), "top_p"),
            (json!({"top_p": 1.01}), "top_p"),
            (json!({"top_k": -2}), "top_k"),
            (json!({"min_p": 1.5}), "min_p"),
            (json!({"n": 0}), "n"),
            (json!({"n": 17}), "n"),
            (json!({"max_tokens": 0}), "max_tokens"),
            (json!({"presence_penalty": 2.1}), "presence_penalty"),
            (json!({"frequency_penalty": -3}), "frequency_penalty"),
            (json!({"repetition_penalty": 0}), "repetition_penalty"),
            (json!({"stop": ["a", "b", "c", "d", "e"]}), "stop"),
            (json!({"min_tokens": 3, "max_tokens": 2}), "min_tokens"),
            (json!({"logit_bias": {"x": 1}}), "logit_bias"),
            (json!({"logit_bias": {"5": 101}}), "logit_bias"),
            (json!({"logit_bias": {"5": -100.5}}), "logit_bias"),
            (json!({"stream_options": {"include_usage": true}}), "stream_options"),
        ];
        for (body, param) in cases {
            assert_eq!(rejected_param(completion(body.clone())), param, "completion {body}");
            assert_eq!(rejected_param(chat(body.clone())), param, "chat {body}");
        }
    }

    #[test]
    fn completion_specific_rules() {
        assert_eq!(rejected_param(completion(json!({"logprobs": 21}))), "logprobs");
        assert_eq!(rejected_param(completion(json!({"best_of": 2}))), "best_of");
        assert_eq!(
            rejected_param(completion(json!({"prompt_logprobs": 21}))),
            "prompt_logprobs"
        );
        assert_eq!(
            rejected_param(chat(json!({"prompt_logprobs": 1, "stream": true}))),
            "prompt_logprobs"
        );
        assert_eq!(chat(json!({"prompt_logprobs": 1})).unwrap().prompt_logprobs, Some(1));
        let p = completion(json!({"echo": true, "logprobs": 3, "prompt_logprobs": 1})).unwrap();
        assert!(p.echo && p.return_prompt_logprobs);
        assert_eq!(p.prompt_logprobs, Some(3), "echo's logprobs need the larger top-k");
        let p = completion(json!({"echo": true, "logprobs": 2})).unwrap();
        assert_eq!((p.prompt_logprobs, p.return_prompt_logprobs), (Some(2), false));
        assert!(completion(json!({"best_of": 2, "n": 2})).is_ok());
        let p = completion(json!({"logit_bias": {"9": 1.5, "5": -100}, "echo": true})).unwrap();
        assert_eq!(p.logit_bias, vec![(5, -100.0), (9, 1.5)], "sorted by id");
        assert!(check_logit_bias_ids(&p, 10).is_ok());
        let err = check_logit_bias_ids(&p, 9).unwrap_err();
        assert_eq!(err.param(), Some("logit_bias"));
        let p = completion(json!({"min_tokens": 4, "max_tokens": 4, "prompt_logprobs": 2})).unwrap();
        assert_eq!((p.min_tokens, p.prompt_logprobs), (4, Some(2)));
        assert_eq!(
            chat(json!({"min_tokens": 4000})).unwrap().min_tokens,
            4000,
            "open max_tokens"
        );
        for prompt in [json!(""), json!([]), json!(["a", ""]), json!([[1], []])] {
            assert_eq!(rejected_param(completion(json!({"prompt": prompt}))), "prompt");
        }
        assert_eq!(completion(json!({"logprobs": 0})).unwrap().logprobs, Some(0));
    }

    #[test]
    fn chat_specific_rules() {
        assert_eq!(rejected_param(chat(json!({"top_logprobs": 2}))), "top_logprobs");
        assert_eq!(
            rejected_param(chat(json!({"logprobs": true, "top_logprobs": 21}))),
            "top_logprobs"
        );
        assert_eq!(chat(json!({"logprobs": true})).unwrap().logprobs, Some(0));
        let p = chat(json!({"logprobs": true, "top_logprobs": 5})).unwrap();
        assert_eq!(p.logprobs, Some(5));
        assert_eq!(rejected_param(chat(json!({"messages": []}))), "messages");
        let p = chat(json!({"max_tokens": 5, "max_completion_tokens": 9})).unwrap();
        assert_eq!(p.max_tokens, Some(9));
        assert_eq!(
            rejected_param(chat(json!({"max_tokens": 5, "max_completion_tokens": 0}))),
            "max_completion_tokens"
        );
        assert_eq!(
            rejected_param(chat(json!({"max_tokens": 0, "max_completion_tokens": 5}))),
            "max_tokens"
        );
    }

    #[test]
    fn accepted_values_are_carried_over() {
        let p = completion(json!({
            "temperature": 0, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": -1,
            "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
            "max_tokens": 32, "stop": ["\n", ""], "stop_token_ids": [7], "ignore_eos": true,
            "logprobs": 3, "n": 2
        }))
        .unwrap();
        assert_eq!(p.temperature, 0.0);
        assert!(p.is_greedy());
        assert_eq!(p.top_k, Some(40));
        assert_eq!(p.seed, Some(u64::MAX));
        assert_eq!(p.stop, vec!["\n".to_owned()]);
        assert_eq!(p.stop_token_ids, vec![7]);
        assert!(p.ignore_eos);
        assert_eq!(p.logprobs, Some(3));
        assert_eq!((p.n, p.max_tokens), (2, Some(32)));
        for k in [-1, 0] {
            assert_eq!(completion(json!({"top_k": k})).unwrap().top_k, None);
        }
        assert_eq!(completion(json!({"stop": "END"})).unwrap().stop, vec!["END".to_owned()]);
    }
}
