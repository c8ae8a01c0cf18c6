//! `ExecutorActor`: a SyncArbiter actor on its own thread, supervised from inside. A panic
//! anywhere in a step (filling in placeholders, the forward pass, sampling, remembering the
//! samples) is caught; the executor is restarted with a fresh cache and the step answers
//! [`ExecutorError::Restarted`], so only that step's requests fail. When restarts run out
//! (or a reset itself keeps panicking) the engine is marked dead and every later step
//! answers [`ExecutorError::Dead`].

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use actix::{Actor, Addr, Handler, SyncArbiter, SyncContext};

use super::Executor;
use super::step_runner::StepRunner;
use crate::engine::health::EngineHealth;
use crate::engine::step::{ExecuteBatch, ExecutorError, ModelOutput};

/// How the executor thread is supervised.
#[derive(Debug, Clone)]
pub struct Supervision {
    /// This engine's health (each engine of a data-parallel server has its own): written
    /// at every restart, at death, and around every step (the hang watchdog).
    pub health: Arc<EngineHealth>,
    /// Restarts allowed without a successful step in between; one more panic is fatal.
    pub max_restarts: u32,
}

pub struct ExecutorActor<E: Executor> {
    executor: E,
    /// The step itself, and the samples it keeps for the step after.
    runner: StepRunner,
    /// When the previous step ended: the time until the next one starts is the executor's
    /// idle gap, which overlapped scheduling exists to close.
    last_step_end: Option<Instant>,
    supervision: Supervision,
    /// Restarts since the last step that succeeded.
    consecutive_restarts: u32,
}

impl<E: Executor> Actor for ExecutorActor<E> {
    type Context = SyncContext<Self>;
}

impl<E: Executor> Handler<ExecuteBatch> for ExecutorActor<E> {
    type Result = Result<ModelOutput, ExecutorError>;

    fn handle(&mut self, msg: ExecuteBatch, _: &mut Self::Context) -> Self::Result {
        if !self.supervision.health.is_alive() {
            return Err(ExecutorError::Dead { restarts: 0 });
        }
        let start = Instant::now();
        self.supervision.health.step_started(start);
        let idle = self.last_step_end.map(|end| start.duration_since(end));
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            self.runner.run(&mut self.executor, &msg.batch, idle)
        }));
        self.supervision.health.step_finished();
        let end = Instant::now();
        self.last_step_end = Some(end);
        match outcome {
            Ok(result) => {
                if result.is_ok() {
                    self.consecutive_restarts = 0;
                }
                result
            }
            Err(panic) => {
                tracing::error!(message = panic_message(&*panic), "executor panicked; restarting it");
                Err(self.restart())
            }
        }
    }
}

impl<E: Executor> ExecutorActor<E> {
    fn new(executor: E, supervision: Supervision) -> Self {
        Self {
            executor,
            runner: StepRunner::default(),
            last_step_end: None,
            supervision,
            consecutive_restarts: 0,
        }
    }

    /// Rebuilds the executor's state (a reset that panics is retried, each try counting as
    /// a restart) or, with restarts exhausted, marks the engine dead.
    fn restart(&mut self) -> ExecutorError {
        self.runner.forget_samples();
        let health = &self.supervision.health;
        let mut restarts = 0;
        loop {
            if self.consecutive_restarts >= self.supervision.max_restarts {
                let reason = format!(
                    "the executor panicked after {} restarts without a successful step",
                    self.consecutive_restarts
                );
                tracing::error!(%reason, "the engine is dead");
                health.dead(reason);
                return ExecutorError::Dead { restarts };
            }
            self.consecutive_restarts += 1;
            restarts += 1;
            health.restarting();
            let executor = &mut self.executor;
            match catch_unwind(AssertUnwindSafe(|| executor.reset())) {
                Ok(()) => {
                    health.ready();
                    tracing::warn!(restarts, "executor restarted with a fresh cache");
                    return ExecutorError::Restarted { restarts };
                }
                Err(panic) => {
                    tracing::error!(message = panic_message(&*panic), "executor reset panicked");
                }
            }
        }
    }
}

/// A panic's text, for the log only.
fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic")
}

/// Starts the executor on its own thread.
pub fn start_executor<E: Executor>(executor: E, supervision: Supervision) -> Addr<ExecutorActor<E>> {
    let slot = Mutex::new(Some(executor));
    SyncArbiter::start(1, move || {
        let executor = slot
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
            .expect("the executor thread is started once");
        ExecutorActor::new(executor, supervision.clone())
    })
}

#[cfg(test)]
mod tests;
