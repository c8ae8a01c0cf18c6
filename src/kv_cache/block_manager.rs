//! Which physical KV blocks each sequence owns. Pure bookkeeping: no tensors here.
//!
//! Running out of blocks is a value (`None`), never an error: the scheduler then preempts.

use std::collections::{HashMap, VecDeque};

use crate::engine::types::RequestId;

/// Hands out fixed-size blocks of KV slots from a fixed pool.
#[derive(Debug)]
pub struct BlockManager {
    block_size: usize,
    num_blocks: usize,
    free: VecDeque<u32>,
    tables: HashMap<RequestId, Vec<u32>>,
}

impl BlockManager {
    pub fn new(num_blocks: usize, block_size: usize) -> Self {
        Self {
            block_size,
            num_blocks,
            free: (0..num_blocks as u32).collect(),
            tables: HashMap::new(),
        }
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn num_blocks(&self) -> usize {
        self.num_blocks
    }

    pub fn num_free_blocks(&self) -> usize {
        self.free.len()
    }

    /// Blocks needed to hold `tokens` tokens.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_size)
    }

    /// Grows `id`'s table so it covers `total_tokens` tokens. Returns the blocks added, or
    /// `None` (allocating nothing) when the pool cannot cover it.
    pub fn allocate_slots(&mut self, id: &RequestId, total_tokens: usize) -> Option<Vec<u32>> {
        let have = self.tables.get(id).map_or(0, Vec::len);
        let need = self.blocks_for(total_tokens).saturating_sub(have);
        if need > self.free.len() {
            return None;
        }
        let new: Vec<u32> = self.free.drain(..need).collect();
        self.tables.entry(id.clone()).or_default().extend_from_slice(&new);
        Some(new)
    }

    /// The block table of `id` (empty when it holds none).
    pub fn block_table(&self, id: &RequestId) -> &[u32] {
        self.tables.get(id).map_or(&[], Vec::as_slice)
    }

    /// Returns every block of `id` to the pool; a no-op when it holds none.
    pub fn free(&mut self, id: &RequestId) {
        if let Some(blocks) = self.tables.remove(id) {
            self.free.extend(blocks);
        }
    }

    /// Blocks in use / all blocks, 0..1.
    pub fn usage(&self) -> f64 {
        if self.num_blocks == 0 {
            return 0.0;
        }
        (self.num_blocks - self.free.len()) as f64 / self.num_blocks as f64
    }

    /// Number of sequences holding blocks (for leak checks).
    pub fn num_owners(&self) -> usize {
        self.tables.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_is_all_or_nothing_and_free_returns_everything() {
        let mut bm = BlockManager::new(4, 16);
        let a: RequestId = "a".into();
        let b: RequestId = "b".into();
        assert_eq!(bm.allocate_slots(&a, 17).map(|v| v.len()), Some(2));
        assert_eq!(bm.allocate_slots(&a, 32), Some(vec![])); // already covered
        assert_eq!(bm.allocate_slots(&b, 48), None); // needs 3, 2 free
        assert_eq!(bm.num_free_blocks(), 2);
        assert!(bm.block_table(&b).is_empty());
        assert_eq!(bm.usage(), 0.5);
        bm.free(&a);
        assert_eq!(bm.num_free_blocks(), 4);
        assert_eq!(bm.usage(), 0.0);
        assert_eq!(bm.num_owners(), 0);
    }

    #[test]
    fn tables_never_share_blocks() {
        let mut bm = BlockManager::new(8, 4);
        let ids: Vec<RequestId> = (0..4).map(|i| format!("r{i}")).collect();
        for id in &ids {
            bm.allocate_slots(id, 7).expect("fits");
        }
        let mut all: Vec<u32> = ids.iter().flat_map(|id| bm.block_table(id).to_vec()).collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 8);
    }
}
