//! The API's handle on the engine, as TGI's router holds one: submit a request, abort one,
//! read the load. Handlers see these three verbs, not the scheduler actor behind them.

use std::sync::Arc;

use actix::Addr;

use crate::engine::events::EngineError;
use crate::engine::lora::LoraAdapter;
use crate::engine::messages::{Abort, AbortReason, Generate};
use crate::engine::types::RequestId;
use crate::scheduler::actor::{GetLoad, LoadLora, ResetPrefixCache, SchedulerActor, UnloadLora};
use crate::stats::data::SchedulerStats;

#[derive(Clone)]
pub struct EngineHandle {
    scheduler: Addr<SchedulerActor>,
}

impl EngineHandle {
    pub fn new(scheduler: Addr<SchedulerActor>) -> Self {
        Self { scheduler }
    }

    /// Hands one engine request over; the engine refuses it (full queue, too long) or takes
    /// it, and its events then arrive on the request's channel. `Unavailable` when the engine
    /// no longer runs.
    pub async fn submit(&self, request: Generate) -> Result<(), EngineError> {
        self.scheduler
            .send(request)
            .await
            .unwrap_or(Err(EngineError::Unavailable))
    }

    /// Ends a request wherever it is (queued, running, swapped); its events then end.
    pub fn abort(&self, id: RequestId, reason: AbortReason) {
        self.scheduler.do_send(Abort { id, reason });
    }

    /// Empties the prefix cache: `Some(false)` while requests hold blocks, `None` when the
    /// engine no longer runs.
    pub async fn reset_prefix_cache(&self) -> Option<bool> {
        self.scheduler.send(ResetPrefixCache).await.ok()
    }

    /// Hands a run-time LoRA adapter to the engine; `false` when it no longer runs.
    pub async fn load_lora(&self, adapter: Arc<LoraAdapter>) -> bool {
        self.scheduler.send(LoadLora { adapter }).await.is_ok()
    }

    /// Stops admitting requests under adapter `id` (those queued or running finish).
    pub async fn unload_lora(&self, id: u32) -> bool {
        self.scheduler.send(UnloadLora { id }).await.is_ok()
    }

    /// The engine's load now; `None` when it no longer runs.
    pub async fn load(&self) -> Option<SchedulerStats> {
        self.scheduler.send(GetLoad).await.ok()
    }
}
