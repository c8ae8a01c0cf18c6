//! vLLM's `prompt_logprobs`: the log-probability of each prompt token given the ones before
//! it, read from the logits of every position of a prompt chunk.

use super::sampler::{log_sum_exp, top_indices};
use crate::engine::events::{PromptLogprobs, PromptTokenLogprob};
use crate::engine::step::ScheduledSequence;

/// Whether this step's chunk of `seq` covers a position whose logits predict a prompt token
/// (position `p` predicts prompt token `p + 1`), so the model must return every row.
pub fn wants_prompt_logprobs(seq: &ScheduledSequence) -> bool {
    let prompt_len = seq.prompt_token_ids.as_ref().map_or(0, |p| p.len());
    seq.params.prompt_logprobs.is_some() && seq.start_position + 1 < prompt_len
}

/// Logits rows the model returns for `seq`: every token's for prompt logprobs, else the
/// last token's when it samples.
pub fn logit_rows(seq: &ScheduledSequence) -> usize {
    if wants_prompt_logprobs(seq) {
        seq.token_ids.len()
    } else {
        usize::from(seq.sample)
    }
}

/// The prompt logprobs of the chunk whose rows (`[rows, vocab]`, row `i` at position
/// `start_position + i`) are `logits`.
pub fn chunk_prompt_logprobs(logits: &[f32], vocab: usize, seq: &ScheduledSequence) -> PromptLogprobs {
    let prompt = seq.prompt_token_ids.as_deref().map_or(&[][..], Vec::as_slice);
    let top_n = seq.params.prompt_logprobs.unwrap_or(0) as usize;
    let positions = logits
        .chunks(vocab)
        .enumerate()
        .map_while(|(i, row)| {
            let token = *prompt.get(seq.start_position + i + 1)?;
            Some(position_logprob(row, token, top_n))
        })
        .collect();
    PromptLogprobs {
        first_position: seq.start_position + 1,
        positions,
    }
}

/// `token`'s log-probability under `row`, its rank, and the `top_n` most likely tokens.
fn position_logprob(row: &[f32], token: u32, top_n: usize) -> PromptTokenLogprob {
    let norm = log_sum_exp(row);
    let value = row.get(token as usize).copied().unwrap_or(f32::NEG_INFINITY);
    let rank = 1 + row.iter().filter(|&&v| v > value).count() as u32;
    PromptTokenLogprob {
        token,
        logprob: value - norm,
        rank,
        top: top_indices(row, top_n)
            .into_iter()
            .map(|i| (i as u32, row[i] - norm))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::engine::sampling_params::SamplingParams;

    fn sequence(start_position: usize, token_ids: Vec<u32>, prompt: Vec<u32>) -> ScheduledSequence {
        ScheduledSequence {
            id: "a".into(),
            last_token_pending: false,
            token_ids,
            start_position,
            block_table: vec![0],
            sample: false,
            params: Arc::new(SamplingParams {
                prompt_logprobs: Some(1),
                ..Default::default()
            }),
            seed: None,
            num_generated: 0,
            output_token_ids: Vec::new(),
            prompt_token_ids: Some(Arc::new(prompt)),
        }
    }

    #[test]
    fn each_row_scores_the_next_prompt_token() {
        // Prompt [0, 1, 2]; this chunk runs positions 1 and 2: row 0 predicts token 2 and
        // row 1 (the last prompt position) predicts no prompt token.
        let seq = sequence(1, vec![1, 2], vec![0, 1, 2]);
        assert!(wants_prompt_logprobs(&seq));
        assert_eq!(logit_rows(&seq), 2);
        let logits = [0.0, 1.0, 2.0, 5.0, 5.0, 5.0];
        let chunk = chunk_prompt_logprobs(&logits, 3, &seq);
        assert_eq!(chunk.first_position, 2);
        assert_eq!(chunk.positions.len(), 1);
        let p = &chunk.positions[0];
        let norm = (0f32.exp() + 1f32.exp() + 2f32.exp()).ln();
        assert_eq!((p.token, p.rank), (2, 1));
        assert!((p.logprob - (2.0 - norm)).abs() < 1e-6);
        assert_eq!(p.top.len(), 1);
        assert_eq!(p.top[0].0, 2);
    }

    #[test]
    fn a_chunk_past_the_prompt_needs_no_rows() {
        let seq = sequence(2, vec![2], vec![0, 1, 2]);
        assert!(!wants_prompt_logprobs(&seq));
        assert_eq!(logit_rows(&seq), 0, "no sample and no prompt logprobs");
    }
}
