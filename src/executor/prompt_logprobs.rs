//! vLLM's `prompt_logprobs`: the log-probability of each prompt token given the ones before
//! it, read from the logits of every position of a prompt chunk.
//!
//! Those logits are `[rows, vocabulary]` floats: a 2048-token chunk at a 128k vocabulary
//! is 1 GiB. So a step whose prompt-logprob rows exceed [`MAX_PROMPT_LOGPROB_ROWS`] runs as
//! several forward passes over consecutive pieces of those chunks (each piece's KV entries
//! written before the next reads them, as chunked prefill does), reducing each pass's rows
//! to logprobs and top tokens before the next pass's logits exist.

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

/// Most prompt-logprob logits rows one forward pass materialises.
pub const MAX_PROMPT_LOGPROB_ROWS: usize = 256;

/// One forward pass of a split step: sequences (pieces of the step's) and, for each, its
/// index in the step.
pub type Pass = Vec<(usize, ScheduledSequence)>;

/// `None` when the step's prompt-logprob rows fit one pass; else the passes: the first runs
/// every other sequence and the first piece of each prompt-logprob chunk, later ones the
/// following pieces, each pass at most `max_rows` prompt-logprob rows (at least one piece).
/// A piece samples only when it ends a chunk that samples.
pub fn prompt_logprob_passes(sequences: &[ScheduledSequence], max_rows: usize) -> Option<Vec<Pass>> {
    let rows: usize = sequences
        .iter()
        .filter(|s| wants_prompt_logprobs(s))
        .map(|s| s.token_ids.len())
        .sum();
    if rows <= max_rows {
        return None;
    }
    let mut done = vec![0usize; sequences.len()];
    let mut passes = Vec::new();
    loop {
        let mut pass = Pass::new();
        let mut budget = max_rows;
        for (i, seq) in sequences.iter().enumerate() {
            if !wants_prompt_logprobs(seq) {
                if passes.is_empty() {
                    pass.push((i, seq.clone()));
                }
                continue;
            }
            let left = seq.token_ids.len() - done[i];
            if left == 0 || (budget == 0 && !pass.is_empty()) {
                continue;
            }
            let take = left.min(budget.max(1));
            budget = budget.saturating_sub(take);
            pass.push((i, piece(seq, done[i], take)));
            done[i] += take;
        }
        if pass.is_empty() {
            return Some(passes);
        }
        passes.push(pass);
    }
}

/// `take` tokens of `seq`'s chunk from `from`, as a sequence of their own.
fn piece(seq: &ScheduledSequence, from: usize, take: usize) -> ScheduledSequence {
    let last = from + take == seq.token_ids.len();
    ScheduledSequence {
        token_ids: seq.token_ids[from..from + take].to_vec(),
        start_position: seq.start_position + from,
        last_token_pending: seq.last_token_pending && last,
        sample: seq.sample && last,
        ..seq.clone()
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
            lora: None,
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
    fn a_long_prompt_logprob_chunk_runs_in_passes_of_bounded_rows() {
        let prompt: Vec<u32> = (0..40).collect();
        let mut long = sequence(0, prompt.clone(), prompt.clone());
        long.sample = true;
        let mut other = sequence(5, vec![7], vec![1, 2, 3, 4, 5, 6]);
        other.params = Arc::new(SamplingParams::default());
        other.sample = true;
        let second = sequence(10, prompt[10..40].to_vec(), prompt);
        let step = [long, other, second];
        assert!(prompt_logprob_passes(&step, 70).is_none(), "70 rows fit one pass");
        let passes = prompt_logprob_passes(&step, 16).expect("split");
        let mut covered = [Vec::new(), Vec::new(), Vec::new()];
        for (p, pass) in passes.iter().enumerate() {
            let rows: usize = pass
                .iter()
                .filter(|(_, s)| wants_prompt_logprobs(s))
                .map(|(_, s)| s.token_ids.len())
                .sum();
            assert!(rows <= 16, "pass {p}: {rows} rows");
            for (i, s) in pass {
                covered[*i].extend(s.start_position..s.start_position + s.token_ids.len());
                assert_eq!(
                    s.token_ids[0],
                    step[*i].token_ids[s.start_position - step[*i].start_position]
                );
                let ends = s.start_position + s.token_ids.len() == step[*i].start_position + step[*i].token_ids.len();
                assert_eq!(s.sample, step[*i].sample && ends, "only a chunk's last piece samples");
            }
        }
        assert_eq!(covered[0], (0..40).collect::<Vec<_>>(), "every position once, in order");
        assert_eq!(covered[1], vec![5], "the other sequence runs once, in the first pass");
        assert_eq!(covered[2], (10..40).collect::<Vec<_>>());
        assert!(passes[0].iter().any(|(i, _)| *i == 1));
    }

    #[test]
    fn a_chunk_past_the_prompt_needs_no_rows() {
        let seq = sequence(2, vec![2], vec![0, 1, 2]);
        assert!(!wants_prompt_logprobs(&seq));
        assert_eq!(logit_rows(&seq), 0, "no sample and no prompt logprobs");
    }
}
