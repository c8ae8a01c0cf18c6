//! The scheduler's side of KV-cache events: turning recording on, and draining what the
//! block manager recorded (the actor hands it to the publisher after each step).

use super::Scheduler;
use crate::kv_cache::block::hash::BlockHash;
use crate::kv_cache::events::KvCacheEvent;

impl Scheduler {
    /// Records every change to the prefix cache from now on (`--kv-events-config`).
    pub fn record_kv_events(&mut self) {
        self.blocks.record_kv_events();
    }

    /// The prefix-cache changes since the last call, oldest first (none unless recording),
    /// each block computed under an adapter named by its adapter's name as well as its id.
    pub fn take_kv_events(&mut self) -> Vec<KvCacheEvent> {
        let mut events = self.blocks.take_kv_events();
        for event in &mut events {
            if let KvCacheEvent::BlockStored {
                lora_id: Some(id),
                lora_name,
                ..
            } = event
            {
                *lora_name = self.lora_name(*id);
            }
        }
        events
    }

    /// Hashes of the blocks in the prefix cache now, in no order: what a subscriber that
    /// applied every event so far holds.
    pub fn cached_block_hashes(&self) -> Vec<BlockHash> {
        self.blocks.cached_block_hashes()
    }
}
