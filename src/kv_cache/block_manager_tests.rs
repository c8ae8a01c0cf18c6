use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use proptest::sample::Index;

use super::*;

fn id(name: &str) -> RequestId {
    name.into()
}

fn config(num_gpu_blocks: usize, num_cpu_blocks: usize, block_size: usize, prefix: bool) -> BlockManagerConfig {
    BlockManagerConfig {
        num_gpu_blocks,
        num_cpu_blocks,
        block_size,
        enable_prefix_caching: prefix,
    }
}

/// Runs a request the way the scheduler will: prefix lookup, allocate the rest, compute it
/// all, register the full blocks. Returns the tokens the prefix cache covered.
fn run_prompt(bm: &mut BlockManager, rid: &RequestId, tokens: &[u32]) -> usize {
    let hit = bm.allocate_cached_prefix(rid, tokens);
    bm.allocate_slots(rid, tokens.len()).expect("fits");
    bm.cache_full_blocks(rid, tokens, tokens.len());
    hit
}

#[test]
fn allocation_is_all_or_nothing_and_free_returns_everything() {
    let mut bm = BlockManager::new(4, 16);
    let (a, b) = (id("a"), id("b"));
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
fn tables_never_share_blocks_without_prefix_caching() {
    let mut bm = BlockManager::new(8, 4);
    let ids: Vec<RequestId> = (0..4).map(|i| format!("r{i}")).collect();
    for rid in &ids {
        assert_eq!(bm.allocate_cached_prefix(rid, &[1; 7]), 0);
        bm.allocate_slots(rid, 7).expect("fits");
        bm.cache_full_blocks(rid, &[1; 7], 7);
    }
    let mut all: Vec<u32> = ids.iter().flat_map(|rid| bm.block_table(rid).to_vec()).collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 8);
    assert_eq!(bm.num_cached_blocks(), 0);
}

#[test]
fn prefix_hit_after_first_request_finished_reuses_full_blocks_only() {
    let mut bm = BlockManager::with_config(config(10, 0, 4, true));
    let (a, b, c) = (id("a"), id("b"), id("c"));
    let prompt_a: Vec<u32> = (0..10).collect(); // 2 full blocks + 2 tokens
    assert_eq!(run_prompt(&mut bm, &a, &prompt_a), 0);
    let table_a = bm.block_table(&a).to_vec();
    assert_eq!(bm.num_cached_blocks(), 2, "the partial last block is never cached");
    bm.free(&a);
    assert_eq!(bm.usage(), 0.0, "a warm cache is not usage");
    assert_eq!(bm.num_free_blocks(), 10);

    let mut prompt_b = prompt_a[..8].to_vec();
    prompt_b.extend([99, 98, 97]);
    assert_eq!(bm.allocate_cached_prefix(&b, &prompt_b), 8);
    assert_eq!(bm.block_table(&b), &table_a[..2]);
    let added = bm.allocate_slots(&b, prompt_b.len()).expect("fits");
    assert_eq!(added.len(), 1);
    assert!(!table_a.contains(&added[0]), "appends go to a fresh block");

    // A second live request shares the same two blocks; its partial block is its own.
    assert_eq!(run_prompt(&mut bm, &c, &prompt_a), 8);
    assert_eq!(&bm.block_table(&c)[..2], &table_a[..2]);
    assert_ne!(bm.block_table(&c)[2], bm.block_table(&b)[2]);
    assert_eq!(bm.ref_cnt[table_a[0] as usize], 2);
    assert_eq!(bm.usage(), 0.4);
    bm.free(&b);
    bm.free(&c);
    assert_eq!(bm.usage(), 0.0);
    assert_eq!(bm.num_owners(), 0);
}

#[test]
fn prefix_hit_leaves_at_least_one_token_to_compute() {
    let mut bm = BlockManager::with_config(config(8, 0, 4, true));
    let prompt: Vec<u32> = (0..8).collect();
    run_prompt(&mut bm, &id("a"), &prompt);
    bm.free(&id("a"));
    assert_eq!(
        bm.allocate_cached_prefix(&id("b"), &prompt),
        4,
        "exactly 2 blocks: reuse 1"
    );
    assert_eq!(bm.allocate_cached_prefix(&id("c"), &[0, 1, 2, 3, 4, 5, 6, 7, 8]), 8);
    assert_eq!(bm.allocate_cached_prefix(&id("d"), &[0, 1, 2, 3]), 0);
    assert_eq!(bm.allocate_cached_prefix(&id("e"), &[]), 0);
    // Holding blocks already: no lookup.
    assert_eq!(bm.allocate_cached_prefix(&id("c"), &[0, 1, 2, 3, 4, 5, 6, 7, 8]), 0);
}

#[test]
fn equal_blocks_after_different_prefixes_are_not_shared() {
    let mut bm = BlockManager::with_config(config(8, 0, 2, true));
    run_prompt(&mut bm, &id("a"), &[1, 1, 2, 2, 5]);
    bm.free(&id("a"));
    // Block 1 holds [2, 2] in both, but its K/V depends on the block before it.
    assert_eq!(bm.allocate_cached_prefix(&id("b"), &[3, 3, 2, 2, 5]), 0);
    assert_eq!(bm.allocate_cached_prefix(&id("c"), &[1, 1, 2, 2, 5]), 4);
}

#[test]
fn eviction_is_lru_and_tail_first() {
    let mut bm = BlockManager::with_config(config(6, 0, 2, true));
    let (a, b) = (id("a"), id("b"));
    let prompt_a = [1, 1, 2, 2, 3, 3]; // 3 full blocks
    let prompt_b = [7, 7];
    run_prompt(&mut bm, &a, &prompt_a);
    run_prompt(&mut bm, &b, &prompt_b);
    let table_a = bm.block_table(&a).to_vec();
    let table_b = bm.block_table(&b).to_vec();
    bm.free(&a);
    bm.free(&b);
    assert_eq!(bm.num_cached_blocks(), 4);

    // Plain free blocks go first, then a's tail, its middle, its head, then b (freed later).
    assert_eq!(bm.allocate_slots(&id("x"), 4).expect("fits"), vec![4, 5]);
    assert_eq!(bm.num_cached_blocks(), 4);
    let order: Vec<u32> = (0..4)
        .map(|i| bm.allocate_slots(&id(&format!("y{i}")), 1).expect("fits")[0])
        .collect();
    assert_eq!(order, vec![table_a[2], table_a[1], table_a[0], table_b[0]]);
    assert_eq!(bm.num_cached_blocks(), 0);
}

#[test]
fn eviction_keeps_the_prefix_that_outlived_its_tail() {
    let mut bm = BlockManager::with_config(config(3, 0, 2, true));
    let prompt = [1, 1, 2, 2, 3, 3, 4]; // 3 full blocks; the last token is never cached
    run_prompt(&mut bm, &id("a"), &prompt[..6]);
    bm.free(&id("a"));
    bm.allocate_slots(&id("x"), 1).expect("fits"); // evicts a's tail
    bm.free(&id("x"));
    assert_eq!(bm.allocate_cached_prefix(&id("b"), &prompt), 4);
    // Pinned blocks left the evictable set: only x's plain block is allocatable.
    assert_eq!(bm.num_free_blocks(), 1);
}

#[test]
fn swap_round_trip_moves_blocks_between_pools() {
    let mut bm = BlockManager::with_config(config(4, 4, 2, false));
    let (a, b) = (id("a"), id("b"));
    let device = bm.allocate_slots(&a, 5).expect("fits");
    assert_eq!(device.len(), 3);
    let out = bm.swap_out(&a).expect("room on host");
    assert_eq!(out.iter().map(|p| p.0).collect::<Vec<_>>(), device);
    let host: Vec<u32> = out.iter().map(|p| p.1).collect();
    assert_eq!(host, vec![0, 1, 2]);
    assert!(bm.is_swapped(&a));
    assert!(bm.block_table(&a).is_empty());
    assert_eq!((bm.usage(), bm.cpu_usage()), (0.0, 0.75));
    assert_eq!(bm.num_owners(), 1);

    // Another request takes device blocks; a no longer fits until it leaves.
    bm.allocate_slots(&b, 4).expect("fits");
    assert!(!bm.can_swap_in(&a));
    assert_eq!(bm.swap_in(&a), None);
    assert!(bm.is_swapped(&a));
    bm.free(&b);

    assert!(bm.can_swap_in(&a));
    let back = bm.swap_in(&a).expect("room on device");
    assert_eq!(back.iter().map(|p| p.0).collect::<Vec<_>>(), host);
    assert_eq!(back.iter().map(|p| p.1).collect::<Vec<_>>(), bm.block_table(&a));
    assert!(!bm.is_swapped(&a));
    assert_eq!((bm.usage(), bm.cpu_usage()), (0.75, 0.0));
    bm.free(&a);
    assert_eq!((bm.usage(), bm.num_owners()), (0.0, 0));
}

#[test]
fn swap_out_is_refused_without_host_room_or_with_shared_blocks() {
    let mut bm = BlockManager::with_config(config(8, 2, 2, true));
    let (a, b) = (id("a"), id("b"));
    bm.allocate_slots(&a, 5).expect("fits");
    assert_eq!(bm.swap_out(&a), None, "3 blocks, 2 host blocks");
    assert_eq!(bm.block_table(&a).len(), 3);
    assert_eq!(bm.cpu_usage(), 0.0);
    assert_eq!(bm.swap_out(&id("nobody")), None);
    bm.free(&a);

    let prompt = [1, 1, 2];
    run_prompt(&mut bm, &a, &prompt);
    assert_eq!(run_prompt(&mut bm, &b, &prompt), 2);
    assert_eq!(bm.swap_out(&b), None, "b shares a's first block");
    assert_eq!(bm.swap_out(&a), None, "and a shares it with b");
    bm.free(&b);
    // Alone again, a swaps out; its cached block stays cached, as evictable.
    assert!(bm.swap_out(&a).is_some());
    assert_eq!(bm.num_cached_blocks(), 1);
    assert_eq!(bm.allocate_cached_prefix(&b, &prompt), 2);
}

#[test]
fn abort_while_swapped_frees_host_blocks() {
    let mut bm = BlockManager::with_config(config(4, 4, 2, false));
    let a = id("a");
    bm.allocate_slots(&a, 4).expect("fits");
    bm.swap_out(&a).expect("room on host");
    bm.free(&a); // device-only: the host blocks stay
    assert_eq!(bm.cpu_usage(), 0.5);
    bm.free_swapped(&a);
    assert!(!bm.is_swapped(&a));
    assert_eq!((bm.cpu_usage(), bm.usage(), bm.num_owners()), (0.0, 0.0, 0));
    assert_eq!(bm.swap_in(&a), None);
}

#[test]
fn empty_pools_report_zero_usage() {
    let bm = BlockManager::with_config(config(0, 0, 4, true));
    assert_eq!((bm.usage(), bm.cpu_usage(), bm.num_cpu_blocks()), (0.0, 0.0, 0));
}

// ---------------------------------------------------------------------------------------------
// Model-based test: random operations against a reference model of what each slot holds.

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
}

impl Model {
    fn pick(&self, who: &Index, swapped: bool) -> Option<usize> {
        let live: Vec<usize> = (0..self.reqs.len())
            .filter(|&i| self.reqs[i].swapped == swapped)
            .collect();
        (!live.is_empty()).then(|| live[who.index(live.len())])
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
                bm.free(&self.reqs.remove(i).id);
            }
            Op::SwapOut { who } => {
                let Some(i) = self.pick(who, false) else { return };
                let r = &mut self.reqs[i];
                let table = bm.block_table(&r.id).to_vec();
                let expect = !table.is_empty()
                    && table.len() <= bm.cpu_free.len()
                    && table.iter().all(|&b| bm.ref_cnt[b as usize] == 1);
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
                let host = bm.swapped[&r.id].clone();
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
        }
    }

    fn check(&self, bm: &BlockManager) {
        // Device: each block is held, plain free or evictable, exactly one of them.
        let mut holders = vec![0u32; GPU];
        for table in bm.tables.values() {
            for &b in &table.blocks {
                holders[b as usize] += 1;
            }
        }
        assert_eq!(holders, bm.ref_cnt, "ref counts == tables holding the block");
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
        host.extend(bm.swapped.values().flatten());
        host.sort_unstable();
        assert_eq!(host, (0..CPU as u32).collect::<Vec<_>>(), "host leak or double use");
        let host_used = CPU - bm.cpu_free.len();
        assert_eq!(bm.cpu_usage(), host_used as f64 / CPU as f64);

        // Every request's computed tokens are where its table says, and a block in two tables
        // is at the same position in both, holding the same full block of tokens.
        let mut seen: HashMap<u32, (usize, &[u32])> = HashMap::new();
        for r in &self.reqs {
            assert_eq!(bm.is_swapped(&r.id), r.swapped);
            let (blocks, slots) = if r.swapped {
                (bm.swapped[&r.id].as_slice(), &self.host)
            } else {
                (bm.block_table(&r.id), &self.device)
            };
            assert!(blocks.len() >= r.computed.div_ceil(BS), "{} lost blocks", r.id);
            for p in 0..r.computed {
                let slot = slots[blocks[p / BS] as usize][p % BS].as_deref();
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
fn replay_events(set: &mut HashSet<u64>, events: Vec<KvCacheEvent>) {
    for event in events {
        match event {
            KvCacheEvent::BlockStored {
                block_hashes,
                parent_block_hash,
                token_ids,
                block_size,
            } => {
                let mut parent = parent_block_hash;
                for (hash, tokens) in block_hashes.into_iter().zip(token_ids.chunks(block_size)) {
                    assert_eq!(
                        hash,
                        hash_block(parent, tokens),
                        "a stored hash is its parent's and tokens'"
                    );
                    assert!(set.insert(hash), "stored twice without a removal");
                    parent = Some(hash);
                }
            }
            KvCacheEvent::BlockRemoved { block_hashes } => {
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
