//! Each constrained sequence's grammar state, kept on the executor thread: with async
//! scheduling only this thread knows the token a step sampled, so only it can advance the
//! matcher in time for the next step's mask. Unconstrained sequences never get here.
//!
//! A state is created on a sequence's first sampled step (from its request's compiled
//! grammar), advanced with each token it samples, and rebuilt by replaying the generated
//! tokens whenever it does not match the sequence (a recompute preemption, a restart, a state
//! dropped while the request sat out). States of requests that stopped appearing (finished,
//! aborted, swapped out for long) are dropped after [`IDLE_STEPS`] steps, so nothing leaks.

use std::collections::HashMap;
use std::time::Instant;

use llguidance::Matcher;
use llguidance::toktrie::SimpleVob;

use crate::engine::step::ScheduledSequence;
use crate::engine::types::RequestId;

/// Steps a state survives without its sequence in a batch.
pub const IDLE_STEPS: u64 = 64;

struct SequenceGrammar {
    matcher: Matcher,
    /// Tokens the matcher has consumed: the sequence's generated count once it is in sync.
    consumed: usize,
    last_step: u64,
}

/// The allowed tokens of one sequence for one sample, and what computing them cost.
pub struct SequenceMask {
    pub allowed: SimpleVob,
    pub seconds: f64,
    /// The matcher's error, when it failed (then `allowed` holds only the end tokens).
    pub failure: Option<String>,
}

#[derive(Default)]
pub struct GrammarStates {
    sequences: HashMap<RequestId, SequenceGrammar>,
    step: u64,
}

impl GrammarStates {
    /// Starts a step (for the idle count).
    pub fn begin_step(&mut self) {
        self.step += 1;
    }

    /// The tokens `seq` may sample now, or `None` when it is unconstrained. A matcher in
    /// error (which the mask should make impossible) allows only the end tokens, so the
    /// sequence ends rather than runs on unconstrained.
    pub fn mask(&mut self, seq: &ScheduledSequence) -> Option<SequenceMask> {
        let grammar = seq.params.grammar.as_ref()?;
        let start = Instant::now();
        let step = self.step;
        let state = self.sequences.entry(seq.id.clone()).or_insert_with(|| SequenceGrammar {
            matcher: grammar.start(),
            consumed: 0,
            last_step: step,
        });
        state.last_step = step;
        if state.consumed != seq.num_generated {
            *state = replay(grammar.start(), &seq.output_token_ids, seq.num_generated, step);
        }
        let (allowed, failure) = match state.matcher.compute_mask_or_eos() {
            Ok(allowed) if !allowed.is_zero() => (allowed, None),
            Ok(_) => (end_only(grammar.end_tokens()), None),
            Err(error) => {
                tracing::warn!(id = %seq.id, %error, "grammar matcher failed; failing the sequence");
                (end_only(grammar.end_tokens()), Some(error_text(&error.to_string())))
            }
        };
        Some(SequenceMask {
            allowed,
            seconds: start.elapsed().as_secs_f64(),
            failure,
        })
    }

    /// Feeds the token `seq` sampled to its matcher (no-op when unconstrained).
    pub fn advance(&mut self, seq: &ScheduledSequence, token: u32) {
        if seq.params.grammar.is_none() {
            return;
        }
        if let Some(state) = self.sequences.get_mut(&seq.id) {
            state.consumed += 1;
            if !state.matcher.is_stopped()
                && let Err(error) = state.matcher.consume_token(token)
            {
                tracing::warn!(id = %seq.id, %error, "grammar rejected a sampled token");
            }
        }
    }

    /// Drops the states of sequences absent for [`IDLE_STEPS`] steps.
    pub fn end_step(&mut self) {
        let step = self.step;
        self.sequences.retain(|_, s| step - s.last_step < IDLE_STEPS);
    }

    /// Forgets every state (the executor restarted).
    pub fn clear(&mut self) {
        self.sequences.clear();
    }

    /// States held (for tests: nothing leaks).
    pub fn len(&self) -> usize {
        self.sequences.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sequences.is_empty()
    }
}

/// llguidance's error without its `<non-verbose/>` marker lines, on one line.
fn error_text(error: &str) -> String {
    error
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && *l != "<non-verbose/>")
        .collect::<Vec<_>>()
        .join(" ")
}

/// A state rebuilt from the grammar's start by consuming the generated tokens.
fn replay(mut matcher: Matcher, generated: &[u32], num_generated: usize, step: u64) -> SequenceGrammar {
    if generated.len() != num_generated {
        tracing::warn!(
            known = generated.len(),
            num_generated,
            "cannot replay a grammar without the generated tokens"
        );
    } else if let Err(error) = matcher.consume_tokens(generated) {
        tracing::warn!(%error, "replaying the generated tokens through the grammar failed");
    }
    SequenceGrammar {
        matcher,
        consumed: num_generated,
        last_step: step,
    }
}

/// A mask of the end tokens only.
fn end_only(end_tokens: &[u32]) -> SimpleVob {
    let size = end_tokens.iter().max().map_or(0, |&t| t as usize + 1);
    let mut allowed = SimpleVob::alloc(size);
    for &t in end_tokens {
        allowed.allow_token(t);
    }
    allowed
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::engine::sampling_params::SamplingParams;
    use crate::engine::structured_output::StructuredOutput;
    use crate::grammar::GrammarLimits;
    use crate::grammar::test_support::{TINY_END, tiny_compiler};

    /// The tiny vocabulary's token for one byte.
    fn byte(b: u8) -> u32 {
        3 + u32::from(b)
    }

    fn constrained() -> SamplingParams {
        let output = StructuredOutput::Choice(vec!["ab".into(), "cd".into()]);
        let grammar = tiny_compiler(GrammarLimits::default())
            .compile_blocking(&output)
            .expect("compiles")
            .grammar;
        SamplingParams {
            structured: Some(output),
            grammar: Some(grammar),
            ..SamplingParams::default()
        }
    }

    fn sequence(id: &str, params: &Arc<SamplingParams>, output: &[u32]) -> ScheduledSequence {
        ScheduledSequence {
            id: id.into(),
            token_ids: vec![5],
            last_token_pending: false,
            start_position: 4,
            block_table: vec![0],
            sample: true,
            params: Arc::clone(params),
            seed: None,
            num_generated: output.len(),
            output_token_ids: output.to_vec(),
            prompt_token_ids: None,
            lora: None,
        }
    }

    fn allowed(states: &mut GrammarStates, seq: &ScheduledSequence) -> Vec<u32> {
        states.mask(seq).expect("constrained").allowed.to_list()
    }

    #[test]
    fn a_state_follows_its_sequence_and_ends_with_the_end_token() {
        let params = Arc::new(constrained());
        let mut states = GrammarStates::default();
        states.begin_step();
        assert_eq!(
            allowed(&mut states, &sequence("a", &params, &[])),
            vec![byte(b'a'), byte(b'c')]
        );
        states.advance(&sequence("a", &params, &[]), byte(b'c'));
        states.begin_step();
        assert_eq!(
            allowed(&mut states, &sequence("a", &params, &[byte(b'c')])),
            vec![byte(b'd')]
        );
        states.advance(&sequence("a", &params, &[byte(b'c')]), byte(b'd'));
        states.begin_step();
        let done = [byte(b'c'), byte(b'd')];
        assert_eq!(allowed(&mut states, &sequence("a", &params, &done)), vec![TINY_END]);
    }

    #[test]
    fn a_lost_or_stale_state_is_rebuilt_from_the_generated_tokens() {
        let params = Arc::new(constrained());
        let mut states = GrammarStates::default();
        states.begin_step();
        // First seen mid-way (after a restart): replayed.
        assert_eq!(
            allowed(&mut states, &sequence("a", &params, &[byte(b'a')])),
            vec![byte(b'b')]
        );
        // The state had consumed one token; the sequence (recomputed, resampled) says none.
        assert_eq!(
            allowed(&mut states, &sequence("a", &params, &[])),
            vec![byte(b'a'), byte(b'c')]
        );
    }

    #[test]
    fn unconstrained_sequences_hold_nothing_and_idle_states_are_dropped() {
        let free = Arc::new(SamplingParams::default());
        let params = Arc::new(constrained());
        let mut states = GrammarStates::default();
        states.begin_step();
        assert!(states.mask(&sequence("free", &free, &[])).is_none());
        states.advance(&sequence("free", &free, &[]), 7);
        states.mask(&sequence("a", &params, &[])).expect("constrained");
        states.end_step();
        assert_eq!(states.len(), 1, "only the constrained sequence has a state");
        for _ in 0..IDLE_STEPS {
            states.begin_step();
            states.end_step();
        }
        assert!(states.is_empty(), "a finished or aborted request's state does not leak");
    }
}
