//! A stand-in executor for engine tests: deterministic tokens, and on command a delay, an
//! error or a panic (burn-lm's fakes). Built for the lib's unit tests and with the `testing`
//! feature only.

use std::time::Duration;

use super::Executor;
use crate::engine::step::{ExecutorError, ModelOutput, SampledToken, SchedulerOutput, StepStage};

/// What the fake does on a step whose batch contains a given prompt token.
#[derive(Debug, Clone, Default)]
pub struct FakeBehaviour {
    /// Sleep this long every step (to let requests pile up).
    pub step_delay: Duration,
    /// And this long per token in the step (a step time that grows with its prefill chunks).
    pub token_delay: Duration,
    /// Fail the step when a sequence runs this token.
    pub fail_on_token: Option<u32>,
    /// Panic when a sequence runs this token, at `panic_stage` of the step.
    pub panic_on_token: Option<u32>,
    /// Where in the step `panic_on_token` panics (inside `execute` by default).
    pub panic_stage: StepStage,
    /// The first this many resets panic (a reset that fails is retried as another restart).
    pub panics_in_reset: usize,
    /// Each reset takes this long (so a test can see the engine restarting).
    pub reset_delay: Duration,
    /// Hang this long inside `execute` when a sequence runs the token (the step watchdog).
    pub stall_on_token: Option<(u32, Duration)>,
}

fn runs(batch: &SchedulerOutput, token: Option<u32>) -> bool {
    token.is_some_and(|t| batch.sequences.iter().any(|s| s.token_ids.contains(&t)))
}

/// Emits `(last input token + 1) % vocab` for every sampled sequence.
#[derive(Debug, Clone)]
pub struct FakeExecutor {
    pub vocab_size: u32,
    pub behaviour: FakeBehaviour,
    pub steps: usize,
    pub resets: usize,
}

impl FakeExecutor {
    pub fn new(vocab_size: u32, behaviour: FakeBehaviour) -> Self {
        Self {
            vocab_size,
            behaviour,
            steps: 0,
            resets: 0,
        }
    }
}

impl Executor for FakeExecutor {
    fn execute(&mut self, batch: &SchedulerOutput) -> Result<ModelOutput, ExecutorError> {
        self.steps += 1;
        let delay = self.behaviour.step_delay + self.behaviour.token_delay * batch.num_tokens() as u32;
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        if let Some((token, stall)) = self.behaviour.stall_on_token
            && runs(batch, Some(token))
        {
            std::thread::sleep(stall);
        }
        if self.behaviour.panic_stage == StepStage::Execute && runs(batch, self.behaviour.panic_on_token) {
            panic!("fake executor told to panic");
        }
        if runs(batch, self.behaviour.fail_on_token) {
            return Err(ExecutorError::Failed("fake executor told to fail".into()));
        }
        let sampled = batch
            .sequences
            .iter()
            .map(|s| {
                s.sample.then(|| SampledToken {
                    token: (s.token_ids.last().copied().unwrap_or(0) + 1) % self.vocab_size,
                    logprobs: None,
                })
            })
            .collect();
        Ok(ModelOutput {
            sampled,
            ..ModelOutput::default()
        })
    }

    fn reset(&mut self) {
        self.resets += 1;
        std::thread::sleep(self.behaviour.reset_delay);
        if self.resets <= self.behaviour.panics_in_reset {
            panic!("fake executor told to panic in reset");
        }
    }

    fn checkpoint(&mut self, stage: StepStage, batch: &SchedulerOutput) {
        // A panic inside `execute` comes from `execute` itself.
        if stage != StepStage::Execute
            && stage == self.behaviour.panic_stage
            && runs(batch, self.behaviour.panic_on_token)
        {
            panic!("fake executor told to panic at {stage:?}");
        }
    }
}
