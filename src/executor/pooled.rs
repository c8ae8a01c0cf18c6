//! An executor whose steps run on a thread pool of its own: each engine of a data-parallel
//! CPU server gets its share of the cores. The kernels split their work with rayon
//! (`par_iter`, `rayon::current_num_threads()`), so running the step inside the pool's
//! `install` is all it takes; one engine alone runs on the global pool.

use std::sync::Arc;

use rayon::ThreadPool;

use super::Executor;
#[cfg(any(test, feature = "testing"))]
use crate::engine::step::StepStage;
use crate::engine::step::{ExecutorError, ModelOutput, SchedulerOutput};

pub struct Pooled<E> {
    inner: E,
    /// `None`: the global pool.
    pool: Option<Arc<ThreadPool>>,
}

impl<E: Executor> Pooled<E> {
    pub fn new(inner: E, pool: Option<Arc<ThreadPool>>) -> Self {
        Self { inner, pool }
    }
}

/// `engines` pools splitting the global pool's threads evenly (at least one each), named
/// `engine{i}-{t}`; no pools for one engine.
pub fn engine_pools(engines: usize) -> Result<Vec<Option<Arc<ThreadPool>>>, rayon::ThreadPoolBuildError> {
    if engines <= 1 {
        return Ok(vec![None]);
    }
    let threads = (rayon::current_num_threads() / engines).max(1);
    (0..engines)
        .map(|i| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .thread_name(move |t| format!("engine{i}-{t}"))
                .build()
                .map(|pool| Some(Arc::new(pool)))
        })
        .collect()
}

impl<E: Executor> Executor for Pooled<E> {
    fn execute(&mut self, batch: &SchedulerOutput) -> Result<ModelOutput, ExecutorError> {
        match &self.pool {
            Some(pool) => {
                let inner = &mut self.inner;
                pool.install(|| inner.execute(batch))
            }
            None => self.inner.execute(batch),
        }
    }

    fn reset(&mut self) {
        self.inner.reset();
    }

    #[cfg(any(test, feature = "testing"))]
    fn checkpoint(&mut self, stage: StepStage, batch: &SchedulerOutput) {
        self.inner.checkpoint(stage, batch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engines_share_the_cores_and_one_engine_keeps_the_global_pool() {
        assert!(engine_pools(1).unwrap()[0].is_none());
        let pools = engine_pools(2).unwrap();
        let expected = (rayon::current_num_threads() / 2).max(1);
        for pool in pools {
            let pool = pool.expect("a pool per engine");
            assert_eq!(pool.install(rayon::current_num_threads), expected);
        }
    }
}
