//! A prompt computed once per body: sibling choices fork the first one's prompt.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use super::super::test_driver::{Driver, EOS, config, request};
use super::super::{PreemptionMode, Scheduler, SchedulerConfig};
use crate::engine::events::TokenEvent;
use crate::engine::types::FinishReason;
use crate::scheduler::request::NewRequest;

/// `n` choices of one prompt, as the API's fan-out builds them: one `Arc` of params.
fn choices(body: &str, prompt_len: usize, max_tokens: u32, n: usize) -> Vec<NewRequest> {
    let first = request(&format!("{body}-0"), prompt_len, max_tokens);
    (0..n)
        .map(|c| NewRequest {
            id: format!("{body}-{c}"),
            ..first.clone()
        })
        .collect()
}

/// What a run showed, summed over its steps.
#[derive(Debug, Default)]
struct Observed {
    prefill_computed: u64,
    prompt_tokens: u64,
    prompt_tokens_cached: u64,
    peak_usage: f64,
    preemptions: u64,
    tokens: HashMap<String, Vec<u32>>,
    finished: HashMap<String, (FinishReason, usize)>,
}

fn run_all(s: &mut Scheduler, driver: &mut Driver) -> Observed {
    let mut seen = Observed::default();
    let mut steps = 0;
    while s.has_work() || !driver.in_flight.is_empty() {
        steps += 1;
        assert!(steps < 10_000, "no progress");
        let Some(step) = driver.step(s, Instant::now()) else {
            continue;
        };
        let it = &step.iteration_stats;
        seen.prefill_computed += it.num_prefill_tokens_computed;
        seen.prompt_tokens += it.num_prompt_tokens;
        seen.prompt_tokens_cached += it.num_prompt_tokens_cached;
        seen.peak_usage = seen.peak_usage.max(step.scheduler_stats.kv_cache_usage);
        seen.preemptions += step.scheduler_stats.num_preemptions;
        for (id, event) in step.events {
            match event {
                TokenEvent::Token { id: token, .. } => seen.tokens.entry(id).or_default().push(token),
                TokenEvent::Finished { reason, usage, .. } => {
                    seen.finished.insert(id, (reason, usage.cached_prompt_tokens));
                }
                _ => {}
            }
        }
    }
    assert_eq!(s.num_block_owners(), 0, "every block given back");
    assert_eq!(s.make_stats().kv_cache_usage, 0.0);
    seen
}

fn scheduler(config: SchedulerConfig, requests: Vec<NewRequest>) -> Scheduler {
    let mut s = Scheduler::new(config, vec![EOS]);
    for r in requests {
        s.add(r, Instant::now()).expect("admitted");
    }
    s
}

/// Runs to the end; the prefill tokens computed and the fork copies sent, each batch once.
fn copies_in(s: &mut Scheduler, driver: &mut Driver) -> (Observed, usize) {
    let mut copies = 0;
    let mut seen = Observed::default();
    let mut steps = 0;
    while s.has_work() || !driver.in_flight.is_empty() {
        steps += 1;
        assert!(steps < 10_000, "no progress");
        let before: Vec<_> = driver.in_flight.iter().map(Arc::as_ptr).collect();
        let step = driver.step(s, Instant::now());
        for batch in &driver.in_flight {
            if !before.contains(&Arc::as_ptr(batch)) {
                copies += batch.copy_blocks.len();
            }
        }
        if let Some(step) = step {
            seen.prefill_computed += step.iteration_stats.num_prefill_tokens_computed;
        }
    }
    (seen, copies)
}

#[test]
fn four_choices_compute_their_prompt_once_with_the_prefix_cache_off_or_on() {
    for caching in [false, true] {
        let cfg = SchedulerConfig {
            enable_prefix_caching: caching,
            prefix_hasher: Default::default(),
            ..config(256)
        };
        // 150 tokens of 4-token blocks: 37 full blocks hold the first 148, the 38th the rest.
        let mut s = scheduler(cfg, choices("body", 150, 5, 4));
        let seen = run_all(&mut s, &mut Driver::new());
        // One prefill, plus the last prompt token each sibling computes for its own sample.
        assert_eq!(seen.prefill_computed, 150 + 3, "caching {caching}");
        // Each choice counts its prompt; the three forked ones took 149 tokens each from
        // the first, counted as cached: 150 + 3 computed, as above.
        assert_eq!(seen.prompt_tokens, 4 * 150);
        assert_eq!(seen.prompt_tokens_cached, 3 * 149);
        assert_eq!(seen.prompt_tokens - seen.prompt_tokens_cached, seen.prefill_computed);
        let leader = &seen.tokens["body-0"];
        assert_eq!(leader.len(), 5);
        for c in 0..4 {
            let id = format!("body-{c}");
            assert_eq!(&seen.tokens[&id], leader, "greedy choices agree");
            let (reason, cached) = seen.finished[&id];
            assert_eq!(reason, FinishReason::Length);
            assert_eq!(cached, if c == 0 { 0 } else { 149 }, "{id}");
        }
        // At most: the prompt plus 5 tokens (39 blocks), 3 more partial blocks of 3 and 2
        // tails of one block each: 39 + 3 * 2 = 45, not 4 × 39.
        assert!(seen.peak_usage <= 45.0 / 256.0, "peak {}", seen.peak_usage * 256.0);
    }
}

#[test]
fn with_async_scheduling_each_sibling_gets_one_copy_of_the_partial_block() {
    let cfg = SchedulerConfig {
        async_scheduling: true,
        ..config(256)
    };
    let mut s = scheduler(cfg, choices("body", 150, 5, 4));
    let (seen, copies) = copies_in(&mut s, &mut Driver::new());
    assert_eq!(seen.prefill_computed, 153);
    assert_eq!(copies, 3);
    assert_eq!(s.num_block_owners(), 0);
}

#[test]
fn a_prompt_ending_on_a_block_boundary_plus_one_needs_no_copy() {
    // 149 tokens: the siblings take 148, all in full blocks, and start a block of their own.
    let mut s = scheduler(config(256), choices("body", 149, 2, 3));
    let (seen, copies) = copies_in(&mut s, &mut Driver::new());
    assert_eq!((seen.prefill_computed, copies), (149 + 2, 0));
}

#[test]
fn a_sibling_that_arrives_after_the_prefill_forks_the_running_one() {
    let mut all = choices("body", 40, 30, 2);
    let late = all.pop().expect("two");
    let mut s = scheduler(config(256), all);
    let mut driver = Driver::new();
    for _ in 0..3 {
        driver.step(&mut s, Instant::now());
    }
    s.add(late, Instant::now()).expect("admitted");
    let seen = run_all(&mut s, &mut driver);
    // The fake samples the last token plus one: the prompt ends in 39.
    assert_eq!(seen.tokens["body-1"], (40..70).collect::<Vec<u32>>());
    assert_eq!(
        seen.finished["body-1"].1, 39,
        "it took 39 of 40 tokens from its sibling"
    );
}

#[test]
fn other_bodies_with_the_same_prompt_compute_it_themselves() {
    let mut requests = choices("a", 60, 2, 1);
    requests.extend(choices("b", 60, 2, 1));
    let mut s = scheduler(config(256), requests);
    let seen = run_all(&mut s, &mut Driver::new());
    assert_eq!((seen.prefill_computed, seen.prompt_tokens), (120, 120));
}

#[test]
fn preempting_choices_that_share_a_prompt_frees_each_block_once() {
    for mode in [PreemptionMode::Recompute, PreemptionMode::Swap] {
        // 4 choices of 30 prompt + 40 output tokens: 18 blocks for the first, 7 of them
        // shared and 11 more for each other one: 51 blocks. 40 force preemptions.
        let cfg = SchedulerConfig {
            preemption_mode: mode,
            num_cpu_blocks: 64,
            ..config(40)
        };
        let mut s = scheduler(cfg, choices("body", 30, 40, 4));
        let seen = run_all(&mut s, &mut Driver::new());
        let leader = &seen.tokens["body-0"];
        for c in 0..4 {
            let id = format!("body-{c}");
            assert_eq!(&seen.tokens[&id], leader, "{mode:?} {id}");
            assert_eq!(seen.finished[&id].0, FinishReason::Length);
        }
        assert!(seen.preemptions > 0, "{mode:?}: no pressure");
        assert_eq!(s.make_stats().cpu_cache_usage, 0.0);
    }
}

#[test]
fn an_aborted_sibling_gives_its_forked_blocks_back() {
    let mut s = scheduler(config(256), choices("body", 50, 3, 3));
    let mut driver = Driver::new();
    // The leader's prefill (50 tokens) fits one step; the siblings fork at its end.
    driver.step(&mut s, Instant::now());
    s.abort(
        &"body-2".to_string(),
        crate::engine::messages::AbortReason::ClientGone,
        Instant::now(),
    )
    .expect("known");
    let seen = run_all(&mut s, &mut driver);
    assert_eq!(seen.finished["body-1"].0, FinishReason::Length);
    assert!(!seen.tokens.contains_key("body-2"));
}
