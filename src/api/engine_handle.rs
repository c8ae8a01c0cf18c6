//! The API's handle on the engines, as TGI's router holds one: submit a request, abort one,
//! read the load. Handlers see these verbs, not the scheduler actors behind them. A
//! data-parallel server (`--data-parallel-size`) has several engines: an unbound handle
//! chooses one per request ([`super::engine_choice`]) and answers for all of them; a handle
//! bound to one engine ([`EngineHandle::pinned`], or what `submit` returns) talks to it alone,
//! so a request's abort reaches the engine that runs it. Each engine has its own health: the
//! choice passes over an engine that restarts or is dead while another serves.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use actix::Addr;
use futures_util::future::join_all;

use super::engine_choice::{EngineFacts, choose};
use crate::engine::events::EngineError;
use crate::engine::health::{EngineHealth, EngineState};
use crate::engine::lora::LoraAdapter;
use crate::engine::messages::{Abort, AbortReason, Generate};
use crate::engine::types::RequestId;
use crate::scheduler::actor::{GetLoad, GetPlacement, LoadLora, ResetPrefixCache, SchedulerActor, UnloadLora};
use crate::stats::data::SchedulerStats;

#[derive(Clone)]
pub struct EngineHandle {
    engines: Arc<[Addr<SchedulerActor>]>,
    /// The engine this handle is bound to; `None`: any, chosen per request.
    bound: Option<usize>,
    /// Turns for ties between equally good engines.
    turn: Arc<AtomicUsize>,
    /// Each engine's health, by index.
    health: Arc<[Arc<EngineHealth>]>,
}

impl EngineHandle {
    pub fn new(scheduler: Addr<SchedulerActor>) -> Self {
        Self::data_parallel(vec![scheduler])
    }

    /// Engines `0..n` of a data-parallel server (at least one).
    pub fn data_parallel(engines: Vec<Addr<SchedulerActor>>) -> Self {
        assert!(!engines.is_empty(), "a server runs at least one engine");
        let health = engines
            .iter()
            .map(|_| {
                let health = EngineHealth::new();
                health.ready();
                Arc::new(health)
            })
            .collect();
        Self {
            engines: engines.into(),
            bound: None,
            turn: Arc::new(AtomicUsize::new(0)),
            health,
        }
    }

    /// The engines' own healths (one per engine, by index), which their executors write;
    /// without them every engine counts as ready.
    pub fn with_health(self, health: Vec<Arc<EngineHealth>>) -> Self {
        assert_eq!(health.len(), self.engines.len(), "one health per engine");
        Self {
            health: health.into(),
            ..self
        }
    }

    /// Engine `i`'s state now.
    pub fn state(&self, i: usize) -> EngineState {
        self.health[i].state()
    }

    /// Whether engine `i` takes requests now (ready, or draining its last ones).
    pub fn serves(&self, i: usize) -> bool {
        self.health[i].serves()
    }

    /// Engines behind the server (`dp_size`).
    pub fn size(&self) -> usize {
        self.engines.len()
    }

    /// The same engines, bound to `rank` when given (a request pinned to a data-parallel
    /// rank, already checked to exist).
    pub fn pinned(&self, rank: Option<usize>) -> Self {
        Self {
            bound: rank.filter(|&r| r < self.engines.len()).or(self.bound),
            ..self.clone()
        }
    }

    /// The handle bound to the engine that should run `prompt`: this one if bound, else,
    /// among the engines that serve now, the one holding its longest cached prefix unless
    /// loaded well beyond the least loaded. When none serves, a restarting one is chosen
    /// (the request waits for its restart, as with one engine), and with every engine dead
    /// any (the request fails).
    pub async fn choose_for(&self, prompt: &[u32], lora: Option<u32>) -> Self {
        if self.bound.is_some() {
            return self.clone();
        }
        let turn = self.turn.fetch_add(1, Ordering::Relaxed);
        if self.engines.len() == 1 {
            return self.pinned(Some(0));
        }
        let all = 0..self.engines.len();
        let mut candidates: Vec<usize> = all.clone().filter(|&i| self.serves(i)).collect();
        if candidates.is_empty() {
            candidates = all.clone().filter(|&i| self.health[i].is_alive()).collect();
        }
        if candidates.is_empty() {
            candidates = all.collect();
        }
        if let [only] = candidates[..] {
            return self.pinned(Some(only));
        }
        let prompt: Arc<[u32]> = prompt.into();
        let asks = candidates.iter().map(|&i| {
            let engine = &self.engines[i];
            engine.send(GetPlacement {
                prompt: Arc::clone(&prompt),
                lora,
            })
        });
        // An engine that does not answer is never chosen.
        let facts: Vec<EngineFacts> = join_all(asks)
            .await
            .into_iter()
            .map(|answer| match answer {
                Ok(p) => EngineFacts {
                    cached_tokens: p.cached_tokens,
                    load_tokens: p.load_tokens,
                },
                Err(_) => EngineFacts {
                    cached_tokens: 0,
                    load_tokens: u64::MAX,
                },
            })
            .collect();
        self.pinned(Some(candidates[choose(&facts, turn)]))
    }

    /// Hands one engine request over (to the bound engine, else to the one chosen for it);
    /// the engine refuses it (full queue, too long) or takes it, and its events then arrive
    /// on the request's channel. `Unavailable` when the engine no longer runs.
    pub async fn submit(&self, request: Generate) -> Result<(), EngineError> {
        let target = self
            .choose_for(&request.request.prompt_token_ids, request.request.lora)
            .await;
        let engine = &target.engines[target.bound.unwrap_or(0)];
        engine.send(request).await.unwrap_or(Err(EngineError::Unavailable))
    }

    /// Ends a request wherever it is (queued, running, swapped); its events then end. An
    /// unbound handle asks every engine (the others know no such request).
    pub fn abort(&self, id: RequestId, reason: AbortReason) {
        match self.bound {
            Some(i) => self.engines[i].do_send(Abort { id, reason }),
            None => {
                for engine in self.engines.iter() {
                    engine.do_send(Abort { id: id.clone(), reason });
                }
            }
        }
    }

    /// Empties every engine's prefix cache: `Some(false)` while requests hold blocks in any,
    /// `None` when an engine no longer runs.
    pub async fn reset_prefix_cache(&self) -> Option<bool> {
        let answers = join_all(self.engines.iter().map(|e| e.send(ResetPrefixCache))).await;
        answers
            .into_iter()
            .try_fold(true, |all, answer| answer.ok().map(|reset| all && reset))
    }

    /// Hands a run-time LoRA adapter to every engine; `false` when one no longer runs.
    pub async fn load_lora(&self, adapter: Arc<LoraAdapter>) -> bool {
        let asks = self.engines.iter().map(|e| {
            e.send(LoadLora {
                adapter: Arc::clone(&adapter),
            })
        });
        join_all(asks).await.iter().all(Result::is_ok)
    }

    /// Stops admitting requests under adapter `id` on every engine (those queued or running
    /// finish).
    pub async fn unload_lora(&self, id: u32) -> bool {
        join_all(self.engines.iter().map(|e| e.send(UnloadLora { id })))
            .await
            .iter()
            .all(Result::is_ok)
    }

    /// Each engine's load now, by index; `None` when one no longer runs.
    pub async fn loads(&self) -> Option<Vec<SchedulerStats>> {
        let answers = join_all(self.engines.iter().map(|e| e.send(GetLoad))).await;
        answers.into_iter().map(Result::ok).collect()
    }

    /// The engines' load now, summed (usage averaged over the engines' caches); `None` when
    /// one no longer runs.
    pub async fn load(&self) -> Option<SchedulerStats> {
        self.loads().await.map(|loads| total_load(&loads))
    }
}

/// Several engines' loads as one: counts and tokens add up; cache usage is the share of all
/// the engines' blocks in use (each engine's usage weighted by its capacity).
pub fn total_load(loads: &[SchedulerStats]) -> SchedulerStats {
    let mut total = SchedulerStats::default();
    let capacity: u64 = loads.iter().map(|l| l.tokens.capacity).sum();
    for l in loads {
        total.num_running += l.num_running;
        total.num_waiting += l.num_waiting;
        total.num_swapped += l.num_swapped;
        total.tokens.waiting += l.tokens.waiting;
        total.tokens.uncached_waiting += l.tokens.uncached_waiting;
        total.tokens.running += l.tokens.running;
        total.tokens.capacity += l.tokens.capacity;
        let weight = if capacity == 0 {
            1.0 / loads.len() as f64
        } else {
            l.tokens.capacity as f64 / capacity as f64
        };
        total.kv_cache_usage += l.kv_cache_usage * weight;
        total.cpu_cache_usage += l.cpu_cache_usage * weight;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::data::TokenLoad;

    #[test]
    fn loads_add_up_and_usage_is_weighted_by_capacity() {
        let one = |running, usage, capacity| SchedulerStats {
            num_running: running,
            num_waiting: 1,
            kv_cache_usage: usage,
            tokens: TokenLoad {
                waiting: 10,
                uncached_waiting: 5,
                running: 100,
                capacity,
            },
            ..SchedulerStats::default()
        };
        let total = total_load(&[one(2, 0.5, 1000), one(3, 0.0, 3000)]);
        assert_eq!((total.num_running, total.num_waiting), (5, 2));
        assert_eq!(total.tokens.capacity, 4000);
        assert_eq!(total.tokens.running, 200);
        assert!((total.kv_cache_usage - 0.125).abs() < 1e-12);
    }
}
