//! `ExecutorActor`: a SyncArbiter actor on its own thread. A panic inside a step is caught,
//! the executor's state is reset, and the step's requests end with `finish_reason=error`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};

use actix::{Actor, Addr, Handler, Message, SyncArbiter, SyncContext};

use super::Executor;
use crate::scheduler::output::{ModelOutput, SchedulerOutput};

/// Run one step.
#[derive(Debug, Message)]
#[rtype(result = "Result<ModelOutput, ExecutorError>")]
pub struct ExecuteBatch {
    pub batch: Arc<SchedulerOutput>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExecutorError {
    #[error("the executor panicked: {0}")]
    Panicked(String),
    #[error("the executor failed: {0}")]
    Failed(String),
}

pub struct ExecutorActor<E: Executor> {
    executor: E,
}

impl<E: Executor> Actor for ExecutorActor<E> {
    type Context = SyncContext<Self>;
}

impl<E: Executor> Handler<ExecuteBatch> for ExecutorActor<E> {
    type Result = Result<ModelOutput, ExecutorError>;

    fn handle(&mut self, msg: ExecuteBatch, _: &mut Self::Context) -> Self::Result {
        let executor = &mut self.executor;
        match catch_unwind(AssertUnwindSafe(|| executor.execute(&msg.batch))) {
            Ok(result) => result,
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
        ExecutorActor { executor }
    })
}
