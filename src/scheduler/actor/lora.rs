//! Run-time LoRA adapter loads and unloads reaching the engine (see `policy::lora`).

use std::sync::Arc;

use actix::{Context, Handler, Message};

use super::SchedulerActor;
use crate::engine::lora::LoraAdapter;

/// Serve `adapter` from now on; answered once the scheduler has it, so a request under it
/// sent after the answer is admitted.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct LoadLora {
    pub adapter: Arc<LoraAdapter>,
}

impl Handler<LoadLora> for SchedulerActor {
    type Result = ();

    fn handle(&mut self, msg: LoadLora, _: &mut Context<Self>) {
        tracing::debug!(id = msg.adapter.id, adapter = %msg.adapter.name, "LoRA adapter handed to the engine");
        self.scheduler.load_lora(msg.adapter);
        self.record_lora_snapshot();
    }
}

/// Stop serving adapter `id`: requests that name it and are already queued or running
/// finish under it; later ones are refused.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct UnloadLora {
    pub id: u32,
}

impl Handler<UnloadLora> for SchedulerActor {
    type Result = ();

    fn handle(&mut self, msg: UnloadLora, _: &mut Context<Self>) {
        self.scheduler.unload_lora(msg.id);
        self.record_lora_snapshot();
    }
}

impl SchedulerActor {
    /// With LoRA served, records the current gauges outside a step: at start (so the
    /// per-adapter series exist before any traffic) and at each adapter change (so a loaded
    /// adapter's series appear at once).
    pub(super) fn record_lora_snapshot(&self) {
        let snapshot = self.scheduler.make_stats_snapshot();
        if snapshot.lora.is_some() {
            self.record(snapshot, crate::stats::data::IterationStats::default());
        }
    }
}
