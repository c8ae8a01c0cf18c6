//! The executor: runs a `SchedulerOutput` through the model on its own thread.

pub mod actor;
#[cfg(any(test, feature = "testing"))]
pub mod fake;
pub mod filtered_sampling;
pub mod grammar_states;
pub mod host_pool;
pub mod logit_masks;
pub mod model_runner;
pub mod placement;
pub mod pooled;
pub mod previous_samples;
pub mod prompt_logprobs;
pub mod sampler;
pub mod step_runner;

pub use actor::{ExecutorActor, start_executor};

#[cfg(any(test, feature = "testing"))]
use crate::engine::step::StepStage;
use crate::engine::step::{ExecutorError, ModelOutput, SchedulerOutput};

/// Something that can run a step: the burn model, or a fake in tests.
pub trait Executor: Send + Unpin + 'static {
    fn execute(&mut self, batch: &SchedulerOutput) -> Result<ModelOutput, ExecutorError>;
    /// Discards all device and host KV state after a panic (the cache may be half-written),
    /// dropping the old cache before allocating the new one.
    fn reset(&mut self);
    /// Allocates the (still unused) device KV cache again from the calling thread: on the
    /// CPU its pages are written as it is zeroed, so Linux's first-touch policy puts them on
    /// the NUMA node of the thread that calls this (a pinned engine's pool). Nothing for an
    /// executor without a cache.
    fn allocate_cache_here(&mut self) {}
    /// Called by the executor actor as a step reaches `stage`: a fault-injection point for
    /// the fake executor, built only for tests (the server's executors have no such hook).
    #[cfg(any(test, feature = "testing"))]
    fn checkpoint(&mut self, _stage: StepStage, _batch: &SchedulerOutput) {}
}
