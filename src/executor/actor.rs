//! `ExecutorActor`: a SyncArbiter actor on its own thread. A panic inside a step is caught,
//! the executor's state is reset, and the step's requests end with `finish_reason=error`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::time::Instant;

use actix::{Actor, Addr, Handler, SyncArbiter, SyncContext};

use super::Executor;
use super::previous_samples::PreviousSamples;
use crate::engine::step::{ExecuteBatch, ExecutorError, ModelOutput};

pub struct ExecutorActor<E: Executor> {
    executor: E,
    /// When the previous step ended: the time until the next one starts is the executor's
    /// idle gap, which overlapped scheduling exists to close.
    last_step_end: Option<Instant>,
    /// What the last step sampled, for the placeholders of a step scheduled ahead.
    previous_samples: PreviousSamples,
}

impl<E: Executor> Actor for ExecutorActor<E> {
    type Context = SyncContext<Self>;
}

impl<E: Executor> Handler<ExecuteBatch> for ExecutorActor<E> {
    type Result = Result<ModelOutput, ExecutorError>;

    fn handle(&mut self, msg: ExecuteBatch, _: &mut Self::Context) -> Self::Result {
        let start = Instant::now();
        let idle = self.last_step_end.map(|end| start.duration_since(end));
        let resolved = self.previous_samples.resolve(&msg.batch);
        // Those samples served this step only; a failed step leaves none behind.
        self.previous_samples.clear();
        let batch = resolved?;
        let executor = &mut self.executor;
        let outcome = catch_unwind(AssertUnwindSafe(|| executor.execute(&batch)));
        let end = Instant::now();
        self.last_step_end = Some(end);
        tracing::debug!(
            sequences = msg.batch.sequences.len(),
            tokens = msg.batch.num_tokens(),
            busy_us = end.duration_since(start).as_micros() as u64,
            idle_us = idle.map(|d| d.as_micros() as u64),
            "executed a step"
        );
        match outcome {
            Ok(Ok(output)) => {
                self.previous_samples.record(&batch, &output);
                Ok(output)
            }
            Ok(Err(error)) => Err(error),
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "unknown panic".into());
                tracing::error!(%message, "executor panicked; resetting its state");
                self.executor.reset();
                Err(ExecutorError::Panicked(message))
            }
        }
    }
}

/// Starts the executor on its own thread.
pub fn start_executor<E: Executor>(executor: E) -> Addr<ExecutorActor<E>> {
    let slot = Mutex::new(Some(executor));
    SyncArbiter::start(1, move || {
        let executor = slot
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
            .expect("the executor thread is started once");
        ExecutorActor {
            executor,
            last_step_end: None,
            previous_samples: PreviousSamples::default(),
        }
    })
}
