//! The engine's step loop, the one the server runs: which steps go to the executor now
//! (with async scheduling, the next one while the executor runs the one before) and what a
//! step that comes back does to the scheduler. The scheduler actor and
//! `kiln::testing`'s direct driver both call it, so the engine benchmarks measure the
//! scheduling the server does, async scheduling included.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use super::in_flight::{NextStep, StepsInFlight};
use super::policy::{Scheduler, StepResult};
use super::step_log::log_step;
use crate::engine::events::{EngineError, TokenEvent};
use crate::engine::step::{ExecutorError, ModelOutput, SchedulerOutput};

/// Why a step came back without an output.
#[derive(Debug)]
pub enum StepFailure {
    /// The executor answered with an error.
    Executor(ExecutorError),
    /// The executor never answered (its mailbox or thread is gone), with why.
    Lost(String),
}

/// What a returned step did: its events and stats, and the executor restarts it reports.
#[derive(Debug, Default)]
pub struct ReturnedStep {
    /// Prompt logprobs come first in `result.events`: they precede the request's tokens.
    pub result: StepResult,
    /// Restarts the executor made during the step (0 unless it panicked).
    pub restarts: u32,
}

/// The steps sent to the executor and not answered, and the rules for the next one.
#[derive(Debug, Default)]
pub struct StepLoop {
    steps: StepsInFlight,
    /// For each step in flight, oldest first: its predicted seconds and whether it was
    /// scheduled ahead (the per-step log).
    sent: VecDeque<(f64, bool)>,
}

impl StepLoop {
    /// The steps to send the executor now, in order: a plain one when it is idle, then one
    /// scheduled ahead while it runs that one (async scheduling), or none while it holds
    /// as many as it should. Each counts as in flight until [`Self::returned`].
    pub fn step(&mut self, scheduler: &mut Scheduler) -> Vec<Arc<SchedulerOutput>> {
        let mut batches = Vec::new();
        while let Some(batch) = self.next_batch(scheduler) {
            let ahead = self.sent.len() == 1;
            self.steps.sent();
            self.sent.push_back((scheduler.predicted_seconds(&batch), ahead));
            batches.push(Arc::new(batch));
        }
        batches
    }

    fn next_batch(&self, scheduler: &mut Scheduler) -> Option<SchedulerOutput> {
        if !scheduler.has_work() {
            return None;
        }
        let batch = match self.steps.next(scheduler.config().async_scheduling) {
            NextStep::Schedule => scheduler.schedule(Instant::now()),
            NextStep::ScheduleAhead => scheduler.schedule_ahead(Instant::now())?,
            NextStep::Wait => return None,
        };
        (!batch.is_empty()).then_some(batch)
    }

    /// The oldest step in flight, `batch`, came back with `outcome`: applies its output,
    /// or fails the requests its failure reaches.
    pub fn returned(
        &mut self,
        scheduler: &mut Scheduler,
        batch: &SchedulerOutput,
        outcome: Result<ModelOutput, StepFailure>,
        now: Instant,
    ) -> ReturnedStep {
        self.steps.returned(outcome.is_err());
        let (predicted, ahead) = self.sent.pop_front().unzip();
        match outcome {
            Ok(mut output) => {
                log_step(
                    batch,
                    &output,
                    predicted,
                    ahead.unwrap_or(false),
                    scheduler.num_waiting(),
                );
                let prompt = std::mem::take(&mut output.prompt_logprobs);
                let mut result = scheduler.update_from_output(batch, output, now);
                let mut events: Vec<_> = prompt
                    .into_iter()
                    .map(|(id, p)| (id, TokenEvent::PromptLogprobs(p)))
                    .collect();
                events.append(&mut result.events);
                result.events = events;
                ReturnedStep { result, restarts: 0 }
            }
            Err(StepFailure::Executor(error)) => fail_step(scheduler, error, now),
            Err(StepFailure::Lost(why)) => ReturnedStep {
                result: fail_batch(scheduler, EngineError::Executor(why), now),
                restarts: 0,
            },
        }
    }
}

/// A step failed. After a panic the executor came back with an empty cache (or not at
/// all): the requests with KV state there fail and the prefix cache is forgotten.
fn fail_step(scheduler: &mut Scheduler, error: ExecutorError, now: Instant) -> ReturnedStep {
    let engine_error = EngineError::Executor(error.to_string());
    match error {
        ExecutorError::Failed(_) => ReturnedStep {
            result: fail_batch(scheduler, engine_error, now),
            restarts: 0,
        },
        ExecutorError::Restarted { restarts } | ExecutorError::Dead { restarts } => {
            tracing::error!(%engine_error, "failing the executor's requests, clearing the prefix cache");
            ReturnedStep {
                result: scheduler.reset_after_executor_restart(&engine_error, now),
                restarts,
            }
        }
    }
}

/// The executor lost its cache state: every running request fails, including those in a
/// step queued behind the failed one.
fn fail_batch(scheduler: &mut Scheduler, error: EngineError, now: Instant) -> StepResult {
    tracing::error!(%error, "step failed; failing the running requests");
    scheduler.fail_running(&error, now)
}
