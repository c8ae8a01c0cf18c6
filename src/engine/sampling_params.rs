//! Validated sampling knobs handed from the API layer to the engine.
//!
//! This is deliberately a plain value with no serde and no `Option`-for-default
//! fields: the API layer (`api::validation`) resolves defaults and rejects bad
//! values once, so the scheduler and sampler never re-check them.

use crate::engine::structured_output::{CompiledGrammar, StructuredOutput};

/// Sampling parameters of one request body, already validated; its choices share one copy
/// behind an `Arc`.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy. Validated to `[0, 2]`.
    pub temperature: f32,
    /// Nucleus mass, `(0, 1]`; 1 disables it.
    pub top_p: f32,
    /// `None` disables top-k; `Some(k)` with `k >= 1`.
    pub top_k: Option<u32>,
    /// Min-p relative to the most likely token, `[0, 1]`; 0 disables it.
    pub min_p: f32,
    /// The body's seed. Choice `c` samples with `seed + c`, which travels beside these
    /// shared params (`Generate::seed`, `ScheduledSequence::seed`); the sampler reads that.
    pub seed: Option<u64>,
    /// OpenAI additive penalties, `[-2, 2]`.
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// Multiplicative (CTRL-style) penalty, `> 0`; 1 disables it.
    pub repetition_penalty: f32,
    /// Upper bound on generated tokens; `None`: up to the context length (the API fits it
    /// to `max_model_len - prompt_len` before the engine sees it).
    pub max_tokens: Option<u32>,
    /// Stop strings; none is empty.
    pub stop: Vec<String>,
    /// Extra token ids that end generation (in addition to EOS).
    pub stop_token_ids: Vec<u32>,
    /// Keep generating past EOS (benchmarks).
    pub ignore_eos: bool,
    /// Number of top logprobs to return per token; `Some(0)` = only the
    /// sampled token's logprob; `None` = no logprobs at all.
    pub logprobs: Option<u32>,
    /// Choices to generate for the prompt.
    pub n: u32,
    /// Added to the logits of these token ids before any other processing, sorted by id,
    /// each id below the vocabulary size and each bias in `[-100, 100]`.
    pub logit_bias: Vec<(u32, f32)>,
    /// End-of-generation and stop tokens are masked until this many tokens are out, and stop
    /// strings are not looked for (vLLM's `min_tokens`). At most `max_tokens`.
    pub min_tokens: u32,
    /// Log-probabilities of the prompt's tokens with this many top alternatives each (vLLM's
    /// `prompt_logprobs`); such a request computes its whole prompt, bypassing the prefix cache.
    pub prompt_logprobs: Option<u32>,
    /// The API answers with `prompt_logprobs` (asked for; `echo` with `logprobs` computes them
    /// without returning them under that name).
    pub return_prompt_logprobs: bool,
    /// The API prepends the prompt to the choice's text (OpenAI's completions `echo`).
    pub echo: bool,
    /// `echo` with `max_tokens: 0`: the API answers with the prompt alone. The engine runs
    /// one step (`max_tokens` 1) for the prompt's logprobs; its token is not sent, as vLLM.
    pub echo_only: bool,
    /// The grammar the output must follow; `None` samples freely (and pays nothing for it).
    pub structured: Option<StructuredOutput>,
    /// `structured` compiled (by the API layer, off the hot path, before the request is
    /// submitted); the executor masks each sampled row with it.
    pub grammar: Option<CompiledGrammar>,
}

impl Default for SamplingParams {
    /// The OpenAI defaults (and the completions endpoint's `max_tokens` of 16).
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            top_k: None,
            min_p: 0.0,
            seed: None,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            max_tokens: Some(16),
            stop: Vec::new(),
            stop_token_ids: Vec::new(),
            ignore_eos: false,
            logprobs: None,
            n: 1,
            structured: None,
            grammar: None,
            logit_bias: Vec::new(),
            min_tokens: 0,
            prompt_logprobs: None,
            return_prompt_logprobs: false,
            echo: false,
            echo_only: false,
        }
    }
}

impl SamplingParams {
    /// True when sampling reduces to argmax, so the sampler can skip the
    /// softmax/sort and every one of the `n` choices is identical.
    /// The most tokens this request may generate by its own bound (the context bounds it too).
    pub fn token_budget(&self) -> usize {
        self.max_tokens.map_or(usize::MAX, |m| m as usize)
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0 || self.top_k == Some(1)
    }

    /// Whether the sampler needs the tokens generated so far (a penalty reads them; a grammar
    /// replays them to rebuild its state after a recompute preemption or a restart).
    pub fn uses_output_tokens(&self) -> bool {
        self.repetition_penalty != 1.0
            || self.frequency_penalty != 0.0
            || self.presence_penalty != 0.0
            || self.grammar.is_some()
    }

    /// Whether the scheduler may start the request from the prefix cache: not when the
    /// prompt's logprobs are wanted, since those need every prompt position computed.
    pub fn reads_prefix_cache(&self) -> bool {
        self.prompt_logprobs.is_none()
    }

    /// Whether the executor needs the prompt's tokens (the repetition penalty reads them;
    /// prompt logprobs are those of the prompt's tokens).
    pub fn uses_prompt_tokens(&self) -> bool {
        self.repetition_penalty != 1.0 || self.prompt_logprobs.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_openai() {
        let p = SamplingParams::default();
        assert_eq!(p.temperature, 1.0);
        assert_eq!(p.top_p, 1.0);
        assert_eq!(p.min_p, 0.0);
        assert_eq!(p.repetition_penalty, 1.0);
        assert_eq!(p.max_tokens, Some(16));
        assert_eq!(p.n, 1);
        assert!(!p.is_greedy());
    }

    #[test]
    fn greedy_by_temperature_or_top_k() {
        let t0 = SamplingParams {
            temperature: 0.0,
            ..Default::default()
        };
        assert!(t0.is_greedy());
        let k1 = SamplingParams {
            top_k: Some(1),
            ..Default::default()
        };
        assert!(k1.is_greedy());
        let k2 = SamplingParams {
            top_k: Some(2),
            ..Default::default()
        };
        assert!(!k2.is_greedy());
    }
}
