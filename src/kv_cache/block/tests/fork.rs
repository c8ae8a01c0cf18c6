//! `fork`: the choices of one prompt share its KV blocks, and copy the partial one.

use super::super::*;

fn id(name: &str) -> RequestId {
    name.into()
}

fn manager(num_gpu_blocks: usize, num_cpu_blocks: usize, prefix: bool) -> BlockManager {
    BlockManager::with_config(BlockManagerConfig {
        num_gpu_blocks,
        num_cpu_blocks,
        block_size: 4,
        enable_prefix_caching: prefix,
        prefix_hasher: Default::default(),
    })
}

/// A leader that has computed a 10-token prompt: blocks of 4, 4 and 2 tokens.
fn leader_with_prompt(bm: &mut BlockManager) -> (RequestId, Vec<u32>) {
    let leader = id("choice-0");
    bm.allocate_slots(&leader, 10).expect("fits");
    (leader.clone(), bm.block_table(&leader).to_vec())
}

#[test]
fn a_fork_shares_the_full_blocks_and_copies_the_partial_one() {
    let mut bm = manager(16, 0, false);
    let (leader, blocks) = leader_with_prompt(&mut bm);
    let follower = id("choice-1");
    // The follower takes 9 of the 10 tokens and computes the last one itself (to sample).
    assert!(bm.fork(&leader, &follower, 9));
    let table = bm.block_table(&follower).to_vec();
    assert_eq!(table[..2], blocks[..2]);
    assert!(
        !blocks.contains(&table[2]),
        "the partial block is the follower's own copy"
    );
    assert_eq!(bm.ref_cnt[blocks[0] as usize], 2);
    assert_eq!(
        bm.ref_cnt[blocks[2] as usize], 2,
        "the leader, and the copy still to make"
    );
    assert_eq!(bm.take_copies(), vec![(blocks[2], table[2])]);
    assert_eq!(bm.ref_cnt[blocks[2] as usize], 1, "the copy was handed over");
    assert!(bm.take_copies().is_empty());
    // 3 blocks of the leader and 1 copy: a shared block counts once.
    assert_eq!(bm.usage(), 4.0 / 16.0);
    // The follower appends into its copy, then into fresh blocks.
    let added = bm.allocate_slots(&follower, 13).expect("fits");
    assert_eq!(added.len(), 1);
    assert!(!blocks.contains(&added[0]));
}

#[test]
fn four_choices_hold_one_prompt_plus_a_tail_each_and_free_on_the_last_release() {
    let mut bm = manager(16, 0, false);
    let (leader, blocks) = leader_with_prompt(&mut bm);
    let followers: Vec<RequestId> = (1..4).map(|c| format!("choice-{c}")).collect();
    for follower in &followers {
        assert!(bm.fork(&leader, follower, 9));
    }
    assert_eq!(bm.ref_cnt[blocks[0] as usize], 4);
    assert_eq!(bm.take_copies().len(), 3);
    assert_eq!(
        bm.usage(),
        6.0 / 16.0,
        "one prompt (3 blocks) plus three partial copies"
    );
    // The leader finishes first: its shared blocks stay with the followers.
    bm.free(&leader);
    assert_eq!(bm.usage(), 5.0 / 16.0, "only the leader's own partial block is free");
    assert_eq!(bm.ref_cnt[blocks[1] as usize], 3);
    for follower in &followers {
        bm.free(follower);
    }
    assert_eq!((bm.usage(), bm.num_free_blocks(), bm.num_owners()), (0.0, 16, 0));
}

#[test]
fn a_fork_at_a_block_boundary_copies_nothing() {
    let mut bm = manager(8, 0, false);
    let (leader, blocks) = leader_with_prompt(&mut bm);
    assert!(bm.fork(&leader, &id("f"), 8));
    assert_eq!(bm.block_table(&id("f")), &blocks[..2]);
    assert!(bm.take_copies().is_empty());
}

#[test]
fn a_fork_that_cannot_be_made_changes_nothing() {
    let mut bm = manager(3, 0, false);
    let (leader, _) = leader_with_prompt(&mut bm);
    assert!(!bm.fork(&leader, &id("f"), 9), "no free block for the copy");
    assert!(!bm.fork(&leader, &id("f"), 13), "the leader does not cover 13 tokens");
    assert!(!bm.fork(&id("nobody"), &id("f"), 4));
    assert!(!bm.fork(&leader, &id("f"), 0));
    assert!(!bm.fork(&leader, &leader, 4));
    assert!(bm.fork(&leader, &id("f"), 8), "whole blocks need no copy");
    assert!(!bm.fork(&leader, &id("f"), 4), "the follower holds blocks already");
    assert_eq!((bm.ref_cnt.clone(), bm.num_owners()), (vec![2, 2, 1], 2));
}

#[test]
fn the_source_of_a_copy_outlives_its_leader_until_a_step_takes_the_copy() {
    let mut bm = manager(4, 0, false);
    let (leader, blocks) = leader_with_prompt(&mut bm);
    assert!(bm.fork(&leader, &id("f"), 9));
    bm.free(&leader);
    // The leader's partial block is still to be read: nothing may reuse it yet.
    assert_eq!(bm.num_free_blocks(), 0);
    assert_eq!(bm.take_copies(), vec![(blocks[2], bm.block_table(&id("f"))[2])]);
    assert_eq!(bm.num_free_blocks(), 1);
}

#[test]
fn a_follower_that_lets_go_before_its_copy_ran_cancels_it() {
    let mut bm = manager(8, 0, false);
    let (leader, _) = leader_with_prompt(&mut bm);
    assert!(bm.fork(&leader, &id("f"), 9));
    bm.free(&id("f"));
    assert!(
        bm.take_copies().is_empty(),
        "its copy would land in a block handed out again"
    );
    bm.free(&leader);
    assert_eq!((bm.usage(), bm.num_owners()), (0.0, 0));
}

#[test]
fn a_choice_holding_shared_blocks_swaps_out_private_copies_and_the_others_keep_theirs() {
    let mut bm = manager(8, 8, false);
    let (leader, blocks) = leader_with_prompt(&mut bm);
    let follower = id("f");
    assert!(bm.fork(&leader, &follower, 9));
    assert_eq!(bm.swap_out(&follower), None, "its copy has not run yet");
    bm.take_copies();
    let table = bm.block_table(&follower).to_vec();
    // The follower goes: its two shared blocks and its own copy, each to a host block.
    let pairs = bm.swap_out(&follower).expect("room on the host");
    assert_eq!(pairs.iter().map(|p| p.0).collect::<Vec<_>>(), table);
    assert!(bm.is_swapped(&follower));
    assert_eq!(bm.block_table(&leader), blocks, "the leader keeps the prompt");
    assert_eq!(bm.ref_cnt[blocks[0] as usize], 1);
    assert_eq!(bm.ref_cnt[blocks[1] as usize], 1);
    assert_eq!(bm.ref_cnt[table[2] as usize], 0, "the follower's own copy is free");
    assert_eq!((bm.usage(), bm.cpu_usage()), (3.0 / 8.0, 3.0 / 8.0));
    // The leader shares nothing any more and swaps out too; both come back into blocks of
    // their own, and every block returns once both finish.
    let leader_pairs = bm.swap_out(&leader).expect("room on the host");
    assert_eq!(leader_pairs.len(), 3);
    assert_eq!((bm.usage(), bm.cpu_usage()), (0.0, 6.0 / 8.0));
    let back = bm.swap_in(&follower).expect("room on the device");
    assert_eq!(
        back.iter().map(|p| p.0).collect::<Vec<_>>(),
        pairs.iter().map(|p| p.1).collect::<Vec<_>>()
    );
    bm.swap_in(&leader).expect("room on the device");
    let (leader_table, follower_table) = (bm.block_table(&leader).to_vec(), bm.block_table(&follower).to_vec());
    assert!(
        leader_table.iter().all(|b| !follower_table.contains(b)),
        "nothing shared after swap-in"
    );
    assert!(
        leader_table
            .iter()
            .chain(&follower_table)
            .all(|&b| bm.ref_cnt[b as usize] == 1)
    );
    bm.free(&leader);
    bm.free(&follower);
    assert_eq!(
        (bm.usage(), bm.cpu_usage(), bm.num_free_blocks(), bm.num_owners()),
        (0.0, 0.0, 8, 0)
    );
}

#[test]
fn the_leader_swaps_out_while_its_followers_keep_the_shared_prompt_on_the_device() {
    let mut bm = manager(16, 8, false);
    let (leader, blocks) = leader_with_prompt(&mut bm);
    for c in 1..4 {
        assert!(bm.fork(&leader, &id(&format!("choice-{c}")), 9));
    }
    bm.take_copies();
    assert_eq!(bm.ref_cnt[blocks[0] as usize], 4);
    let pairs = bm.swap_out(&leader).expect("room on the host");
    assert_eq!(pairs.iter().map(|p| p.0).collect::<Vec<_>>(), blocks);
    assert_eq!(
        bm.ref_cnt[blocks[0] as usize], 3,
        "three followers still hold the prompt"
    );
    assert_eq!(
        bm.ref_cnt[blocks[2] as usize], 0,
        "only the leader held its partial block"
    );
    // Three choices of 3 blocks sharing 2: 2 + 3 on the device, 3 on the host.
    assert_eq!((bm.usage(), bm.cpu_usage()), (5.0 / 16.0, 3.0 / 8.0));
    bm.swap_in(&leader).expect("room on the device");
    assert_eq!(bm.usage(), 8.0 / 16.0, "the leader's copy no longer shares the prompt");
    for c in 0..4 {
        bm.free(&id(&format!("choice-{c}")));
    }
    assert_eq!((bm.usage(), bm.num_free_blocks(), bm.num_owners()), (0.0, 16, 0));
}

#[test]
fn with_prefix_caching_a_follower_registers_nothing_twice() {
    let mut bm = manager(8, 0, true);
    bm.record_kv_events();
    let leader = id("l");
    let prompt: Vec<u32> = (0..10).collect();
    bm.allocate_slots(&leader, 10).expect("fits");
    bm.cache_full_blocks(&leader, &prompt, 10);
    assert_eq!(bm.take_kv_events().len(), 1, "the leader stored its two full blocks");
    let follower = id("f");
    assert!(bm.fork(&leader, &follower, 9));
    bm.take_copies();
    // The follower computes the 10th token and generates 3 more: one more full block.
    let mut tokens = prompt.clone();
    tokens.extend([50, 51]);
    bm.allocate_slots(&follower, 12).expect("fits");
    bm.cache_full_blocks(&follower, &tokens, 12);
    assert_eq!(bm.num_cached_blocks(), 3);
    let events = bm.take_kv_events();
    assert_eq!(events.len(), 1, "only the follower's own new block: {events:?}");
}

#[test]
fn a_copy_not_yet_made_is_not_forked_again() {
    let mut bm = manager(8, 0, false);
    let (leader, _) = leader_with_prompt(&mut bm);
    assert!(bm.fork(&leader, &id("f"), 9));
    assert!(!bm.fork(&id("f"), &id("g"), 9), "f's partial block holds nothing yet");
    bm.take_copies();
    assert!(bm.fork(&id("f"), &id("g"), 9));
}
