mod fork;
mod model;

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
        prefix_hasher: Default::default(),
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
fn swap_out_is_refused_without_host_room_and_copies_prefix_hits() {
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
    // b shares a's first block (a prefix-cache hit): it swaps out a copy of it, and a keeps it.
    let shared = bm.block_table(&a)[0];
    let pairs = bm.swap_out(&b).expect("room on the host");
    assert_eq!(pairs[0].0, shared);
    assert_eq!(bm.ref_cnt[shared as usize], 1);
    assert_eq!(bm.block_table(&a)[0], shared);
    bm.free_swapped(&b);
    // Then a swaps out; its cached block stays cached, as evictable.
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

#[test]
fn swapped_blocks_are_announced_in_the_cpu_medium_and_withdrawn_when_they_return() {
    use super::super::events::Medium;
    // Device room to spare: swap-in evicts no cached block (no GPU removals in the way).
    let mut bm = BlockManager::with_config(config(8, 4, 2, true));
    bm.record_kv_events();
    let (a, b) = (id("a"), id("b"));
    let tokens = [1, 2, 3, 4, 5];
    run_prompt(&mut bm, &a, &tokens);
    let gpu_stored = bm.take_kv_events();
    let hashes = match gpu_stored.as_slice() {
        [
            KvCacheEvent::BlockStored {
                block_hashes,
                medium: Medium::Gpu,
                ..
            },
        ] => block_hashes.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(hashes.len(), 2, "two full blocks of 2");

    bm.swap_out(&a).expect("room on the host");
    bm.announce_swapped(&a, None, &tokens);
    bm.announce_swapped(&a, None, &tokens); // once only
    assert_eq!(
        bm.take_kv_events(),
        vec![KvCacheEvent::BlockStored {
            block_hashes: hashes.clone(),
            parent_block_hash: None,
            token_ids: vec![1, 2, 3, 4],
            block_size: 2,
            medium: Medium::Cpu,
            lora_id: None,
            lora_name: None,
        }],
        "the same chain, in the host pool; the device copies stay cached (GPU) until evicted"
    );
    bm.swap_in(&a).expect("room on the device");
    assert_eq!(
        bm.take_kv_events(),
        vec![KvCacheEvent::BlockRemoved {
            block_hashes: hashes,
            medium: Medium::Cpu,
        }]
    );

    // Dropped while swapped: withdrawn too. Not announced (no call): nothing to withdraw.
    bm.free(&a);
    run_prompt(&mut bm, &b, &[9, 9, 8, 8]);
    bm.swap_out(&b).expect("room");
    bm.take_kv_events();
    bm.free_swapped(&b);
    assert!(bm.take_kv_events().is_empty());
    run_prompt(&mut bm, &a, &tokens);
    bm.swap_out(&a).expect("room");
    bm.announce_swapped(&a, None, &tokens);
    bm.take_kv_events();
    bm.free_swapped(&a);
    let removed = bm.take_kv_events();
    assert!(
        matches!(removed.as_slice(), [KvCacheEvent::BlockRemoved { medium: Medium::Cpu, block_hashes }] if block_hashes.len() == 2),
        "{removed:?}"
    );
}

#[test]
fn reset_prefix_cache_forgets_every_cached_block_once_none_is_held() {
    let mut bm = BlockManager::with_config(config(4, 0, 2, true));
    bm.record_kv_events();
    let (a, b) = (id("a"), id("b"));
    let prompt = [1, 2, 3, 4, 5];
    run_prompt(&mut bm, &a, &prompt);
    assert_eq!(bm.num_cached_blocks(), 2);
    // Held by a running request: refused, nothing forgotten.
    assert!(!bm.reset_prefix_cache());
    assert_eq!(bm.num_cached_blocks(), 2);
    bm.free(&a);
    bm.take_kv_events();
    assert!(bm.reset_prefix_cache());
    assert_eq!(bm.num_cached_blocks(), 0);
    assert_eq!(bm.num_free_blocks(), 4, "the evictable blocks are plain free ones now");
    assert_eq!(bm.take_kv_events(), vec![KvCacheEvent::AllBlocksCleared]);
    // The same prompt finds nothing cached, and caches again.
    assert_eq!(run_prompt(&mut bm, &b, &prompt), 0);
    assert_eq!(bm.num_cached_blocks(), 2);
}

#[test]
fn reset_prefix_cache_is_refused_while_a_request_is_swapped_out() {
    let mut bm = BlockManager::with_config(config(4, 4, 2, true));
    let a = id("a");
    run_prompt(&mut bm, &a, &[1, 2, 3, 4, 5]);
    bm.swap_out(&a).expect("host room");
    assert!(!bm.reset_prefix_cache());
    bm.free_swapped(&a);
    assert!(bm.reset_prefix_cache());
}
