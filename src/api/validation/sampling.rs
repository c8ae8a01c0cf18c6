//! The sampling group: [`CommonFields`] and [`SamplingFields`] with the knobs each endpoint
//! spells its own way ([`EndpointKnobs`]) become [`SamplingParams`], or an
//! [`ApiError::InvalidParameter`] that names the offending field.
//!
//! Rules (OpenAI's ranges unless noted; each error names the parameter):
//! - `temperature` in `[0, 2]` (default 1).
//! - `top_p` in `(0, 1]` (default 1).
//! - `top_k` (vLLM) is `-1`/`0` (disabled) or `>= 1`.
//! - `min_p` (vLLM) in `[0, 1]` (default 0).
//! - `n` in `[1, 16]`.
//! - `max_tokens` (as the endpoint spells it) `>= 1`.
//! - `presence_penalty`, `frequency_penalty` in `[-2, 2]`.
//! - `repetition_penalty` (vLLM) `> 0` and finite (default 1).
//! - logprobs (completions `logprobs`, chat `top_logprobs`) `<= 20` (vLLM's cap; OpenAI's is 5).
//! - `stop`: at most 4 strings (OpenAI); empty strings are dropped, since
//!   they would match everywhere.
//! - `min_tokens` (vLLM): at most `max_tokens` (when that is sent).
//! - `prompt_logprobs` (vLLM) `<= 20`.
//! - `logit_bias` keys are token ids below the vocabulary size and values in `[-100, 100]`.

use std::collections::HashMap;

use crate::api::errors::ApiError;
use crate::api::openai_types::{CommonFields, SamplingFields, StopInput};
use crate::engine::sampling_params::SamplingParams;

/// Most choices one request may ask for.
pub const MAX_N: u32 = 16;
/// Most top logprobs per token.
pub const MAX_LOGPROBS: u32 = 20;
/// Most stop strings (OpenAI's limit).
pub const MAX_STOP: usize = 4;

/// The knobs each endpoint spells its own way, resolved by the endpoint (`max_tokens`'s
/// default and name, the logprobs count and its field, completions' `echo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointKnobs {
    /// Resolved value (`None`: chat's open bound, fitted to the context later).
    pub max_tokens: Option<u32>,
    /// The name the client used for it.
    pub max_tokens_param: &'static str,
    /// Top logprobs per generated token.
    pub logprobs: Option<u32>,
    pub logprobs_param: &'static str,
    /// Completions' `echo`: the prompt precedes the text (with `logprobs`, its logprobs too).
    pub echo: bool,
    /// `echo` with `max_tokens: 0`: the prompt alone.
    pub echo_only: bool,
}

fn check_range(param: &str, value: Option<f32>, ok: impl Fn(f32) -> bool, rule: &str) -> Result<(), ApiError> {
    match value {
        Some(v) if !ok(v) => Err(ApiError::invalid(param, format!("`{param}` must be {rule}, got {v}"))),
        _ => Ok(()),
    }
}

/// Applies the rules (see the module docs) and resolves defaults; the output constraint is
/// added later, by the validation step.
pub fn sampling_params(
    common: &CommonFields,
    fields: &SamplingFields,
    knobs: EndpointKnobs,
) -> Result<SamplingParams, ApiError> {
    let d = SamplingParams::default();
    check_range(
        "temperature",
        common.temperature,
        |v| (0.0..=2.0).contains(&v),
        "between 0 and 2",
    )?;
    check_range(
        "top_p",
        common.top_p,
        |v| v > 0.0 && v <= 1.0,
        "greater than 0 and at most 1",
    )?;
    check_range("min_p", fields.min_p, |v| (0.0..=1.0).contains(&v), "between 0 and 1")?;
    for (param, value) in [
        ("presence_penalty", fields.presence_penalty),
        ("frequency_penalty", fields.frequency_penalty),
    ] {
        check_range(param, value, |v| (-2.0..=2.0).contains(&v), "between -2 and 2")?;
    }
    check_range(
        "repetition_penalty",
        fields.repetition_penalty,
        |v| v > 0.0 && v.is_finite(),
        "greater than 0",
    )?;

    let top_k = match fields.top_k {
        None | Some(-1) | Some(0) => None,
        Some(k) if k >= 1 => Some(k.unsigned_abs()),
        Some(k) => {
            return Err(ApiError::invalid(
                "top_k",
                format!("`top_k` must be -1 (disabled) or at least 1, got {k}"),
            ));
        }
    };

    let n = fields.n.unwrap_or(1);
    if !(1..=MAX_N).contains(&n) {
        return Err(ApiError::invalid(
            "n",
            format!("`n` must be between 1 and {MAX_N}, got {n}"),
        ));
    }
    if knobs.max_tokens == Some(0) {
        let p = knobs.max_tokens_param;
        return Err(ApiError::invalid(p, format!("`{p}` must be at least 1")));
    }
    if let Some(k) = knobs.logprobs.filter(|&k| k > MAX_LOGPROBS) {
        let p = knobs.logprobs_param;
        return Err(ApiError::invalid(
            p,
            format!("`{p}` must be at most {MAX_LOGPROBS}, got {k}"),
        ));
    }
    let min_tokens = fields.min_tokens.unwrap_or(0);
    if let Some(max_tokens) = knobs.max_tokens.filter(|&m| min_tokens > m) {
        let p = knobs.max_tokens_param;
        return Err(ApiError::invalid(
            "min_tokens",
            format!("`min_tokens` ({min_tokens}) must be at most `{p}` ({max_tokens})"),
        ));
    }
    if let Some(k) = fields.prompt_logprobs.filter(|&k| k > MAX_LOGPROBS) {
        return Err(ApiError::invalid(
            "prompt_logprobs",
            format!("`prompt_logprobs` must be at most {MAX_LOGPROBS}, got {k}"),
        ));
    }
    let logit_bias = fields
        .logit_bias
        .as_ref()
        .map(parse_logit_bias)
        .transpose()?
        .unwrap_or_default();

    let stop: Vec<String> = fields
        .stop
        .as_ref()
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
    // `echo` with `logprobs` answers with the prompt tokens' logprobs too (as vLLM does).
    let prompt_logprobs = match knobs.logprobs.filter(|_| knobs.echo) {
        Some(k) => Some(fields.prompt_logprobs.unwrap_or(0).max(k)),
        None => fields.prompt_logprobs,
    };

    Ok(SamplingParams {
        temperature: common.temperature.unwrap_or(d.temperature),
        top_p: common.top_p.unwrap_or(d.top_p),
        top_k,
        min_p: fields.min_p.unwrap_or(d.min_p),
        // Bit-cast: any i64 is a valid, deterministic seed.
        seed: common.seed.map(|s| s as u64),
        presence_penalty: fields.presence_penalty.unwrap_or(d.presence_penalty),
        frequency_penalty: fields.frequency_penalty.unwrap_or(d.frequency_penalty),
        repetition_penalty: fields.repetition_penalty.unwrap_or(d.repetition_penalty),
        max_tokens: knobs.max_tokens,
        stop,
        stop_token_ids: fields.stop_token_ids.clone().unwrap_or_default(),
        ignore_eos: fields.ignore_eos.unwrap_or(false),
        logprobs: knobs.logprobs,
        n,
        // The validation step adds the output constraint and its grammar.
        structured: None,
        grammar: None,
        logit_bias,
        min_tokens,
        prompt_logprobs,
        return_prompt_logprobs: fields.prompt_logprobs.is_some(),
        echo: knobs.echo,
        echo_only: knobs.echo_only,
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
