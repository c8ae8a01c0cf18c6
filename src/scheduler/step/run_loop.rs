//! The engine's step loop, the one the server runs: which steps go to the executor now
//! (with async scheduling, the next one while the executor runs the one before) and what a
//! step that comes back does to the scheduler. The scheduler actor and
//! `kiln::testing`'s direct driver both call it, so the engine benchmarks measure the
//! scheduling the server does, async scheduling included.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::log::log_step;
use crate::engine::events::{EngineError, TokenEvent};
use crate::engine::step::{ExecutorError, ModelOutput, SchedulerOutput};
use crate::scheduler::in_flight::{NextStep, StepsInFlight};
use crate::scheduler::policy::{Scheduler, StepResult};

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

/// A running step predicted at least this long gets its step ahead chosen late (see
/// [`StepLoop::ahead_delay`]); shorter ones (decodes) get it at once.
const LATE_AHEAD_MIN_STEP_S: f64 = 0.05;
/// How far into such a step (as a fraction of its predicted time) the step ahead is chosen:
/// late enough that requests arriving meanwhile make it, early enough to be queued before
/// the running step ends.
const LATE_AHEAD_FRACTION: f64 = 0.8;

/// A step sent to the executor and not answered.
#[derive(Debug)]
struct SentStep {
    predicted_s: f64,
    /// Scheduled while another step ran.
    ahead: bool,
    sent_at: Instant,
}

/// The steps sent to the executor and not answered, and the rules for the next one.
#[derive(Debug, Default)]
pub struct StepLoop {
    steps: StepsInFlight,
    /// The steps in flight, oldest first.
    sent: VecDeque<SentStep>,
    /// When the last step came back: the next one in flight started then at the earliest.
    last_returned: Option<Instant>,
}

impl StepLoop {
    /// The steps to send the executor now, in order: a plain one when it is idle, then one
    /// scheduled ahead while it runs that one (async scheduling), or none while it holds
    /// as many as it should. Each counts as in flight until [`Self::returned`].
    pub fn step(&mut self, scheduler: &mut Scheduler, now: Instant) -> Vec<Arc<SchedulerOutput>> {
        let mut batches = Vec::new();
        while let Some(batch) = self.next_batch(scheduler, now) {
            let ahead = self.sent.len() == 1;
            self.steps.sent();
            self.sent.push_back(SentStep {
                predicted_s: scheduler.predicted_seconds(&batch),
                ahead,
                sent_at: now,
            });
            batches.push(Arc::new(batch));
        }
        batches
    }

    /// How long the step ahead waits: with one long step running (a prefill chunk, predicted
    /// at [`LATE_AHEAD_MIN_STEP_S`] or more), it is chosen [`LATE_AHEAD_FRACTION`] of the way
    /// into that step, not as it starts, so a request that arrives meanwhile (a chat during
    /// long prefills) runs in the next step instead of waiting behind one more. `None`: no
    /// wait (then [`Self::step`] sends it). The server's actor calls `step` again after this.
    pub fn ahead_delay(&self, now: Instant) -> Option<Duration> {
        if self.sent.len() != 1 {
            return None;
        }
        let running = &self.sent[0];
        if running.predicted_s < LATE_AHEAD_MIN_STEP_S {
            return None;
        }
        let started = self.last_returned.map_or(running.sent_at, |at| at.max(running.sent_at));
        let due = started + Duration::from_secs_f64(running.predicted_s * LATE_AHEAD_FRACTION);
        (due > now).then(|| due - now)
    }

    fn next_batch(&self, scheduler: &mut Scheduler, now: Instant) -> Option<SchedulerOutput> {
        if !scheduler.has_work() {
            return None;
        }
        let batch = match self.steps.next(scheduler.config().async_scheduling) {
            NextStep::Schedule => scheduler.schedule(now),
            NextStep::ScheduleAhead if self.ahead_delay(now).is_some() => return None,
            NextStep::ScheduleAhead => scheduler.schedule_ahead(now)?,
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
        self.last_returned = Some(now);
        let (predicted, ahead) = self.sent.pop_front().map(|s| (s.predicted_s, s.ahead)).unzip();
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
