//! Scheduler tests driven directly with the fake executor: no actors, no model.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod fairness;
mod lora;
mod progress;
mod prompt_sharing;
mod stats;

use super::test_driver::{Driver, EOS, config, finish_reason, request, run};
use super::{PreemptionMode, Scheduler, SchedulerConfig};
use crate::engine::events::{EngineError, TokenEvent};
use crate::engine::messages::AbortReason;
use crate::engine::types::FinishReason;
use crate::executor::Executor;
use crate::executor::fake::{FakeBehaviour, FakeExecutor};

#[test]
fn requests_finish_by_length_and_free_their_blocks() {
    let mut s = Scheduler::new(config(64), vec![EOS]);
    let mut fake = FakeExecutor::new(1000, FakeBehaviour::default());
    for i in 0..5 {
        s.add(request(&format!("r{i}"), 10 + i, 7), Instant::now())
            .expect("admitted");
    }
    let events = run(&mut s, &mut fake);
    for i in 0..5 {
        let e = &events[&format!("r{i}")];
        assert_eq!(finish_reason(e), FinishReason::Length);
        assert_eq!(e.iter().filter(|e| matches!(e, TokenEvent::Token { .. })).count(), 7);
    }
    assert_eq!(s.num_block_owners(), 0);
    assert_eq!(s.make_stats().kv_cache_usage, 0.0);
}

#[test]
fn eos_stops_unless_ignored() {
    let mut s = Scheduler::new(config(64), vec![EOS]);
    let mut fake = FakeExecutor::new(1000, FakeBehaviour::default());
    // The fake emits last + 1: a prompt ending in EOS - 1 makes the first token EOS.
    let mut r = request("eos", 3, 10);
    r.prompt_token_ids = vec![1, 2, EOS - 1];
    s.add(r, Instant::now()).expect("admitted");
    let mut r = request("ignore", 3, 4);
    r.prompt_token_ids = vec![1, 2, EOS - 1];
    std::sync::Arc::make_mut(&mut r.params).ignore_eos = true;
    s.add(r, Instant::now()).expect("admitted");
    let events = run(&mut s, &mut fake);
    assert_eq!(finish_reason(&events["eos"]), FinishReason::Stop);
    assert_eq!(events["eos"].len(), 2);
    assert_eq!(finish_reason(&events["ignore"]), FinishReason::Length);
    assert_eq!(events["ignore"].len(), 5);
}

#[test]
fn long_prompts_are_prefilled_in_chunks_within_the_token_budget() {
    let mut s = Scheduler::new(config(64), vec![EOS]);
    s.add(request("long", 150, 2), Instant::now()).expect("admitted");
    let first = s.schedule(Instant::now());
    assert_eq!(first.num_tokens(), 64);
    assert!(!first.sequences[0].sample);
    let mut fake = FakeExecutor::new(1000, FakeBehaviour::default());
    let out = fake.execute(&first).expect("runs");
    s.update_from_output(&first, out, Instant::now());
    let events = run(&mut s, &mut fake);
    assert_eq!(finish_reason(&events["long"]), FinishReason::Length);
}

#[test]
fn running_out_of_blocks_preempts_the_newest_and_everything_still_finishes() {
    // 12 blocks of 4 tokens = 48 slots; four requests of 10 + 20 tokens need 32 each.
    let mut s = Scheduler::new(config(12), vec![EOS]);
    let mut fake = FakeExecutor::new(1000, FakeBehaviour::default());
    for i in 0..4 {
        s.add(request(&format!("r{i}"), 10, 20), Instant::now())
            .expect("admitted");
    }
    let mut preemptions = 0;
    let mut events: HashMap<String, Vec<TokenEvent>> = HashMap::new();
    while s.has_work() {
        let batch = s.schedule(Instant::now());
        let out = fake.execute(&batch).expect("runs");
        let step = s.update_from_output(&batch, out, Instant::now());
        preemptions += step.scheduler_stats.num_preemptions;
        for (id, e) in step.events {
            events.entry(id).or_default().push(e);
        }
    }
    assert!(preemptions > 0, "the cache is too small for all four at once");
    for i in 0..4 {
        let e = &events[&format!("r{i}")];
        assert_eq!(finish_reason(e), FinishReason::Length);
        // Recompute must not duplicate or lose tokens: the fake's output is a pure function
        // of the previous token, so the sequence is 10, 11, 12, ...
        let tokens: Vec<u32> = e
            .iter()
            .filter_map(|e| match e {
                TokenEvent::Token { id, .. } => Some(*id),
                _ => None,
            })
            .collect();
        assert_eq!(tokens, (10..30).collect::<Vec<u32>>());
    }
    assert_eq!(s.num_block_owners(), 0);
}

#[test]
fn admission_refuses_a_full_queue_and_a_prompt_that_never_fits() {
    let mut cfg = config(4);
    cfg.max_waiting = 2;
    let mut s = Scheduler::new(cfg, vec![EOS]);
    assert!(matches!(
        s.add(request("huge", 16, 1), Instant::now()),
        Err(EngineError::TooLong { .. })
    ));
    s.add(request("a", 4, 1), Instant::now()).expect("admitted");
    s.add(request("b", 4, 1), Instant::now()).expect("admitted");
    assert!(matches!(
        s.add(request("c", 4, 1), Instant::now()),
        Err(EngineError::Overloaded { .. })
    ));
}

#[test]
fn preempted_requests_do_not_count_against_max_waiting() {
    // 12 blocks of 4 tokens: three requests of 10 + 20 tokens are admitted (3 blocks
    // each) but cannot all grow to 8 blocks: one is preempted back to the queue.
    let mut cfg = config(12);
    cfg.max_waiting = 1;
    let mut s = Scheduler::new(cfg, vec![EOS]);
    let mut fake = FakeExecutor::new(1000, FakeBehaviour::default());
    let mut preemptions = 0;
    for i in 0..3 {
        s.add(request(&format!("r{i}"), 10, 20), Instant::now())
            .expect("admitted");
        let batch = s.schedule(Instant::now());
        let out = fake.execute(&batch).expect("runs");
        s.update_from_output(&batch, out, Instant::now());
        assert_eq!(s.num_waiting(), 0, "r{i} was admitted at once");
    }
    while preemptions == 0 {
        let batch = s.schedule(Instant::now());
        let out = fake.execute(&batch).expect("runs");
        preemptions += s
            .update_from_output(&batch, out, Instant::now())
            .scheduler_stats
            .num_preemptions;
    }
    assert_eq!(s.num_waiting(), 1, "the preempted request waits to run again");
    s.add(request("new", 4, 1), Instant::now())
        .expect("a preempted request does not fill the queue");
    assert!(matches!(
        s.add(request("over", 4, 1), Instant::now()),
        Err(EngineError::Overloaded { waiting: 1 })
    ));
}

#[test]
fn aborts_free_blocks_and_report_the_reason() {
    let mut s = Scheduler::new(config(64), vec![EOS]);
    s.add(request("a", 10, 100), Instant::now()).expect("admitted");
    s.add(request("b", 10, 100), Instant::now()).expect("admitted");
    let batch = s.schedule(Instant::now());
    assert_eq!(s.num_block_owners(), 2);
    let gone = s.abort(&"a".to_string(), AbortReason::ClientGone, Instant::now());
    assert!(matches!(
        gone,
        Some(TokenEvent::Finished {
            reason: FinishReason::Abort,
            ..
        })
    ));
    let stop = s.abort(&"b".to_string(), AbortReason::StopString, Instant::now());
    assert!(matches!(
        stop,
        Some(TokenEvent::Finished {
            reason: FinishReason::Stop,
            ..
        })
    ));
    assert_eq!(s.num_block_owners(), 0);
    // The in-flight batch's output for aborted requests is ignored.
    let mut fake = FakeExecutor::new(1000, FakeBehaviour::default());
    let out = fake.execute(&batch).expect("runs");
    let step = s.update_from_output(&batch, out, Instant::now());
    assert!(step.events.is_empty());
    assert_eq!(step.iteration_stats.finished.len(), 2);
    assert!(
        s.abort(&"a".to_string(), AbortReason::ClientGone, Instant::now())
            .is_none()
    );
}

/// Random arrivals, prompt lengths, lengths and aborts under cache pressure: every request
/// finishes exactly once, with the reason and the tokens that match what happened to it, and
/// no block leaks, in every preemption mode, with and without async scheduling.
#[test]
fn random_simulation_finishes_every_request_exactly_once() {
    for async_scheduling in [false, true] {
        for (mode, cpu_blocks, prefix) in [
            (PreemptionMode::Recompute, 0, false),
            (PreemptionMode::Swap, 24, false),
            (PreemptionMode::Swap, 8, true),
            (PreemptionMode::Recompute, 0, true),
        ] {
            let mut cfg = config(40);
            cfg.preemption_mode = mode;
            cfg.num_cpu_blocks = cpu_blocks;
            cfg.enable_prefix_caching = prefix;
            cfg.async_scheduling = async_scheduling;
            simulate(cfg, 2000);
        }
    }
}

fn simulate(cfg: SchedulerConfig, total: usize) {
    let label = format!(
        "{:?}/{} host/prefix {}/async {}",
        cfg.preemption_mode, cfg.num_cpu_blocks, cfg.enable_prefix_caching, cfg.async_scheduling
    );
    let mut rng = StdRng::seed_from_u64(42);
    let mut s = Scheduler::new(cfg, vec![EOS]);
    let mut driver = Driver::new();
    let mut finished: HashMap<String, (FinishReason, usize)> = HashMap::new();
    let mut tokens: HashMap<String, Vec<u32>> = HashMap::new();
    let mut aborted = std::collections::HashSet::new();
    // What each admitted request should produce: its first token, and how many until EOS
    // (`None`: it runs to `max_tokens`).
    let mut expected: HashMap<String, (u32, Option<usize>, usize)> = HashMap::new();
    let (mut next, mut swapped_seen, mut hits) = (0, 0, 0);
    let mut record = |id: String, e: TokenEvent, finished: &mut HashMap<String, (FinishReason, usize)>| match e {
        TokenEvent::Finished { reason, usage, .. } => assert!(
            finished.insert(id.clone(), (reason, usage.completion_tokens)).is_none(),
            "{id} finished twice"
        ),
        TokenEvent::Token { id: token, .. } => tokens.entry(id).or_default().push(token),
        TokenEvent::Failed { error } => panic!("{id} failed: {error}"),
        TokenEvent::PromptLogprobs(_) => panic!("{id}: no prompt logprobs were asked"),
    };
    let now = Instant::now();
    let mut clock = 0u64;
    while next < total || s.has_work() || !driver.in_flight.is_empty() {
        clock += 1;
        let t = now + Duration::from_millis(clock);
        for _ in 0..rng.random_range(0..4) {
            if next < total {
                let id = format!("r{next}");
                let max_tokens = rng.random_range(1..30);
                let mut r = request(&id, rng.random_range(1..60), max_tokens);
                // A few shared openings so prefix caching has something to find.
                let opening = rng.random_range(0..3u32);
                for (k, t) in r.prompt_token_ids.iter_mut().enumerate().take(12) {
                    *t = opening * 13 + k as u32;
                }
                // Some reach EOS (the fake counts up from the last prompt token).
                let until_eos = rng.random_bool(0.3).then(|| rng.random_range(1..20usize));
                if let Some(n) = until_eos {
                    *r.prompt_token_ids.last_mut().expect("prompt") = EOS - n as u32;
                }
                let first = r.prompt_token_ids.last().expect("prompt") + 1;
                if s.add(r, t).is_ok() {
                    expected.insert(id, (first, until_eos, max_tokens as usize));
                }
                next += 1;
            }
        }
        if rng.random_bool(0.05) && !expected.is_empty() {
            let id = format!("r{}", rng.random_range(0..next));
            if let Some(e) = s.abort(&id, AbortReason::ClientGone, t) {
                aborted.insert(id.clone());
                record(id, e, &mut finished);
            }
        }
        let Some(step) = driver.step(&mut s, t) else {
            continue;
        };
        swapped_seen = swapped_seen.max(step.scheduler_stats.num_swapped);
        hits += step.scheduler_stats.prefix_cache_hits;
        for (id, e) in step.events {
            record(id, e, &mut finished);
        }
    }
    assert_eq!(finished.len(), expected.len(), "{label}");
    for (id, (reason, completion_tokens)) in &finished {
        let got = tokens.get(id).map_or(&[][..], Vec::as_slice);
        assert_eq!(got.len(), *completion_tokens, "{label}: {id}");
        let (first, until_eos, max_tokens) = expected[id];
        let counting_up: Vec<u32> = (first..).take(got.len()).collect();
        assert_eq!(got, counting_up, "{label}: {id}'s tokens");
        if aborted.contains(id) {
            assert_eq!(*reason, FinishReason::Abort, "{label}: {id}");
        } else if let Some(n) = until_eos.filter(|n| *n <= max_tokens) {
            assert_eq!((*reason, got.len()), (FinishReason::Stop, n), "{label}: {id}");
        } else {
            assert_eq!(
                (*reason, got.len()),
                (FinishReason::Length, max_tokens),
                "{label}: {id}"
            );
        }
    }
    assert_eq!(s.num_block_owners(), 0, "{label}");
    let stats = s.make_stats();
    assert_eq!(
        (stats.kv_cache_usage, stats.cpu_cache_usage, stats.num_swapped),
        (0.0, 0.0, 0),
        "{label}"
    );
    if s.config().preemption_mode == PreemptionMode::Swap {
        assert!(swapped_seen > 0, "{label}: never swapped");
    }
    if s.config().enable_prefix_caching {
        assert!(hits > 0, "{label}: no prefix hits");
    }
    if s.config().async_scheduling {
        assert!(
            driver.ahead_steps > 100 && driver.placeholders > 100,
            "{label}: {} steps scheduled ahead, {} placeholders",
            driver.ahead_steps,
            driver.placeholders
        );
    }
}

#[test]
fn a_long_request_finishes_under_a_steady_stream_of_short_ones() {
    let mut s = Scheduler::new(config(40), vec![EOS]);
    let mut fake = FakeExecutor::new(1000, FakeBehaviour::default());
    s.add(request("long", 60, 60), Instant::now()).expect("admitted");
    let mut n = 0;
    for step in 0..2000 {
        for _ in 0..2 {
            n += 1;
            let _ = s.add(request(&format!("short{n}"), 4, 2), Instant::now());
        }
        let batch = s.schedule(Instant::now());
        let out = fake.execute(&batch).expect("runs");
        let done = s
            .update_from_output(&batch, out, Instant::now())
            .events
            .iter()
            .any(|(id, e)| id == "long" && matches!(e, TokenEvent::Finished { .. }));
        if done {
            assert!(step < 200, "the long request took {step} steps");
            return;
        }
    }
    panic!("the long request never finished");
}
