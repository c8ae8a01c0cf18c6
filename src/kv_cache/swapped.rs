//! A swapped-out request's place in the host pool, and what KV events say about it: its
//! full blocks whose hashes the prefix cache knew are announced in medium `CPU` when it
//! leaves (`BlockStored`), and withdrawn from `CPU` when it comes back or is dropped
//! (`BlockRemoved`), so a router that weighs tiers by medium (llm-d's precise-prefix scorer)
//! sees what the host pool holds. Two swapped requests may hold blocks of the same hash: the
//! hash is announced by the first and withdrawn by the last.

use std::collections::HashMap;

use super::block::hash::BlockHash;
use super::events::{KvEventLog, Medium};

/// One swapped-out request.
#[derive(Debug, Clone)]
pub struct Swapped {
    /// Its host blocks, in block-table order.
    pub host: Vec<u32>,
    /// The hashes of its leading full blocks, as the prefix cache registered them.
    hashes: Vec<BlockHash>,
    /// Whether its hashes were counted in the host pool's (and announced).
    announced: bool,
}

/// The hashes the host pool holds, each with how many swapped requests hold it.
#[derive(Debug, Clone, Default)]
pub struct HostHashes {
    holders: HashMap<BlockHash, u32>,
}

impl Swapped {
    pub fn new(host: Vec<u32>, hashes: Vec<BlockHash>) -> Self {
        Self {
            host,
            hashes,
            announced: false,
        }
    }

    /// Counts its hashed blocks in `held` and records `BlockStored` in `CPU` for those the
    /// host pool did not hold yet; `tokens` are the request's, `block_size` per hashed block.
    pub fn announce(
        &mut self,
        held: &mut HostHashes,
        log: &mut KvEventLog,
        lora: Option<u32>,
        tokens: &[u32],
        block_size: usize,
    ) {
        if self.announced || tokens.len() < self.hashes.len() * block_size {
            return;
        }
        let mut parent = None;
        for (hash, block) in self.hashes.iter().zip(tokens.chunks_exact(block_size)) {
            let holders = held.holders.entry(*hash).or_insert(0);
            *holders += 1;
            if *holders == 1 {
                log.stored_under(Medium::Cpu, lora, parent, *hash, block);
            }
            parent = Some(*hash);
        }
        self.announced = true;
    }

    /// Uncounts what `announce` counted, recording `BlockRemoved` in `CPU` for the hashes
    /// no swapped request holds any more.
    pub fn withdraw(&self, held: &mut HostHashes, log: &mut KvEventLog) {
        if !self.announced {
            return;
        }
        for hash in &self.hashes {
            if let Some(holders) = held.holders.get_mut(hash) {
                *holders -= 1;
                if *holders == 0 {
                    held.holders.remove(hash);
                    log.removed_from(Medium::Cpu, *hash);
                }
            }
        }
    }
}
