//! Model-based test of the block manager: random operations against a reference model of
//! what each device and host slot holds.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use proptest::sample::Index;

use super::super::*;
use crate::kv_cache::events::Medium;

fn config(num_gpu_blocks: usize, num_cpu_blocks: usize, block_size: usize, prefix: bool) -> BlockManagerConfig {
    BlockManagerConfig {
        num_gpu_blocks,
        num_cpu_blocks,
        block_size,
        enable_prefix_caching: prefix,
        prefix_hasher: Default::default(),
    }
}

const BS: usize = 2;
const GPU: usize = 12;
const CPU: usize = 6;

#[derive(Debug, Clone)]
enum Op {
    /// A new request with this prompt: prefix lookup only (it holds nothing else yet).
    New(Vec<u32>),
    /// Compute up to `n` more tokens (generating `next` first if all are computed), then maybe
    /// register full blocks.
    Compute {
        who: Index,
        n: usize,
        next: u32,
        cache: bool,
    },
    /// Grow the table past what is computed, writing nothing.
    Reserve {
        who: Index,
        extra: usize,
    },
    Cache {
        who: Index,
    },
    Free {
        who: Index,
    },
    SwapOut {
        who: Index,
    },
    SwapIn {
        who: Index,
    },
    FreeSwapped {
        who: Index,
    },
    /// A new request taking over all but `back` of `leader`'s computed tokens (`fork`).
    Fork {
        leader: Index,
        back: usize,
    },
    /// A step starts: the queued fork copies run.
    RunCopies,
}

fn op() -> impl Strategy<Value = Op> {
    let tok = 0u32..2; // a tiny alphabet, so prefixes collide often
    prop_oneof![
        3 => prop::collection::vec(tok.clone(), 0..9).prop_map(Op::New),
        6 => (any::<Index>(), 1..6usize, tok, any::<bool>())
            .prop_map(|(who, n, next, cache)| Op::Compute { who, n, next, cache }),
        1 => (any::<Index>(), 0..5usize).prop_map(|(who, extra)| Op::Reserve { who, extra }),
        1 => any::<Index>().prop_map(|who| Op::Cache { who }),
        2 => any::<Index>().prop_map(|who| Op::Free { who }),
        2 => any::<Index>().prop_map(|who| Op::SwapOut { who }),
        2 => any::<Index>().prop_map(|who| Op::SwapIn { who }),
        1 => any::<Index>().prop_map(|who| Op::FreeSwapped { who }),
        2 => (any::<Index>(), 0..4usize).prop_map(|(leader, back)| Op::Fork { leader, back }),
        1 => Just(Op::RunCopies),
    ]
}

struct Req {
    id: RequestId,
    tokens: Vec<u32>,
    computed: usize,
    swapped: bool,
}

/// K/V at position p depends on the token there and on every token before it, so a slot's
/// content is modelled as the whole prefix `tokens[..=p]` it was computed from.
type Slots = Vec<[Option<Vec<u32>>; BS]>;

/// What the real KV cache would hold, slot by slot, on the device and on the host.
struct Model {
    reqs: Vec<Req>,
    device: Slots,
    host: Slots,
    next_id: usize,
    /// Copies `fork` queued, (source, destination), as the block manager should hold them.
    pending: Vec<(u32, u32)>,
}

impl Model {
    fn pick(&self, who: &Index, swapped: bool) -> Option<usize> {
        let live: Vec<usize> = (0..self.reqs.len())
            .filter(|&i| self.reqs[i].swapped == swapped)
            .collect();
        (!live.is_empty()).then(|| live[who.index(live.len())])
    }

    /// A step starts: the executor runs the queued copies before anything else.
    fn run_copies(&mut self, bm: &mut BlockManager) {
        let pairs = bm.take_copies();
        assert_eq!(pairs, std::mem::take(&mut self.pending));
        for (source, destination) in pairs {
            self.device[destination as usize] = self.device[source as usize].clone();
        }
    }

    fn apply(&mut self, bm: &mut BlockManager, op: &Op, prefix: bool) {
        match op {
            Op::New(prompt) => {
                let rid = format!("r{}", self.next_id);
                self.next_id += 1;
                let hit = bm.allocate_cached_prefix(&rid, prompt);
                assert_eq!(hit % BS, 0);
                assert!(hit == 0 || hit < prompt.len(), "hit {hit} of {}", prompt.len());
                assert_eq!(bm.block_table(&rid).len(), hit / BS);
                if !prefix {
                    assert_eq!(hit, 0);
                }
                self.reqs.push(Req {
                    id: rid,
                    tokens: prompt.clone(),
                    computed: hit,
                    swapped: false,
                });
            }
            Op::Compute { who, n, next, cache } => {
                let Some(i) = self.pick(who, false) else { return };
                self.run_copies(bm);
                let r = &mut self.reqs[i];
                if r.computed == r.tokens.len() {
                    r.tokens.push(*next);
                }
                let target = (r.computed + n).min(r.tokens.len());
                let before = bm.block_table(&r.id).to_vec();
                let Some(added) = bm.allocate_slots(&r.id, target) else {
                    assert_eq!(bm.block_table(&r.id), before, "all or nothing");
                    return;
                };
                assert_eq!(bm.block_table(&r.id), [before, added].concat());
                for p in r.computed..target {
                    let block = bm.block_table(&r.id)[p / BS];
                    // The invariant: a slot is written only in a block this request alone holds
                    // and that no other request can find in the prefix cache.
                    assert_eq!(bm.ref_cnt[block as usize], 1, "write into shared block {block}");
                    assert!(!bm.cache.is_cached(block), "write into cached block {block}");
                    self.device[block as usize][p % BS] = Some(r.tokens[..=p].to_vec());
                }
                r.computed = target;
                if *cache {
                    bm.cache_full_blocks(&r.id, &r.tokens, r.computed);
                }
            }
            Op::Reserve { who, extra } => {
                let Some(i) = self.pick(who, false) else { return };
                let r = &self.reqs[i];
                let _ = bm.allocate_slots(&r.id, r.computed + extra);
            }
            Op::Cache { who } => {
                let Some(i) = self.pick(who, false) else { return };
                let r = &self.reqs[i];
                bm.cache_full_blocks(&r.id, &r.tokens, r.computed);
            }
            Op::Free { who } => {
                let Some(i) = self.pick(who, false) else { return };
                let r = self.reqs.remove(i);
                // Copies into its blocks are dropped: the blocks may be handed out again.
                let table = bm.block_table(&r.id).to_vec();
                self.pending.retain(|(_, destination)| !table.contains(destination));
                bm.free(&r.id);
            }
            Op::SwapOut { who } => {
                let Some(i) = self.pick(who, false) else { return };
                let r = &mut self.reqs[i];
                let table = bm.block_table(&r.id).to_vec();
                // Shared blocks swap too (as private copies); a block whose fork copy has
                // not run does not.
                let expect = !table.is_empty()
                    && table.len() <= bm.cpu_free.len()
                    && !self.pending.iter().any(|(_, d)| table.contains(d));
                match bm.swap_out(&r.id) {
                    Some(pairs) => {
                        assert!(expect);
                        assert_eq!(pairs.iter().map(|p| p.0).collect::<Vec<_>>(), table);
                        for (d, h) in pairs {
                            self.host[h as usize] = self.device[d as usize].clone();
                        }
                        assert!(bm.block_table(&r.id).is_empty() && bm.is_swapped(&r.id));
                        r.swapped = true;
                    }
                    None => {
                        assert!(!expect);
                        assert_eq!(bm.block_table(&r.id), table);
                    }
                }
            }
            Op::SwapIn { who } => {
                let Some(i) = self.pick(who, true) else { return };
                let r = &mut self.reqs[i];
                let host = bm.swapped[&r.id].host.clone();
                let can = bm.can_swap_in(&r.id);
                assert_eq!(can, host.len() <= bm.num_free_blocks());
                match bm.swap_in(&r.id) {
                    Some(pairs) => {
                        assert!(can);
                        assert_eq!(pairs.iter().map(|p| p.0).collect::<Vec<_>>(), host);
                        assert_eq!(pairs.iter().map(|p| p.1).collect::<Vec<_>>(), bm.block_table(&r.id));
                        for (h, d) in pairs {
                            self.device[d as usize] = self.host[h as usize].clone();
                        }
                        r.swapped = false;
                    }
                    None => assert!(!can && bm.is_swapped(&r.id)),
                }
            }
            Op::FreeSwapped { who } => {
                let Some(i) = self.pick(who, true) else { return };
                bm.free_swapped(&self.reqs.remove(i).id);
            }
            Op::Fork { leader, back } => self.fork(bm, leader, *back),
            Op::RunCopies => self.run_copies(bm),
        }
    }

    fn fork(&mut self, bm: &mut BlockManager, leader: &Index, back: usize) {
        let Some(i) = self.pick(leader, false) else { return };
        let rid = format!("r{}", self.next_id);
        self.next_id += 1;
        let leader = &self.reqs[i];
        let tokens = leader.computed.saturating_sub(back);
        let source = bm.block_table(&leader.id).to_vec();
        let partial = !tokens.is_multiple_of(BS);
        let copy_pending = |b: u32| self.pending.iter().any(|&(_, d)| d == b);
        let expect = tokens > 0 && (!partial || (bm.num_free_blocks() > 0 && !copy_pending(source[tokens / BS])));
        assert_eq!(
            bm.fork(&leader.id, &rid, tokens),
            expect,
            "fork {tokens} of {}",
            leader.id
        );
        let mine = bm.block_table(&rid).to_vec();
        if !expect {
            assert!(mine.is_empty());
            return;
        }
        let full = tokens / BS;
        assert_eq!(mine.len(), tokens.div_ceil(BS));
        assert_eq!(mine[..full], source[..full], "full blocks are shared");
        if partial {
            assert!(!source.contains(&mine[full]), "the partial block is a fresh copy");
            self.pending.push((source[full], mine[full]));
        }
        assert_eq!(bm.copies, self.pending);
        let tokens = leader.tokens[..tokens].to_vec();
        self.reqs.push(Req {
            computed: tokens.len(),
            id: rid,
            tokens,
            swapped: false,
        });
    }

    /// What `block`'s slot `offset` holds once the queued copies have run.
    fn slot(&self, block: u32, offset: usize) -> Option<&[u32]> {
        let from = self
            .pending
            .iter()
            .find(|(_, d)| *d == block)
            .map_or(block, |(s, _)| *s);
        self.device[from as usize][offset].as_deref()
    }

    fn check(&self, bm: &BlockManager) {
        // Device: each block is held, plain free or evictable, exactly one of them.
        let mut holders = vec![0u32; GPU];
        for table in bm.tables.values() {
            for &b in &table.blocks {
                holders[b as usize] += 1;
            }
        }
        for &(source, _) in &self.pending {
            holders[source as usize] += 1;
        }
        assert_eq!(
            holders, bm.ref_cnt,
            "ref counts == tables holding the block + copies to make"
        );
        for b in 0..GPU as u32 {
            let held = bm.ref_cnt[b as usize] > 0;
            let free = bm.free.contains(&b);
            let evictable = bm.cache.lru.values().any(|&x| x == b);
            assert_eq!(held as u8 + free as u8 + evictable as u8, 1, "block {b}");
            assert!(!free || !bm.cache.is_cached(b), "a plain free block caches nothing");
            assert!(!evictable || bm.cache.is_cached(b), "an evictable block is cached");
            assert_eq!(bm.cache.lru_tick[b as usize].is_some(), evictable);
        }
        let in_use = bm.ref_cnt.iter().filter(|&&c| c > 0).count();
        assert_eq!(bm.free.len() + bm.cache.lru.len() + in_use, GPU, "device leak");
        assert_eq!(bm.num_free_blocks() + in_use, GPU);
        assert_eq!(bm.usage(), in_use as f64 / GPU as f64);

        // The cache map and the per-block hashes agree; cached blocks are full.
        assert_eq!(bm.cache.by_hash.len(), bm.cache.hash_of.iter().flatten().count());
        for (&h, &b) in &bm.cache.by_hash {
            assert_eq!(bm.cache.hash_of[b as usize], Some(h));
            assert!(
                self.device[b as usize].iter().all(Option::is_some),
                "cached block {b} is full"
            );
        }

        // Host: each block is free or held by exactly one swapped request.
        let mut host: Vec<u32> = bm.cpu_free.iter().copied().collect();
        host.extend(bm.swapped.values().flat_map(|s| s.host.iter().copied()));
        host.sort_unstable();
        assert_eq!(host, (0..CPU as u32).collect::<Vec<_>>(), "host leak or double use");
        let host_used = CPU - bm.cpu_free.len();
        assert_eq!(bm.cpu_usage(), host_used as f64 / CPU as f64);

        // Every request's computed tokens are where its table says, and a block in two tables
        // is at the same position in both, holding the same full block of tokens.
        let mut seen: HashMap<u32, (usize, &[u32])> = HashMap::new();
        for r in &self.reqs {
            assert_eq!(bm.is_swapped(&r.id), r.swapped);
            let blocks = if r.swapped {
                bm.swapped[&r.id].host.as_slice()
            } else {
                bm.block_table(&r.id)
            };
            assert!(blocks.len() >= r.computed.div_ceil(BS), "{} lost blocks", r.id);
            for p in 0..r.computed {
                let (block, offset) = (blocks[p / BS], p % BS);
                let slot = if r.swapped {
                    self.host[block as usize][offset].as_deref()
                } else {
                    self.slot(block, offset)
                };
                assert_eq!(slot, Some(&r.tokens[..=p]), "{} pos {p}", r.id);
            }
            if r.swapped {
                continue;
            }
            for (i, &b) in blocks.iter().enumerate() {
                let written = &r.tokens[(i * BS).min(r.computed)..((i + 1) * BS).min(r.computed)];
                if let Some(&(j, other)) = seen.get(&b) {
                    assert_eq!((i, written), (j, other), "block {b} shared at different content");
                    assert_eq!(written.len(), BS, "only full blocks are shared");
                }
                seen.insert(b, (i, written));
            }
        }
        assert_eq!(bm.num_owners(), bm.tables.len() + bm.swapped.len());
    }
}

/// Applies KV-cache events to a subscriber's set of hashes, checking each stored hash is
/// the hash of its parent and tokens (what a router replaying them relies on).
fn replay_events(set: &mut HashSet<BlockHash>, events: Vec<KvCacheEvent>) {
    for event in events {
        match event {
            KvCacheEvent::BlockStored {
                block_hashes,
                parent_block_hash,
                token_ids,
                block_size,
                medium,
                ..
            } => {
                assert_eq!(medium, Medium::Gpu, "this model never announces swapped blocks");
                let mut parent = parent_block_hash;
                for (hash, tokens) in block_hashes.into_iter().zip(token_ids.chunks(block_size)) {
                    assert_eq!(
                        hash,
                        BlockHasher::default().hash(parent, tokens),
                        "a stored hash is its parent's and tokens'"
                    );
                    assert!(set.insert(hash), "stored twice without a removal");
                    parent = Some(hash);
                }
            }
            KvCacheEvent::BlockRemoved { block_hashes, medium } => {
                assert_eq!(medium, Medium::Gpu);
                for hash in block_hashes {
                    assert!(set.remove(&hash), "removed a hash never stored");
                }
            }
            KvCacheEvent::AllBlocksCleared => set.clear(),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_operations_keep_the_invariants(
        prefix in any::<bool>(),
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let mut bm = BlockManager::with_config(config(GPU, CPU, BS, prefix));
        let mut model = Model {
            reqs: Vec::new(),
            device: vec![Default::default(); GPU],
            host: vec![Default::default(); CPU],
            next_id: 0,
            pending: Vec::new(),
        };
        bm.record_kv_events();
        let mut subscriber = HashSet::new();
        for op in &ops {
            model.apply(&mut bm, op, prefix);
            model.check(&bm);
            replay_events(&mut subscriber, bm.take_kv_events());
            prop_assert_eq!(&subscriber, &bm.cached_block_hashes().into_iter().collect::<HashSet<_>>());
        }
        if !prefix {
            prop_assert_eq!(bm.num_cached_blocks(), 0);
        }
        model.run_copies(&mut bm);
        for r in std::mem::take(&mut model.reqs) {
            if r.swapped { bm.free_swapped(&r.id) } else { bm.free(&r.id) }
        }
        model.check(&bm);
        prop_assert_eq!(bm.usage(), 0.0);
        prop_assert_eq!(bm.cpu_usage(), 0.0);
        prop_assert_eq!(bm.num_owners(), 0);
        prop_assert_eq!(bm.num_free_blocks(), GPU);
        bm.replace_after_restart(BlockManager::with_config(config(GPU, CPU, BS, prefix)));
        prop_assert_eq!(bm.take_kv_events().pop(), Some(KvCacheEvent::AllBlocksCleared));
        prop_assert_eq!(bm.num_cached_blocks(), 0);
    }
}
