//! What happened to the prefix cache, as plain data: the `BlockManager` records these when
//! asked to (`--kv-events-config`), the scheduler drains them after each step, and the
//! publisher (module `kv_events`) writes them in vLLM's wire format. A router replaying them
//! in order holds exactly the set of hashes the prefix cache holds.

use super::block::hash::BlockHash;

/// Where a block's KV lives (vLLM's `medium`): the engine's own pool, or the host swap pool
/// a request's blocks move to when it is preempted by swapping.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Medium {
    /// vLLM's `GPU`: kiln's device KV pool, on any device.
    #[default]
    Gpu,
    /// vLLM's `CPU`: the host swap pool.
    Cpu,
}

impl Medium {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Gpu => "GPU",
            Self::Cpu => "CPU",
        }
    }
}

/// One change to the set of cached block hashes (vLLM's `KVCacheEvent` variants).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvCacheEvent {
    /// Consecutive blocks of one sequence were cached: `block_hashes[0]`'s parent is
    /// `parent_block_hash` (`None`: it starts the sequence), each later one's parent is the
    /// hash before it, and `token_ids` holds all their tokens, `block_size` per block.
    BlockStored {
        block_hashes: Vec<BlockHash>,
        parent_block_hash: Option<BlockHash>,
        token_ids: Vec<u32>,
        block_size: usize,
        medium: Medium,
        /// The LoRA adapter the blocks were computed under (vLLM's `lora_id`); `None`: the
        /// base model. A chain never mixes adapters: their hashes hang off different roots.
        lora_id: Option<u32>,
        /// The adapter's name (vLLM's `lora_name`), filled in by the scheduler, which knows it.
        lora_name: Option<String>,
    },
    /// These blocks left `medium`: evicted from the prefix cache (`Gpu`), or brought back
    /// from or dropped by the swap pool (`Cpu`).
    BlockRemoved {
        block_hashes: Vec<BlockHash>,
        medium: Medium,
    },
    /// Every cached block was forgotten (the executor restarted with an empty cache).
    AllBlocksCleared,
}

/// The events recorded since the last drain, merged where vLLM's reader allows: a block
/// stored right after its parent extends the parent's `BlockStored`, and consecutive
/// evictions share one `BlockRemoved`.
#[derive(Debug, Default)]
pub struct KvEventLog {
    events: Vec<KvCacheEvent>,
}

impl KvEventLog {
    /// A block holding `tokens`, child of `parent`, is now cached under `hash`.
    pub fn stored(&mut self, parent: Option<BlockHash>, hash: BlockHash, tokens: &[u32]) {
        self.stored_in(Medium::Gpu, parent, hash, tokens);
    }

    /// As [`stored`](Self::stored), in `medium`.
    pub fn stored_in(&mut self, medium: Medium, parent: Option<BlockHash>, hash: BlockHash, tokens: &[u32]) {
        self.stored_under(medium, None, parent, hash, tokens);
    }

    /// As [`stored_in`](Self::stored_in), computed under LoRA adapter `lora`.
    pub fn stored_under(
        &mut self,
        medium: Medium,
        lora: Option<u32>,
        parent: Option<BlockHash>,
        hash: BlockHash,
        tokens: &[u32],
    ) {
        if let Some(KvCacheEvent::BlockStored {
            block_hashes,
            token_ids,
            medium: last_medium,
            lora_id,
            ..
        }) = self.events.last_mut()
            && *last_medium == medium
            && *lora_id == lora
            && parent.is_some()
            && block_hashes.last().copied() == parent
        {
            block_hashes.push(hash);
            token_ids.extend_from_slice(tokens);
            return;
        }
        self.events.push(KvCacheEvent::BlockStored {
            block_hashes: vec![hash],
            parent_block_hash: parent,
            token_ids: tokens.to_vec(),
            block_size: tokens.len(),
            medium,
            lora_id: lora,
            lora_name: None,
        });
    }

    /// The block cached under `hash` was evicted.
    pub fn removed(&mut self, hash: BlockHash) {
        self.removed_from(Medium::Gpu, hash);
    }

    /// The block under `hash` left `medium`.
    pub fn removed_from(&mut self, medium: Medium, hash: BlockHash) {
        if let Some(KvCacheEvent::BlockRemoved {
            block_hashes,
            medium: last_medium,
        }) = self.events.last_mut()
            && *last_medium == medium
        {
            block_hashes.push(hash);
            return;
        }
        self.events.push(KvCacheEvent::BlockRemoved {
            block_hashes: vec![hash],
            medium,
        });
    }

    pub fn cleared(&mut self) {
        self.events.push(KvCacheEvent::AllBlocksCleared);
    }

    /// The events since the last call, oldest first.
    pub fn take(&mut self) -> Vec<KvCacheEvent> {
        std::mem::take(&mut self.events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(v: u64) -> BlockHash {
        BlockHash::from_u64(v)
    }

    #[test]
    fn a_chain_merges_into_one_stored_event_and_a_break_starts_another() {
        let mut log = KvEventLog::default();
        log.stored(None, h(10), &[1, 2]);
        log.stored(Some(h(10)), h(11), &[3, 4]);
        log.stored(Some(h(99)), h(12), &[5, 6]); // parent 99 was not just stored
        log.removed(h(10));
        log.removed(h(11));
        log.cleared();
        assert_eq!(
            log.take(),
            vec![
                KvCacheEvent::BlockStored {
                    block_hashes: vec![h(10), h(11)],
                    parent_block_hash: None,
                    token_ids: vec![1, 2, 3, 4],
                    block_size: 2,
                    medium: Medium::Gpu,
                    lora_id: None,
                    lora_name: None,
                },
                KvCacheEvent::BlockStored {
                    block_hashes: vec![h(12)],
                    parent_block_hash: Some(h(99)),
                    token_ids: vec![5, 6],
                    block_size: 2,
                    medium: Medium::Gpu,
                    lora_id: None,
                    lora_name: None,
                },
                KvCacheEvent::BlockRemoved {
                    block_hashes: vec![h(10), h(11)],
                    medium: Medium::Gpu,
                },
                KvCacheEvent::AllBlocksCleared,
            ]
        );
        assert!(log.take().is_empty());
    }

    #[test]
    fn events_of_different_media_never_merge() {
        let mut log = KvEventLog::default();
        log.stored(None, h(10), &[1, 2]);
        log.stored_in(Medium::Cpu, Some(h(10)), h(11), &[3, 4]); // a child, but in another medium
        log.removed(h(10));
        log.removed_from(Medium::Cpu, h(11));
        let media: Vec<Medium> = log
            .take()
            .iter()
            .map(|e| match e {
                KvCacheEvent::BlockStored { medium, .. } | KvCacheEvent::BlockRemoved { medium, .. } => *medium,
                KvCacheEvent::AllBlocksCleared => unreachable!(),
            })
            .collect();
        assert_eq!(media, [Medium::Gpu, Medium::Cpu, Medium::Gpu, Medium::Cpu]);
    }

    #[test]
    fn chains_of_different_adapters_never_merge() {
        let mut log = KvEventLog::default();
        log.stored_under(Medium::Gpu, Some(1), None, h(10), &[1, 2]);
        log.stored_under(Medium::Gpu, Some(1), Some(h(10)), h(11), &[3, 4]);
        log.stored_under(Medium::Gpu, Some(2), Some(h(11)), h(12), &[5, 6]);
        let adapters: Vec<(usize, Option<u32>)> = log
            .take()
            .iter()
            .map(|e| match e {
                KvCacheEvent::BlockStored {
                    block_hashes, lora_id, ..
                } => (block_hashes.len(), *lora_id),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(adapters, [(2, Some(1)), (1, Some(2))]);
    }
}
