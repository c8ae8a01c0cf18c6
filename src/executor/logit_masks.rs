//! Per-request edits of a logits row made before penalties and sampling: OpenAI's
//! `logit_bias` and vLLM's `min_tokens` mask. Each is a small function of its own so other
//! masks (a grammar's) can sit beside them.

use crate::engine::sampling_params::SamplingParams;

/// Adds each `(token, bias)` to that token's logit (ids past the row are skipped; validation
/// keeps them inside the vocabulary).
pub fn apply_logit_bias(logits: &mut [f32], bias: &[(u32, f32)]) {
    for &(token, value) in bias {
        if let Some(logit) = logits.get_mut(token as usize) {
            *logit += value;
        }
    }
}

/// While fewer than `min_tokens` tokens are out, no token that would end the choice may be
/// sampled: the stop token ids and, unless `ignore_eos`, the model's end-of-generation ids.
/// When those are all that is left (a grammar that allows only its end), the end wins: the
/// mask is undone rather than leave nothing to sample, which would break the constraint.
pub fn mask_before_min_tokens(
    logits: &mut [f32],
    params: &SamplingParams,
    num_generated: usize,
    end_of_generation: &[u32],
) {
    if num_generated >= params.min_tokens as usize {
        return;
    }
    let eos: &[u32] = if params.ignore_eos { &[] } else { end_of_generation };
    let mut masked = Vec::new();
    for &token in params.stop_token_ids.iter().chain(eos) {
        if let Some(logit) = logits.get_mut(token as usize) {
            masked.push((token as usize, *logit));
            *logit = f32::NEG_INFINITY;
        }
    }
    if !masked.is_empty() && !logits.iter().any(|l| *l > f32::NEG_INFINITY) {
        for (token, logit) in masked {
            logits[token] = logit;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bias_is_added_and_out_of_row_ids_are_skipped() {
        let mut logits = vec![0.0, 1.0, 2.0];
        apply_logit_bias(&mut logits, &[(0, 100.0), (2, -100.0), (7, 5.0)]);
        assert_eq!(logits, vec![100.0, 1.0, -98.0]);
    }

    #[test]
    fn ending_tokens_are_masked_until_min_tokens() {
        let params = SamplingParams {
            min_tokens: 2,
            stop_token_ids: vec![1],
            ..Default::default()
        };
        let mut logits = vec![0.0; 4];
        mask_before_min_tokens(&mut logits, &params, 1, &[3]);
        assert_eq!(logits, vec![0.0, f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY]);
        let mut logits = vec![0.0; 4];
        mask_before_min_tokens(&mut logits, &params, 2, &[3]);
        assert_eq!(logits, vec![0.0; 4], "reached: nothing masked");
        let ignoring = SamplingParams {
            ignore_eos: true,
            ..params
        };
        let mut logits = vec![0.0; 4];
        mask_before_min_tokens(&mut logits, &ignoring, 0, &[3]);
        assert_eq!(logits[3], 0.0, "EOS does not end the choice, so it stays");
        assert_eq!(logits[1], f32::NEG_INFINITY);
    }

    #[test]
    fn an_end_that_is_all_a_grammar_allows_is_not_masked() {
        let params = SamplingParams {
            min_tokens: 5,
            stop_token_ids: vec![1],
            ..Default::default()
        };
        // A grammar left only the end-of-generation id 3: min_tokens must not remove it.
        let mut logits = vec![f32::NEG_INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY, 0.5];
        mask_before_min_tokens(&mut logits, &params, 3, &[3]);
        assert_eq!(logits[3], 0.5, "the grammar's end wins over min_tokens");
        assert_eq!(logits[1], f32::NEG_INFINITY);
        // With anything else allowed, the ending ids stay masked.
        let mut logits = vec![f32::NEG_INFINITY, 0.2, 0.1, 0.5];
        mask_before_min_tokens(&mut logits, &params, 3, &[3]);
        assert_eq!(
            logits,
            vec![f32::NEG_INFINITY, f32::NEG_INFINITY, 0.1, f32::NEG_INFINITY]
        );
    }
}
