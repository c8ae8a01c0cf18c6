//! The executor: runs a `SchedulerOutput` through the model on its own thread.

pub mod actor;
#[cfg(any(test, feature = "testing"))]
pub mod fake;
pub mod host_pool;
pub mod model_runner;
pub mod previous_samples;
pub mod sampler;

pub use actor::{ExecutorActor, start_executor};

use crate::engine::step::{ExecutorError, ModelOutput, SchedulerOutput};

/// Something that can run a step: the burn model, or a fake in tests.
pub trait Executor: Send + Unpin + 'static {
    fn execute(&mut self, batch: &SchedulerOutput) -> Result<ModelOutput, ExecutorError>;
    /// Discards all device state after a failure (the KV cache may be half-written).
    fn reset(&mut self);
}
