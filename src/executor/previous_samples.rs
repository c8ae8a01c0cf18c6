//! A step scheduled ahead names "the token this sequence samples in the step before" with a
//! placeholder ([`PENDING_TOKEN`]); the executor thread, which ran that step, fills it in.

use std::collections::HashMap;
use std::sync::Arc;

use crate::engine::step::{ExecutorError, ModelOutput, SchedulerOutput};
use crate::engine::types::RequestId;

#[cfg(doc)]
use crate::engine::step::PENDING_TOKEN;

/// The tokens sampled in the last step, by request.
#[derive(Debug, Default)]
pub struct PreviousSamples {
    tokens: HashMap<RequestId, u32>,
}

impl PreviousSamples {
    /// `batch` with every placeholder replaced by the token sampled for its request in the
    /// step before (the same `Arc` when there is none).
    pub fn resolve(&self, batch: &Arc<SchedulerOutput>) -> Result<Arc<SchedulerOutput>, ExecutorError> {
        if !batch.sequences.iter().any(|s| s.last_token_pending) {
            return Ok(Arc::clone(batch));
        }
        let mut resolved = SchedulerOutput::clone(batch);
        for seq in resolved.sequences.iter_mut().filter(|s| s.last_token_pending) {
            let token = *self.tokens.get(&seq.id).ok_or_else(|| {
                ExecutorError::Failed(format!("request {} has no token sampled in the step before", seq.id))
            })?;
            *seq.token_ids.last_mut().expect("a pending token is in token_ids") = token;
            if seq.params.uses_output_tokens() {
                seq.output_token_ids.push(token);
            }
            seq.last_token_pending = false;
        }
        Ok(Arc::new(resolved))
    }

    /// Remembers what `batch` sampled, forgetting the step before.
    pub fn record(&mut self, batch: &SchedulerOutput, output: &ModelOutput) {
        self.clear();
        for (seq, sampled) in batch.sequences.iter().zip(&output.sampled) {
            if let Some(sampled) = sampled {
                self.tokens.insert(seq.id.clone(), sampled.token);
            }
        }
    }

    /// Forgets everything (once a step has used them, or when it failed).
    pub fn clear(&mut self) {
        self.tokens.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::sampling_params::SamplingParams;
    use crate::engine::step::{PENDING_TOKEN, SampledToken, ScheduledSequence};

    fn sequence(id: &str, token_ids: Vec<u32>, params: SamplingParams) -> ScheduledSequence {
        ScheduledSequence {
            id: id.into(),
            last_token_pending: token_ids.last() == Some(&PENDING_TOKEN),
            token_ids,
            start_position: 4,
            block_table: vec![0],
            sample: true,
            params: Arc::new(params),
            seed: None,
            num_generated: 1,
            output_token_ids: vec![11],
            prompt_token_ids: None,
            lora: None,
        }
    }

    fn sampled(tokens: &[Option<u32>]) -> ModelOutput {
        ModelOutput {
            sampled: tokens
                .iter()
                .map(|t| t.map(|token| SampledToken { token, logprobs: None }))
                .collect(),
            ..ModelOutput::default()
        }
    }

    #[test]
    fn placeholders_become_the_tokens_sampled_in_the_step_before() {
        let penalised = SamplingParams {
            frequency_penalty: 0.5,
            ..Default::default()
        };
        let before = SchedulerOutput {
            sequences: vec![
                sequence("a", vec![1, 2, 3], SamplingParams::default()),
                sequence("b", vec![5], penalised.clone()),
            ],
            ..Default::default()
        };
        let mut previous = PreviousSamples::default();
        previous.record(&before, &sampled(&[Some(40), Some(41)]));

        let next = Arc::new(SchedulerOutput {
            sequences: vec![
                sequence("a", vec![PENDING_TOKEN], SamplingParams::default()),
                sequence("b", vec![PENDING_TOKEN], penalised),
                sequence("c", vec![7, 8], SamplingParams::default()),
            ],
            ..Default::default()
        });
        let resolved = previous.resolve(&next).expect("both placeholders are known");
        let seqs = &resolved.sequences;
        assert_eq!(seqs[0].token_ids, vec![40]);
        assert_eq!(seqs[0].output_token_ids, vec![11], "no penalty: the list is not needed");
        assert_eq!(seqs[1].token_ids, vec![41]);
        assert_eq!(
            seqs[1].output_token_ids,
            vec![11, 41],
            "a penalty sees the pending token"
        );
        assert_eq!(seqs[2].token_ids, vec![7, 8]);
        assert!(seqs.iter().all(|s| !s.last_token_pending));
    }

    #[test]
    fn a_batch_without_placeholders_is_passed_through() {
        let batch = Arc::new(SchedulerOutput {
            sequences: vec![sequence("a", vec![1, 2], SamplingParams::default())],
            ..Default::default()
        });
        let resolved = PreviousSamples::default().resolve(&batch).expect("nothing to resolve");
        assert!(Arc::ptr_eq(&batch, &resolved));
    }

    #[test]
    fn a_placeholder_without_a_sample_is_an_error_not_a_panic() {
        let mut previous = PreviousSamples::default();
        let before = SchedulerOutput {
            sequences: vec![sequence("a", vec![1], SamplingParams::default())],
            ..Default::default()
        };
        previous.record(&before, &sampled(&[None]));
        let next = Arc::new(SchedulerOutput {
            sequences: vec![sequence("a", vec![PENDING_TOKEN], SamplingParams::default())],
            ..Default::default()
        });
        let error = previous.resolve(&next).unwrap_err();
        assert!(error.to_string().contains("request a"), "{error}");
        previous.clear();
        assert!(previous.resolve(&next).is_err());
    }
}
