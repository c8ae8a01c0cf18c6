//! One step on the executor's side, as the server's executor thread runs it: the
//! placeholders of a step scheduled ahead filled in from the step before, the forward pass
//! and sampling, and the samples kept for the step after. The executor actor wraps it in
//! its panic supervision; `kiln::testing`'s direct driver runs it on a plain thread.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Executor;
use super::previous_samples::PreviousSamples;
#[cfg(any(test, feature = "testing"))]
use crate::engine::step::StepStage;
use crate::engine::step::{ExecutorError, ModelOutput, SchedulerOutput};

/// What one step leaves for the next on the executor's side.
#[derive(Debug, Default)]
pub struct StepRunner {
    /// What the last step sampled, for the placeholders of a step scheduled ahead.
    previous_samples: PreviousSamples,
}

impl StepRunner {
    /// Forgets the last step's samples (its state is gone after a panic).
    pub fn forget_samples(&mut self) {
        self.previous_samples.clear();
    }

    /// Runs `batch`, every stage of which may panic. `idle`: the time since the step
    /// before ended, for the log (the gap overlapped scheduling exists to close).
    pub fn run<E: Executor>(
        &mut self,
        executor: &mut E,
        batch: &Arc<SchedulerOutput>,
        idle: Option<Duration>,
    ) -> Result<ModelOutput, ExecutorError> {
        let start = Instant::now();
        #[cfg(any(test, feature = "testing"))]
        executor.checkpoint(StepStage::BeforeExecute, batch);
        let resolved = self.previous_samples.resolve(batch);
        // Those samples served this step only; a failed step leaves none behind.
        self.previous_samples.clear();
        let batch: Arc<SchedulerOutput> = resolved?;
        #[cfg(any(test, feature = "testing"))]
        executor.checkpoint(StepStage::Execute, &batch);
        let mut output = executor.execute(&batch)?;
        #[cfg(any(test, feature = "testing"))]
        executor.checkpoint(StepStage::AfterExecute, &batch);
        self.previous_samples.record(&batch, &output);
        output.step_seconds = start.elapsed().as_secs_f64();
        output.idle_seconds = idle.map(|d| d.as_secs_f64());
        tracing::debug!(
            sequences = batch.sequences.len(),
            tokens = batch.num_tokens(),
            busy_us = start.elapsed().as_micros() as u64,
            idle_us = idle.map(|d| d.as_micros() as u64),
            "executed a step"
        );
        Ok(output)
    }
}
