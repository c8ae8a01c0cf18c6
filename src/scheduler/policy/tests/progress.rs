//! Liveness of the scheduler: no request holds up the queue. Property tests over random
//! request mixes, cache shapes, limits and modes (with `max_model_len` no larger than the
//! cache, as the server guarantees), and the regression for issue 11: a request as long as
//! a 24 × 16 cache, with others queued behind it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::sample::Index;

use super::super::test_driver::{Driver, EOS, finish_reason, request, run};
use super::super::{PreemptionMode, Scheduler, SchedulerConfig};
use crate::engine::events::TokenEvent;
use crate::engine::types::FinishReason;
use crate::executor::fake::{FakeBehaviour, FakeExecutor};
use crate::scheduler::request::NewRequest;

/// One request of a case: when it arrives (in driver steps), its lengths, and which of a
/// few shared openings its prompt starts with (so prefix caching has something to find).
#[derive(Debug, Clone)]
struct Arrival {
    step: usize,
    prompt_len: usize,
    max_tokens: u32,
    opening: u32,
}

#[derive(Debug, Clone)]
struct Case {
    config: SchedulerConfig,
    arrivals: Vec<Arrival>,
}

fn preemption() -> impl Strategy<Value = (PreemptionMode, usize)> {
    prop_oneof![
        Just((PreemptionMode::Recompute, 0)),
        Just((PreemptionMode::Swap, 0)),
        (1usize..=48).prop_map(|host| (PreemptionMode::Swap, host)),
    ]
}

/// Caches of 2 to 512 tokens; `max_model_len` anywhere from 2 to the cache's tokens; prompts
/// shorter than `max_model_len` (what the API lets through); `max_tokens` up to
/// `max_model_len`, so some requests end at the context rather than at their limit.
fn case() -> impl Strategy<Value = Case> {
    (
        1usize..=16,
        1usize..=32,
        any::<Index>(),
        1usize..=6,
        1usize..=64,
        preemption(),
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec((0usize..40, any::<Index>(), any::<Index>(), 0u32..3), 1..=10),
    )
        .prop_filter("a cache of at least two tokens", |c| c.0 * c.1 >= 2)
        .prop_map(
            |(block_size, num_gpu_blocks, len, max_num_seqs, budget, (mode, host), prefix, async_scheduling, raw)| {
                let cache_tokens = block_size * num_gpu_blocks;
                let max_model_len = 2 + len.index(cache_tokens - 1);
                let arrivals = raw
                    .into_iter()
                    .map(|(step, prompt, max_tokens, opening)| Arrival {
                        step,
                        prompt_len: 1 + prompt.index(max_model_len - 1),
                        max_tokens: 1 + max_tokens.index(max_model_len) as u32,
                        opening,
                    })
                    .collect();
                let config = SchedulerConfig {
                    max_num_seqs,
                    max_num_batched_tokens: budget,
                    max_model_len,
                    max_waiting: 1000,
                    num_gpu_blocks,
                    block_size,
                    num_cpu_blocks: host,
                    preemption_mode: mode,
                    enable_prefix_caching: prefix,
                    prefix_hasher: Default::default(),
                    async_scheduling,
                    kv_block_metrics_sample: 0.0,
                    step_cost: None,
                    sharing: Default::default(),
                    max_loras: 1,
                };
                Case { config, arrivals }
            },
        )
}

fn new_request(id: &str, arrival: &Arrival) -> NewRequest {
    let mut r = request(id, arrival.prompt_len, arrival.max_tokens);
    for (k, token) in r.prompt_token_ids.iter_mut().enumerate().take(12) {
        *token = arrival.opening * 13 + k as u32;
    }
    r
}

/// Runs a case to the end and checks, step by step and at the end:
/// - progress: while any request is waiting, running or swapped, some step computes a token
///   (prompt, recompute or decode) at least every `max_num_seqs + 2` driver steps. A plain
///   schedule that returns nothing while work is queued would leave the actor asleep for
///   good; it counts as a step without progress;
/// - every request ends, by length, with exactly its tokens, within
///   `2 · requests · (max_model_len + 2)` steps of its arrival (the oldest running request is
///   never preempted and computes at least one token per step, and each request computes at
///   most `max_model_len` tokens per admission);
/// - afterwards no block is held, on the device or the host (cached free blocks may stay).
fn check(case: Case) -> Result<(), TestCaseError> {
    let cfg = case.config.clone();
    let stall_bound = cfg.max_num_seqs + 2;
    let finish_bound = 2 * case.arrivals.len() * (cfg.max_model_len + 2);
    let last_arrival = case.arrivals.iter().map(|a| a.step).max().unwrap_or(0);
    let mut s = Scheduler::new(cfg.clone(), vec![EOS]);
    let mut driver = Driver::new();
    let mut tokens: HashMap<String, Vec<u32>> = HashMap::new();
    let mut finished: HashMap<String, (FinishReason, usize)> = HashMap::new();
    let mut steps_without_progress = 0;
    let start = Instant::now();
    for step in 0..=last_arrival + finish_bound {
        let t = start + Duration::from_millis(step as u64);
        for (i, arrival) in case.arrivals.iter().enumerate().filter(|(_, a)| a.step == step) {
            let added = s.add(new_request(&format!("r{i}"), arrival), t);
            prop_assert!(added.is_ok(), "r{} refused: {:?}", i, added);
        }
        if !s.has_work() && driver.in_flight.is_empty() {
            if step >= last_arrival {
                break;
            }
            continue;
        }
        let result = driver.step(&mut s, t);
        let progressed = result
            .as_ref()
            .is_some_and(|r| r.iteration_stats.num_batched_tokens > 0);
        steps_without_progress = if progressed { 0 } else { steps_without_progress + 1 };
        prop_assert!(
            steps_without_progress <= stall_bound,
            "no token computed for {} steps at step {}: {:?}",
            steps_without_progress,
            step,
            s.make_stats_snapshot()
        );
        for (id, event) in result.map(|r| r.events).unwrap_or_default() {
            match event {
                TokenEvent::Token { id: token, .. } => tokens.entry(id).or_default().push(token),
                TokenEvent::Finished { reason, .. } => {
                    prop_assert!(
                        finished.insert(id.clone(), (reason, step)).is_none(),
                        "{} finished twice",
                        id
                    );
                }
                TokenEvent::Failed { error } => prop_assert!(false, "{} failed: {}", id, error),
                TokenEvent::PromptLogprobs(_) => prop_assert!(false, "{} sent prompt logprobs unasked", id),
            }
        }
    }
    prop_assert!(
        !s.has_work() && driver.in_flight.is_empty(),
        "work left after the bound"
    );
    for (i, arrival) in case.arrivals.iter().enumerate() {
        let id = format!("r{i}");
        let Some(&(reason, at)) = finished.get(&id) else {
            return Err(TestCaseError::fail(format!("{id} never finished")));
        };
        prop_assert!(
            at - arrival.step <= finish_bound,
            "{} took {} steps",
            id,
            at - arrival.step
        );
        prop_assert_eq!(reason, FinishReason::Length, "{}", id);
        let expected = (arrival.max_tokens as usize).min(cfg.max_model_len - arrival.prompt_len);
        let first = new_request(&id, arrival)
            .prompt_token_ids
            .last()
            .copied()
            .expect("prompt")
            + 1;
        let want: Vec<u32> = (first..).take(expected).collect();
        prop_assert_eq!(
            tokens.get(&id).map_or(&[][..], Vec::as_slice),
            &want[..],
            "{}'s tokens",
            id
        );
    }
    prop_assert_eq!(s.num_block_owners(), 0);
    let stats = s.make_stats();
    prop_assert_eq!((stats.kv_cache_usage, stats.cpu_cache_usage), (0.0, 0.0));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(384))]

    #[test]
    fn no_request_holds_up_the_queue(case in case()) {
        check(case)?;
    }
}

/// Tight caches, many requests at once: preemption on nearly every step.
fn crowded_case() -> impl Strategy<Value = Case> {
    (case(), 2usize..=6).prop_map(|(mut case, blocks)| {
        let cache_tokens = blocks * case.config.block_size;
        case.config.num_gpu_blocks = blocks;
        case.config.max_model_len = case.config.max_model_len.clamp(2, cache_tokens);
        let max_model_len = case.config.max_model_len;
        for arrival in &mut case.arrivals {
            arrival.step %= 4;
            arrival.prompt_len = 1 + (arrival.prompt_len - 1) % (max_model_len - 1);
        }
        case
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn no_request_holds_up_a_crowded_queue(case in crowded_case()) {
        check(case)?;
    }
}

/// Issue 11's cache: 24 blocks of 16 tokens, 384 tokens in all.
fn cache_of_384(mode: PreemptionMode, max_model_len: usize) -> SchedulerConfig {
    SchedulerConfig {
        max_num_seqs: 8,
        max_num_batched_tokens: 256,
        max_model_len,
        max_waiting: 1000,
        num_gpu_blocks: 24,
        block_size: 16,
        num_cpu_blocks: if mode == PreemptionMode::Swap { 24 } else { 0 },
        preemption_mode: mode,
        enable_prefix_caching: false,
        prefix_hasher: Default::default(),
        async_scheduling: false,
        kv_block_metrics_sample: 0.0,
        step_cost: None,
        sharing: Default::default(),
        max_loras: 1,
    }
}

/// Adds "early" (running when the long one comes), "long" (`max_tokens: 600, ignore_eos`:
/// it runs to the end of the context) and four requests queued behind it; runs them all.
fn run_long_request_with_a_queue(config: SchedulerConfig) -> (Scheduler, HashMap<String, Vec<TokenEvent>>) {
    let mut s = Scheduler::new(config, vec![EOS]);
    let mut fake = FakeExecutor::new(1000, FakeBehaviour::default());
    s.add(request("early", 64, 200), Instant::now()).expect("admitted");
    let mut long = request("long", 16, 600);
    std::sync::Arc::make_mut(&mut long.params).ignore_eos = true;
    s.add(long, Instant::now()).expect("admitted");
    for i in 0..4 {
        s.add(request(&format!("queued{i}"), 32, 64), Instant::now())
            .expect("admitted");
    }
    let events = run(&mut s, &mut fake);
    (s, events)
}

fn generated(events: &[TokenEvent]) -> usize {
    events.iter().filter(|e| matches!(e, TokenEvent::Token { .. })).count()
}

#[test]
fn a_request_as_long_as_the_cache_does_not_hold_up_the_queue() {
    for mode in [PreemptionMode::Recompute, PreemptionMode::Swap] {
        let (mut s, events) = run_long_request_with_a_queue(cache_of_384(mode, 384));
        assert_eq!(finish_reason(&events["long"]), FinishReason::Length, "{mode:?}");
        assert_eq!(
            generated(&events["long"]),
            384 - 16,
            "{mode:?}: to the end of the context"
        );
        assert_eq!(generated(&events["early"]), 200, "{mode:?}");
        for i in 0..4 {
            assert_eq!(generated(&events[&format!("queued{i}")]), 64, "{mode:?}");
        }
        assert_eq!(s.num_block_owners(), 0);
        assert_eq!(s.make_stats().kv_cache_usage, 0.0);
    }
}

/// Before the fix, a `max_model_len` beyond the cache let "long" grow to 385 tokens, preempt
/// itself and never fit again: `schedule` returned nothing while work was queued.
#[test]
fn a_max_model_len_beyond_the_cache_is_cut_to_the_cache() {
    let (s, events) = run_long_request_with_a_queue(cache_of_384(PreemptionMode::Recompute, 2048));
    assert_eq!(s.config().max_model_len, 384);
    assert_eq!(finish_reason(&events["long"]), FinishReason::Length);
    assert_eq!(generated(&events["long"]), 384 - 16);
    for i in 0..4 {
        assert_eq!(finish_reason(&events[&format!("queued{i}")]), FinishReason::Length);
    }
}
