//! Turns one row of logits into a token: logit bias and the `min_tokens` mask, penalties, then greedy or temperature / top-k /
//! top-p / min-p sampling; log-probabilities come from the model's raw distribution.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::filtered_sampling;
use super::logit_masks::{apply_logit_bias, mask_before_min_tokens};
use crate::engine::events::TokenLogprobs;
use crate::engine::sampling_params::SamplingParams;
use crate::engine::step::SampledToken;

/// What the sampler needs to know about a sequence besides its logits.
pub struct SamplingContext<'a> {
    pub params: &'a SamplingParams,
    pub output_token_ids: &'a [u32],
    pub prompt_token_ids: Option<&'a [u32]>,
    /// Tokens generated before this sample (for `min_tokens`).
    pub num_generated: usize,
    /// The model's end-of-generation ids, masked until `min_tokens` are out.
    pub end_of_generation: &'a [u32],
}

/// A per-token RNG: seeded requests draw from a stream fixed by (seed, position), so the
/// same seed gives the same output whatever else is in the batch or whether it was preempted.
pub fn token_rng(seed: Option<u64>, generated: usize, fallback: &mut StdRng) -> StdRng {
    match seed {
        Some(seed) => StdRng::seed_from_u64(seed ^ (generated as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        None => StdRng::seed_from_u64(fallback.random()),
    }
}

/// Samples one token from `logits` (modified in place).
pub fn sample(logits: &mut [f32], ctx: &SamplingContext<'_>, rng: &mut StdRng) -> SampledToken {
    let params = ctx.params;
    let raw_log_norm = params.logprobs.map(|_| log_sum_exp(logits));
    let raw = params.logprobs.map(|_| logits.to_vec());
    apply_logit_bias(logits, &params.logit_bias);
    mask_before_min_tokens(logits, params, ctx.num_generated, ctx.end_of_generation);
    apply_penalties(logits, ctx);
    let token = if params.is_greedy() {
        argmax(logits)
    } else {
        sample_filtered(logits, params, rng)
    };
    let logprobs = raw.zip(raw_log_norm).map(|(raw, norm)| {
        let top_n = params.logprobs.unwrap_or(0) as usize;
        TokenLogprobs {
            logprob: raw[token as usize] - norm,
            top: top_indices(&raw, top_n)
                .into_iter()
                .map(|i| (i as u32, raw[i] - norm))
                .collect(),
        }
    });
    SampledToken { token, logprobs }
}

/// Repetition (prompt + output, multiplicative, as in HF/vLLM), then frequency and
/// presence (output only, additive, as in OpenAI).
fn apply_penalties(logits: &mut [f32], ctx: &SamplingContext<'_>) {
    let p = ctx.params;
    if p.repetition_penalty != 1.0 {
        let mut seen = vec![false; logits.len()];
        let prompt = ctx.prompt_token_ids.unwrap_or(&[]);
        for &t in prompt.iter().chain(ctx.output_token_ids) {
            if let Some(s) = seen.get_mut(t as usize) {
                *s = true;
            }
        }
        for (logit, seen) in logits.iter_mut().zip(seen) {
            if seen {
                *logit = if *logit > 0.0 {
                    *logit / p.repetition_penalty
                } else {
                    *logit * p.repetition_penalty
                };
            }
        }
    }
    if p.frequency_penalty != 0.0 || p.presence_penalty != 0.0 {
        let mut counts = std::collections::HashMap::<u32, u32>::new();
        for &t in ctx.output_token_ids {
            *counts.entry(t).or_default() += 1;
        }
        for (t, count) in counts {
            if let Some(logit) = logits.get_mut(t as usize) {
                *logit -= p.frequency_penalty * count as f32 + p.presence_penalty;
            }
        }
    }
}

/// Temperature, top-k, top-p and min-p, then a weighted draw (see [`filtered_sampling`]).
fn sample_filtered(logits: &[f32], params: &SamplingParams, rng: &mut StdRng) -> u32 {
    let candidates = filtered_sampling::candidates(logits, params);
    filtered_sampling::draw(&candidates, rng).unwrap_or_else(|| argmax(logits))
}

/// Keeps only the logits a grammar allows: `allowed` holds one bit per token id, least
/// significant bit first in 32-bit words (llguidance's mask layout). Every other id, and any
/// past the mask's end, gets `-inf`. Whole words of allowed ids are skipped.
pub fn apply_token_mask(logits: &mut [f32], allowed: &[u32]) {
    for (word_index, chunk) in logits.chunks_mut(32).enumerate() {
        let word = allowed.get(word_index).copied().unwrap_or(0);
        if word == u32::MAX {
            continue;
        }
        for (bit, logit) in chunk.iter_mut().enumerate() {
            if word & (1 << bit) == 0 {
                *logit = f32::NEG_INFINITY;
            }
        }
    }
}

pub fn argmax(values: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in values.iter().enumerate() {
        if *v > values[best] {
            best = i;
        }
    }
    best as u32
}

pub(super) fn log_sum_exp(values: &[f32]) -> f32 {
    let max = values.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    max + values.iter().map(|v| (v - max).exp()).sum::<f32>().ln()
}

pub(super) fn top_indices(values: &[f32], n: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let mut idx: Vec<usize> = (0..values.len()).collect();
    let n = n.min(idx.len());
    idx.select_nth_unstable_by(n - 1, |&a, &b| values[b].total_cmp(&values[a]));
    idx.truncate(n);
    idx.sort_unstable_by(|&a, &b| values[b].total_cmp(&values[a]));
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(f: impl FnOnce(&mut SamplingParams)) -> SamplingParams {
        let mut p = SamplingParams::default();
        f(&mut p);
        p
    }

    fn draw(logits: &[f32], p: &SamplingParams, seed: u64, output: &[u32]) -> SampledToken {
        let ctx = SamplingContext {
            params: p,
            output_token_ids: output,
            prompt_token_ids: None,
            num_generated: output.len(),
            end_of_generation: &[],
        };
        let mut rng = token_rng(Some(seed), output.len(), &mut StdRng::seed_from_u64(0));
        sample(&mut logits.to_vec(), &ctx, &mut rng)
    }

    #[test]
    fn greedy_takes_the_argmax() {
        let p = params(|p| p.temperature = 0.0);
        assert_eq!(draw(&[0.1, 3.0, 2.9, -1.0], &p, 1, &[]).token, 1);
    }

    #[test]
    fn same_seed_same_token_and_top_k_one_is_greedy() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let p = params(|p| p.temperature = 1.5);
        let a: Vec<u32> = (0..20).map(|i| draw(&logits, &p, 7, &vec![0; i]).token).collect();
        let b: Vec<u32> = (0..20).map(|i| draw(&logits, &p, 7, &vec![0; i]).token).collect();
        assert_eq!(a, b);
        assert!(a.iter().any(|&t| t != a[0]), "temperature 1.5 should vary: {a:?}");
        let k1 = params(|p| {
            p.temperature = 1.5;
            p.top_k = Some(1);
        });
        assert_eq!(draw(&logits, &k1, 3, &[]).token, argmax(&logits));
    }

    #[test]
    fn top_p_and_min_p_exclude_unlikely_tokens() {
        // Token 0 holds ~88% of the mass; top_p 0.5 and min_p 0.5 both keep only it.
        let logits = [4.0, 2.0, 0.0, 0.0];
        for p in [params(|p| p.top_p = 0.5), params(|p| p.min_p = 0.5)] {
            for seed in 0..50 {
                assert_eq!(draw(&logits, &p, seed, &[]).token, 0);
            }
        }
    }

    #[test]
    fn penalties_push_repeated_tokens_down() {
        let p = params(|p| {
            p.temperature = 0.0;
            p.frequency_penalty = 2.0;
        });
        assert_eq!(draw(&[3.0, 2.0], &p, 0, &[0]).token, 1);
        let r = params(|p| {
            p.temperature = 0.0;
            p.repetition_penalty = 2.0;
        });
        assert_eq!(draw(&[3.0, 2.0], &r, 0, &[0]).token, 1);
    }

    #[test]
    fn a_token_mask_leaves_only_allowed_ids_to_sample() {
        let mut logits: Vec<f32> = (0..70).map(|i| i as f32).collect();
        // Ids 3 and 40 allowed; the mask's single-word tail leaves 64.. disallowed.
        let allowed = [1u32 << 3, 1u32 << (40 - 32)];
        apply_token_mask(&mut logits, &allowed);
        let kept: Vec<usize> = (0..70).filter(|&i| logits[i].is_finite()).collect();
        assert_eq!(kept, vec![3, 40]);
        assert_eq!(logits[40], 40.0, "allowed logits are untouched");
        let p = params(|p| p.temperature = 1.0);
        for seed in 0..20 {
            let t = draw(&logits, &p, seed, &[]).token;
            assert!(t == 3 || t == 40, "sampled {t} outside the mask");
        }
    }

    #[test]
    fn logprobs_are_normalised_and_sorted() {
        let p = params(|p| {
            p.temperature = 0.0;
            p.logprobs = Some(2);
        });
        let lp = draw(&[1.0, 3.0, 2.0], &p, 0, &[]).logprobs.expect("requested");
        let total: f32 = [1.0f32, 3.0, 2.0].iter().map(|l| (l - 3.0f32).exp()).sum();
        assert!((lp.logprob - (-(total.ln()))).abs() < 1e-5);
        assert_eq!(lp.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 2]);
    }
}
