//! Which physical KV blocks each sequence owns. Pure bookkeeping: no tensors here.
//!
//! Modelled on vLLM's KV-cache manager (v1): device blocks are reference counted, every FULL
//! block can be registered in a prefix cache under a hash chaining its parent's hash and its own
//! token ids, and a cached block whose last holder frees it stays cached ("evictable") until its
//! slot is needed. On top of that, a host pool for vLLM v0's swap preemption.
//!
//! Running out of blocks is a value (`None`), never an error: the scheduler then preempts.
//!
//! Invariants (the tests check them after every operation):
//! - every device block is exactly one of: held (ref count > 0), plain free, or evictable (ref
//!   count 0 but still cached); every host block is either free or held by one swapped request;
//! - a block's ref count is the number of block tables holding it, plus one for each copy
//!   still to be handed to a step that reads it (`fork`);
//! - only full, computed blocks are cached or shared. A request appends tokens at positions
//!   past its last full computed block, and `allocate_cached_prefix` and `fork` share whole
//!   blocks only (`fork` copies the partial one), so appends always land in blocks the request
//!   alone holds and that are not cached.
//!
//! Allocation order: plain free blocks first (oldest freed first), then evictable cached blocks
//! in LRU order. Unlike vLLM's single free queue, a warm prefix is never evicted while a block
//! that caches nothing is available.

pub mod hash;

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Instant;

use super::events::{KvCacheEvent, KvEventLog, Medium};
use super::residency::{BlockResidency, ResidencyObservations};
use super::swapped::{HostHashes, Swapped};
use crate::engine::types::RequestId;
use hash::{BlockHash, BlockHasher};

/// Sizes of both pools and whether full blocks are shared between requests by content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockManagerConfig {
    pub num_gpu_blocks: usize,
    /// Host blocks for swap preemption; 0 disables swapping.
    pub num_cpu_blocks: usize,
    pub block_size: usize,
    pub enable_prefix_caching: bool,
    /// How full blocks are hashed (the scheme KV events publish).
    pub prefix_hasher: BlockHasher,
}

/// A request's device blocks, and the hashes of its leading full blocks that
/// `cache_full_blocks` has already seen (so each call only hashes the new ones).
#[derive(Debug, Default)]
struct Table {
    blocks: Vec<u32>,
    hashes: Vec<BlockHash>,
}

/// The prefix cache: hash -> block, and the evictable (free but cached) blocks in LRU order.
#[derive(Debug)]
struct PrefixCache {
    by_hash: HashMap<BlockHash, u32>,
    /// Per device block: the hash it is cached under.
    hash_of: Vec<Option<BlockHash>>,
    /// Evictable blocks keyed by the tick at which they were freed; the first is evicted first.
    lru: BTreeMap<u64, u32>,
    /// Per device block: its key in `lru` while evictable.
    lru_tick: Vec<Option<u64>>,
    tick: u64,
}

impl PrefixCache {
    fn new(num_blocks: usize) -> Self {
        Self {
            by_hash: HashMap::new(),
            hash_of: vec![None; num_blocks],
            lru: BTreeMap::new(),
            lru_tick: vec![None; num_blocks],
            tick: 0,
        }
    }

    fn is_cached(&self, block: u32) -> bool {
        self.hash_of[block as usize].is_some()
    }

    /// Caches `block` under `hash`, unless that hash already has a block (no duplicates) or
    /// the block is cached already (another table sharing it registered it first). Returns
    /// whether it did.
    fn insert(&mut self, block: u32, hash: BlockHash) -> bool {
        if let Some(cached) = self.hash_of[block as usize] {
            debug_assert_eq!(cached, hash, "block {block} cached under two hashes");
            return false;
        }
        if let Entry::Vacant(slot) = self.by_hash.entry(hash) {
            slot.insert(block);
            self.hash_of[block as usize] = Some(hash);
            return true;
        }
        false
    }

    /// A cached block's last holder freed it: it becomes evictable, newest last.
    fn park(&mut self, block: u32) {
        self.tick += 1;
        self.lru.insert(self.tick, block);
        self.lru_tick[block as usize] = Some(self.tick);
    }

    /// A request pinned `block` again; no-op when it was held already.
    fn unpark(&mut self, block: u32) {
        if let Some(tick) = self.lru_tick[block as usize].take() {
            self.lru.remove(&tick);
        }
    }

    /// Takes the least recently freed evictable block and forgets what it cached; returns
    /// the block and the hash it was cached under.
    fn evict(&mut self) -> Option<(u32, BlockHash)> {
        let (_, block) = self.lru.pop_first()?;
        self.lru_tick[block as usize] = None;
        let hash = self.hash_of[block as usize]
            .take()
            .expect("evictable blocks are cached");
        self.by_hash.remove(&hash);
        tracing::trace!(block, "evicted cached block");
        Some((block, hash))
    }
}

/// Hands out fixed-size blocks of KV slots from a device pool, shares full blocks by content,
/// and parks preempted requests' blocks in a host pool.
#[derive(Debug)]
pub struct BlockManager {
    block_size: usize,
    num_blocks: usize,
    enable_prefix_caching: bool,
    hasher: BlockHasher,
    ref_cnt: Vec<u32>,
    /// Free blocks that cache nothing, oldest freed first.
    free: VecDeque<u32>,
    cache: PrefixCache,
    tables: HashMap<RequestId, Table>,
    num_cpu_blocks: usize,
    cpu_free: VecDeque<u32>,
    /// Swapped-out requests: their host blocks and hashed full blocks.
    swapped: HashMap<RequestId, Swapped>,
    /// The hashes swapped requests announced in the host pool (KV events).
    host_hashes: HostHashes,
    /// Residency of sampled blocks (`--kv-cache-metrics`); `None` when off.
    residency: Option<BlockResidency>,
    /// Prefix-cache changes for KV-cache events; `None` unless `record_kv_events` was called.
    events: Option<KvEventLog>,
    /// Device copies (source, destination) made by `fork`, not yet handed to a step; each
    /// source holds a reference until then, so it cannot be reused before it is read.
    copies: Vec<(u32, u32)>,
}

impl BlockManager {
    /// A device pool only: no host pool, no prefix caching.
    pub fn new(num_blocks: usize, block_size: usize) -> Self {
        Self::with_config(BlockManagerConfig {
            num_gpu_blocks: num_blocks,
            num_cpu_blocks: 0,
            block_size,
            enable_prefix_caching: false,
            prefix_hasher: BlockHasher::default(),
        })
    }

    pub fn with_config(cfg: BlockManagerConfig) -> Self {
        assert!(cfg.block_size > 0, "block_size must be positive");
        Self {
            block_size: cfg.block_size,
            num_blocks: cfg.num_gpu_blocks,
            enable_prefix_caching: cfg.enable_prefix_caching,
            hasher: cfg.prefix_hasher,
            ref_cnt: vec![0; cfg.num_gpu_blocks],
            free: (0..cfg.num_gpu_blocks as u32).collect(),
            cache: PrefixCache::new(cfg.num_gpu_blocks),
            tables: HashMap::new(),
            num_cpu_blocks: cfg.num_cpu_blocks,
            cpu_free: (0..cfg.num_cpu_blocks as u32).collect(),
            swapped: HashMap::new(),
            host_hashes: HostHashes::default(),
            residency: None,
            events: None,
            copies: Vec::new(),
        }
    }

    /// From now on, record every change to the set of cached hashes for `take_kv_events`.
    pub fn record_kv_events(&mut self) {
        self.events.get_or_insert_with(KvEventLog::default);
    }

    /// The prefix-cache changes since the last call (none unless recording), oldest first.
    pub fn take_kv_events(&mut self) -> Vec<KvCacheEvent> {
        self.events.as_mut().map(KvEventLog::take).unwrap_or_default()
    }

    /// Hashes of the blocks in the prefix cache, held or evictable, in no order.
    pub fn cached_block_hashes(&self) -> Vec<BlockHash> {
        self.cache.by_hash.keys().copied().collect()
    }

    /// Becomes `fresh` (the executor restarted with empty caches: every block, both pools and
    /// the prefix cache are forgotten), keeping the events not yet taken and recording
    /// `AllBlocksCleared` when recording.
    /// Copies queued by `fork` are forgotten with the blocks they name.
    pub fn replace_after_restart(&mut self, fresh: BlockManager) {
        let mut events = self.events.take();
        *self = fresh;
        if let Some(log) = events.as_mut() {
            log.cleared();
        }
        self.events = events;
    }

    /// Forgets every cached block (vLLM's `reset_prefix_cache`, SGLang's `flush_cache`): the
    /// evictable ones become plain free blocks, oldest freed first, and `AllBlocksCleared` is
    /// recorded. Refused (false, nothing changed) while any block is held or swapped out, as
    /// vLLM refuses: a running request's blocks cannot be forgotten under it.
    pub fn reset_prefix_cache(&mut self) -> bool {
        if self.ref_cnt.iter().any(|&held| held > 0) || !self.swapped.is_empty() {
            return false;
        }
        while let Some((block, _)) = self.cache.evict() {
            self.free.push_back(block);
        }
        if let Some(log) = self.events.as_mut() {
            log.cleared();
        }
        true
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn num_blocks(&self) -> usize {
        self.num_blocks
    }

    pub fn num_cpu_blocks(&self) -> usize {
        self.num_cpu_blocks
    }

    /// Device blocks that can be allocated now: plain free plus evictable cached ones.
    pub fn num_free_blocks(&self) -> usize {
        self.free.len() + self.cache.lru.len()
    }

    /// Blocks registered in the prefix cache, held or evictable.
    pub fn num_cached_blocks(&self) -> usize {
        self.cache.by_hash.len()
    }

    /// How many of `hashes` (a request's full-block hashes, in order) the prefix cache
    /// holds as an unbroken run from the first: what a lookup now would reuse, touching
    /// nothing (0 when caching is off).
    pub fn cached_prefix_blocks(&self, hashes: &[BlockHash]) -> usize {
        if !self.enable_prefix_caching {
            return 0;
        }
        hashes.iter().take_while(|h| self.cache.by_hash.contains_key(h)).count()
    }

    /// Blocks needed to hold `tokens` tokens.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_size)
    }

    /// Prefix lookup for a request that holds no blocks yet: pins the longest run of cached full
    /// blocks matching the start of `tokens` into `id`'s table and returns the tokens they cover
    /// (a multiple of `block_size`). At least one token is left to compute, because the model
    /// must run on the last prompt token to sample: a prompt of exactly k full blocks reuses at
    /// most k-1. Returns 0, touching nothing, when caching is off or `id` holds blocks already.
    pub fn allocate_cached_prefix(&mut self, id: &RequestId, tokens: &[u32]) -> usize {
        self.allocate_cached_prefix_under(id, None, tokens)
    }

    /// [`Self::allocate_cached_prefix`] for a chain computed under a LoRA adapter, whose first
    /// block hangs off the adapter's root
    /// (a LoRA adapter's, [`BlockHasher::first_parent`]).
    pub fn allocate_cached_prefix_under(&mut self, id: &RequestId, lora: Option<u32>, tokens: &[u32]) -> usize {
        let root = self.hasher.first_parent(lora);
        let holds_blocks = self.tables.get(id).is_some_and(|t| !t.blocks.is_empty());
        if !self.enable_prefix_caching || holds_blocks || self.swapped.contains_key(id) {
            return 0;
        }
        let max_blocks = tokens.len().saturating_sub(1) / self.block_size;
        let mut table = Table::default();
        for chunk in tokens.chunks_exact(self.block_size).take(max_blocks) {
            let hash = self.hasher.hash(table.hashes.last().copied().or(root), chunk);
            let Some(&block) = self.cache.by_hash.get(&hash) else {
                break;
            };
            self.cache.unpark(block);
            self.ref_cnt[block as usize] += 1;
            if let Some(r) = &mut self.residency {
                r.reused(block, Instant::now());
            }
            table.blocks.push(block);
            table.hashes.push(hash);
        }
        let hit = table.blocks.len() * self.block_size;
        if hit > 0 {
            self.tables.insert(id.clone(), table);
        }
        hit
    }

    /// Grows `id`'s table so it covers `total_tokens` tokens. Returns the blocks added, or
    /// `None` (allocating nothing) when the pool cannot cover it. Plain free blocks are taken
    /// before evictable cached ones (see the module doc).
    pub fn allocate_slots(&mut self, id: &RequestId, total_tokens: usize) -> Option<Vec<u32>> {
        let have = self.tables.get(id).map_or(0, |t| t.blocks.len());
        let need = self.blocks_for(total_tokens).saturating_sub(have);
        if need > self.num_free_blocks() {
            return None;
        }
        let new: Vec<u32> = (0..need).map(|_| self.take_block()).collect();
        self.tables
            .entry(id.clone())
            .or_default()
            .blocks
            .extend_from_slice(&new);
        Some(new)
    }

    /// Gives `follower`, which holds no blocks, the first `tokens` computed tokens of
    /// `leader`'s KV (the choices of one prompt compute it once): the full blocks among them
    /// are shared, and the block holding the rest is copied into a fresh one, since the
    /// follower writes its next token there (copy-on-write, made at once because that write
    /// is the follower's next step). The copy is queued for `take_copies`. Returns whether it
    /// forked; `false`, changing nothing, when the follower holds blocks (or is swapped), the
    /// leader's table does not cover `tokens`, no block is free for the copy, or the block to
    /// copy is itself a copy not yet made.
    pub fn fork(&mut self, leader: &RequestId, follower: &RequestId, tokens: usize) -> bool {
        let follower_holds = self.tables.get(follower).is_some_and(|t| !t.blocks.is_empty());
        if tokens == 0 || leader == follower || follower_holds || self.swapped.contains_key(follower) {
            return false;
        }
        let Some(source) = self
            .tables
            .get(leader)
            .filter(|t| t.blocks.len() >= self.blocks_for(tokens))
        else {
            return false;
        };
        let full = tokens / self.block_size;
        let partial = (!tokens.is_multiple_of(self.block_size)).then(|| source.blocks[full]);
        // A partial block still waiting for its own copy has nothing to copy yet.
        let unwritten = |block: u32| self.copies.iter().any(|&(_, destination)| destination == block);
        if partial.is_some_and(|block| self.num_free_blocks() == 0 || unwritten(block)) {
            return false;
        }
        let mut table = Table {
            blocks: source.blocks[..full].to_vec(),
            // The shared blocks' hashes, so `cache_full_blocks` does not hash them again.
            hashes: source.hashes[..source.hashes.len().min(full)].to_vec(),
        };
        let now = Instant::now();
        for &block in &table.blocks {
            self.ref_cnt[block as usize] += 1;
            if let Some(r) = &mut self.residency {
                r.reused(block, now);
            }
        }
        if let Some(partial) = partial {
            let copy = self.take_block();
            self.ref_cnt[partial as usize] += 1;
            self.copies.push((partial, copy));
            table.blocks.push(copy);
        }
        tracing::trace!(%leader, %follower, tokens, "forked");
        self.tables.insert(follower.clone(), table);
        true
    }

    /// The device copies `fork` queued, as (source, destination) pairs; the step they are
    /// handed to must run them before anything else touches the cache (a source may be
    /// reused by that same step once its reference is dropped here).
    pub fn take_copies(&mut self) -> Vec<(u32, u32)> {
        let copies = std::mem::take(&mut self.copies);
        let sources: Vec<u32> = copies.iter().map(|&(source, _)| source).collect();
        self.release(&sources);
        copies
    }

    /// One free block, held once. The caller checked `num_free_blocks`.
    fn take_block(&mut self) -> u32 {
        let (block, evicted) = match self.free.pop_front() {
            Some(block) => (block, false),
            None => {
                let (block, hash) = self.cache.evict().expect("caller checked num_free_blocks");
                if let Some(log) = self.events.as_mut() {
                    log.removed(hash);
                }
                (block, true)
            }
        };
        self.ref_cnt[block as usize] = 1;
        if let Some(r) = &mut self.residency {
            let now = Instant::now();
            if evicted {
                r.evicted(block, now);
            }
            r.allocated(block, now);
        }
        block
    }

    /// Registers every newly full block of `id` (the first `num_computed` tokens of `tokens`,
    /// prompt ++ generated, have their K/V written) in the prefix cache. A block whose hash
    /// another block already caches stays uncached. No-op when caching is off.
    pub fn cache_full_blocks(&mut self, id: &RequestId, tokens: &[u32], num_computed: usize) {
        self.cache_full_blocks_under(id, None, tokens, num_computed);
    }

    /// [`Self::cache_full_blocks`] for a chain computed under a LoRA adapter, whose first block
    /// hangs off the adapter's root. KV events
    /// still name no parent for the first block, as vLLM's do.
    pub fn cache_full_blocks_under(&mut self, id: &RequestId, lora: Option<u32>, tokens: &[u32], num_computed: usize) {
        let root = self.hasher.first_parent(lora);
        if !self.enable_prefix_caching {
            return;
        }
        let Some(table) = self.tables.get_mut(id) else {
            return;
        };
        let num_full = (num_computed.min(tokens.len()) / self.block_size).min(table.blocks.len());
        for i in table.hashes.len()..num_full {
            let chunk = &tokens[i * self.block_size..(i + 1) * self.block_size];
            let parent = table.hashes.last().copied();
            let hash = self.hasher.hash(parent.or(root), chunk);
            table.hashes.push(hash);
            if self.cache.insert(table.blocks[i], hash)
                && let Some(log) = self.events.as_mut()
            {
                log.stored_under(Medium::Gpu, lora, parent, hash, chunk);
            }
        }
    }

    /// The block table of `id` (empty when it holds none).
    pub fn block_table(&self, id: &RequestId) -> &[u32] {
        self.tables.get(id).map_or(&[], |t| t.blocks.as_slice())
    }

    /// Releases `id`'s device blocks; a no-op when it holds none (a swapped request's host
    /// blocks need `free_swapped`). Blocks go tail first, so among cached blocks a sequence's
    /// last block is evicted before its prefix, which other requests are likelier to share.
    pub fn free(&mut self, id: &RequestId) {
        if let Some(table) = self.tables.remove(id) {
            self.cancel_copies_into(&table.blocks);
            self.release(&table.blocks);
        }
    }

    /// Drops queued copies into `blocks` (their holder let go before any step ran them), so
    /// a copy never lands in a block that was handed out again.
    fn cancel_copies_into(&mut self, blocks: &[u32]) {
        let (cancelled, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.copies)
            .into_iter()
            .partition(|(_, destination)| blocks.contains(destination));
        self.copies = kept;
        let sources: Vec<u32> = cancelled.iter().map(|&(source, _)| source).collect();
        self.release(&sources);
    }

    fn release(&mut self, blocks: &[u32]) {
        for &block in blocks.iter().rev() {
            let count = &mut self.ref_cnt[block as usize];
            *count -= 1;
            if *count == 0 {
                if let Some(r) = &mut self.residency {
                    r.released(block, Instant::now());
                }
                if self.cache.is_cached(block) {
                    self.cache.park(block);
                } else {
                    self.free.push_back(block);
                }
            }
        }
    }

    /// Swap preemption: moves every block of `id` to the host pool and returns (device, host)
    /// pairs, which the caller must copy before any freed device block is written again (i.e.
    /// before the next forward pass). `None`, changing nothing, when `id` holds no blocks, the
    /// host pool lacks room, or a block of `id` still waits for its fork copy (the caller then
    /// preempts by recompute). Cached blocks stay cached as evictable: their device contents
    /// are still valid.
    ///
    /// A block `id` shares (the prompt of `n > 1` choices, a prefix-cache hit) goes to the
    /// host as `id`'s private copy: `id` only drops its reference, so the others keep the
    /// device block, and `swap_in` brings the copy back into a block of `id`'s own. Shared
    /// blocks are full and never written again, so the copy equals the block for as long as
    /// anyone holds it; the sharing itself is not restored (the host pool pays for the copy).
    pub fn swap_out(&mut self, id: &RequestId) -> Option<Vec<(u32, u32)>> {
        let table = self.tables.get(id).filter(|t| !t.blocks.is_empty())?;
        // A block still waiting for its fork copy holds nothing to swap yet.
        let unwritten = self
            .copies
            .iter()
            .any(|(_, destination)| table.blocks.contains(destination));
        if unwritten || table.blocks.len() > self.cpu_free.len() {
            return None;
        }
        let table = self.tables.remove(id).expect("checked above");
        let host: Vec<u32> = self.cpu_free.drain(..table.blocks.len()).collect();
        self.release(&table.blocks);
        let pairs = table.blocks.iter().copied().zip(host.iter().copied()).collect();
        tracing::debug!(%id, blocks = host.len(), "swapped out");
        self.swapped.insert(id.clone(), Swapped::new(host, table.hashes));
        Some(pairs)
    }

    /// Whether the device has room to bring swapped `id` back now.
    pub fn can_swap_in(&self, id: &RequestId) -> bool {
        self.swapped
            .get(id)
            .is_some_and(|s| s.host.len() <= self.num_free_blocks())
    }

    /// Brings swapped `id` back into fresh device blocks and frees its host blocks. Returns
    /// (host, device) pairs to copy before `id` runs again; `None`, changing nothing, when `id`
    /// is not swapped or the device lacks room. The new blocks are not cached until the next
    /// `cache_full_blocks`, i.e. until after the copies have run.
    pub fn swap_in(&mut self, id: &RequestId) -> Option<Vec<(u32, u32)>> {
        if !self.can_swap_in(id) {
            return None;
        }
        let swapped = self.swapped.remove(id).expect("checked above");
        if let Some(log) = self.events.as_mut() {
            swapped.withdraw(&mut self.host_hashes, log);
        }
        let host = swapped.host;
        let device: Vec<u32> = host.iter().map(|_| self.take_block()).collect();
        self.cpu_free.extend(&host);
        let pairs = host.into_iter().zip(device.iter().copied()).collect();
        tracing::debug!(%id, blocks = device.len(), "swapped in");
        let table = Table {
            blocks: device,
            hashes: Vec::new(),
        };
        self.tables.insert(id.clone(), table);
        Some(pairs)
    }

    #[cfg(test)]
    pub fn is_swapped(&self, id: &RequestId) -> bool {
        self.swapped.contains_key(id)
    }

    /// Drops a swapped request's host blocks (abort while swapped); a no-op otherwise.
    pub fn free_swapped(&mut self, id: &RequestId) {
        if let Some(swapped) = self.swapped.remove(id) {
            if let Some(log) = self.events.as_mut() {
                swapped.withdraw(&mut self.host_hashes, log);
            }
            self.cpu_free.extend(swapped.host);
        }
    }

    /// Announces swapped `id`'s hashed blocks in medium `CPU` (KV events on); `tokens` are
    /// its tokens so far. The scheduler calls it right after `swap_out`.
    pub fn announce_swapped(&mut self, id: &RequestId, lora: Option<u32>, tokens: &[u32]) {
        if let (Some(log), Some(swapped)) = (self.events.as_mut(), self.swapped.get_mut(id)) {
            swapped.announce(&mut self.host_hashes, log, lora, tokens, self.block_size);
        }
    }

    /// Device blocks held by requests / all device blocks, 0..1. Evictable cached blocks are
    /// not in use: an idle server with a warm prefix cache reports 0.
    pub fn usage(&self) -> f64 {
        if self.num_blocks == 0 {
            return 0.0;
        }
        (self.num_blocks - self.num_free_blocks()) as f64 / self.num_blocks as f64
    }

    /// Host blocks held by swapped requests / all host blocks (0 when there are none).
    pub fn cpu_usage(&self) -> f64 {
        if self.num_cpu_blocks == 0 {
            return 0.0;
        }
        (self.num_cpu_blocks - self.cpu_free.len()) as f64 / self.num_cpu_blocks as f64
    }

    /// Samples `fraction` of block allocations for the residency histograms (0: off).
    pub fn sample_residency(&mut self, fraction: f64) {
        self.residency = BlockResidency::new(fraction);
    }

    /// Residency observations since the last call (empty when sampling is off).
    pub fn take_residency(&mut self) -> ResidencyObservations {
        self.residency.as_mut().map(BlockResidency::take).unwrap_or_default()
    }

    /// Requests holding blocks in either pool (for leak checks).
    pub fn num_owners(&self) -> usize {
        self.tables.len() + self.swapped.len()
    }
}

#[cfg(test)]
mod tests;
