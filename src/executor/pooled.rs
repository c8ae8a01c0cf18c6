//! An executor whose steps run on a thread pool of its own: each engine of a data-parallel
//! CPU server gets its share of the cores. The kernels split their work with rayon
//! (`par_iter`, `rayon::current_num_threads()`), so running the step inside the pool's
//! `install` is all it takes (the step itself runs on one of the pool's threads, so what it
//! first writes, the KV cache included, is placed on the pool's NUMA node); one engine alone
//! runs on the global pool.

use std::sync::Arc;

use rayon::ThreadPool;

use super::Executor;
use super::placement::CpuShare;
use super::placement::affinity::pin_current_thread;
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

    /// Allocates the executor's KV cache again on one of the pool's threads, so that a pinned
    /// pool's engine has its cache in its own node's memory (the loading thread allocated it
    /// first). Before the first step only.
    pub fn allocate_cache_on_pool(&mut self) {
        if let Some(pool) = &self.pool {
            let inner = &mut self.inner;
            pool.install(|| inner.allocate_cache_here());
        }
    }
}

/// One pool per engine, threads named `engine{i}-{t}` (so that `/proc` shows whose they
/// are); none for one engine. An engine with a CPU share has a thread per CPU of it, each
/// pinned to the share as it starts; one without, an even share of the global pool's threads.
/// `RAYON_NUM_THREADS`, where set, sizes every pool as an even share of that many threads.
pub fn engine_pools(shares: &[Option<CpuShare>]) -> Result<Vec<Option<Arc<ThreadPool>>>, rayon::ThreadPoolBuildError> {
    if shares.len() <= 1 {
        return Ok(vec![None]);
    }
    let user_threads = std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|n| n.trim().parse().ok())
        .filter(|&n: &usize| n > 0);
    shares
        .iter()
        .enumerate()
        .map(|(i, share)| {
            let mut builder = rayon::ThreadPoolBuilder::new()
                .num_threads(pool_threads(share.as_ref(), shares.len(), user_threads))
                .thread_name(move |t| format!("engine{i}-{t}"));
            if let Some(share) = share {
                let cpus = share.cpus.clone();
                builder = builder.start_handler(move |t| {
                    if let Err(error) = pin_current_thread(&cpus) {
                        tracing::warn!(engine = i, thread = t, %error, "could not pin an engine thread to its CPUs");
                    }
                });
            }
            builder.build().map(|pool| Some(Arc::new(pool)))
        })
        .collect()
}

/// One engine's pool size: its CPU count, or an even share (at least one) of the global
/// pool's threads when unpinned or when the user set a thread count.
fn pool_threads(share: Option<&CpuShare>, engines: usize, user_threads: Option<usize>) -> usize {
    match (share, user_threads) {
        (Some(share), None) => share.cpus.len(),
        (_, Some(threads)) => (threads / engines).max(1),
        (None, None) => (rayon::current_num_threads() / engines).max(1),
    }
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
        match &self.pool {
            // A restart's new cache is allocated on the pool too, as the first one was.
            Some(pool) => {
                let inner = &mut self.inner;
                pool.install(|| inner.reset());
            }
            None => self.inner.reset(),
        }
    }

    fn allocate_cache_here(&mut self) {
        self.inner.allocate_cache_here();
    }

    #[cfg(any(test, feature = "testing"))]
    fn checkpoint(&mut self, stage: StepStage, batch: &SchedulerOutput) {
        self.inner.checkpoint(stage, batch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::placement::affinity::allowed_cpus;

    #[test]
    fn unpinned_engines_share_the_threads_and_one_engine_keeps_the_global_pool() {
        assert!(engine_pools(&[None]).unwrap()[0].is_none());
        let pools = engine_pools(&[None, None]).unwrap();
        let expected = (rayon::current_num_threads() / 2).max(1);
        for pool in pools {
            let pool = pool.expect("a pool per engine");
            assert_eq!(pool.install(rayon::current_num_threads), expected);
        }
    }

    #[test]
    fn pinned_engines_have_a_named_thread_per_cpu_each_on_its_share() {
        let allowed = allowed_cpus().unwrap();
        // The last allowed CPU to engine 0, every allowed CPU to engine 1 (on a one-CPU
        // machine both get the one).
        let shares = [
            Some(CpuShare {
                node: 0,
                cpus: vec![*allowed.last().unwrap()],
            }),
            Some(CpuShare {
                node: 0,
                cpus: allowed.clone(),
            }),
        ];
        let pools = engine_pools(&shares).unwrap();
        for (i, (pool, share)) in pools.iter().zip(&shares).enumerate() {
            let pool = pool.as_ref().expect("a pool per engine");
            let share = share.as_ref().unwrap();
            let seen = pool.broadcast(|_| {
                let name = std::thread::current().name().unwrap_or("").to_owned();
                (name, allowed_cpus().unwrap())
            });
            assert_eq!(seen.len(), share.cpus.len(), "a thread per CPU: {seen:?}");
            for (t, (name, cpus)) in seen.iter().enumerate() {
                assert_eq!(name, &format!("engine{i}-{t}"));
                assert_eq!(cpus, &share.cpus, "{name}");
            }
        }
    }

    /// Records the thread the cache was allocated on.
    struct CacheHome(Option<String>);

    impl Executor for CacheHome {
        fn execute(&mut self, _: &SchedulerOutput) -> Result<ModelOutput, ExecutorError> {
            unreachable!("no step runs")
        }
        fn reset(&mut self) {}
        fn allocate_cache_here(&mut self) {
            self.0 = std::thread::current().name().map(str::to_owned);
        }
    }

    #[test]
    fn the_cache_is_allocated_again_on_the_engines_pool() {
        let allowed = allowed_cpus().unwrap();
        let shares = [
            Some(CpuShare {
                node: 0,
                cpus: allowed.clone(),
            }),
            Some(CpuShare { node: 0, cpus: allowed }),
        ];
        let pool = engine_pools(&shares).unwrap().pop().unwrap();
        let mut executor = Pooled::new(CacheHome(None), pool);
        executor.allocate_cache_on_pool();
        let home = executor.inner.0.expect("allocated");
        assert!(home.starts_with("engine1-"), "{home}");
    }

    #[test]
    fn a_user_thread_count_is_split_between_the_engines() {
        let share = CpuShare {
            node: 0,
            cpus: vec![0, 1, 2, 3],
        };
        assert_eq!(pool_threads(Some(&share), 2, None), 4);
        assert_eq!(pool_threads(Some(&share), 2, Some(6)), 3);
        assert_eq!(pool_threads(None, 4, Some(2)), 1);
    }
}
