//! The scheduler's metrics: prefix lookups counted once per request, the cached and computed
//! prompt tokens, block residency and step cost.

use std::time::Instant;

use super::super::test_driver::{EOS, config, request};
use crate::engine::events::{TokenEvent, TokenUsage};
use crate::executor::Executor;
use crate::executor::fake::{FakeBehaviour, FakeExecutor};
use crate::model::config::ModelConfig;
use crate::scheduler::{Scheduler, SchedulerConfig};
use crate::stats::data::{IterationStats, SchedulerStats};
use crate::stats::step_cost::StepCostModel;

/// Every step's stats, summed, plus each request's final usage.
#[derive(Default)]
struct Totals {
    queries: u64,
    hits: u64,
    prompt_tokens: u64,
    prompt_tokens_cached: u64,
    prefill_kv_computed: Vec<u64>,
    steps_with_waiting: usize,
    lifetimes: usize,
    reuse_gaps: usize,
    flops: f64,
    usage: Vec<(String, TokenUsage)>,
}

impl Totals {
    fn add(&mut self, s: &SchedulerStats, it: &IterationStats) {
        self.queries += s.prefix_cache_queries;
        self.hits += s.prefix_cache_hits;
        self.steps_with_waiting += usize::from(s.num_waiting > 0);
        self.lifetimes += s.kv_block_residency.lifetime_s.len();
        self.reuse_gaps += s.kv_block_residency.reuse_gap_s.len();
        self.prompt_tokens += it.num_prompt_tokens;
        self.prompt_tokens_cached += it.num_prompt_tokens_cached;
        self.prefill_kv_computed.extend(&it.prefill_kv_computed_tokens);
        self.flops += it.step_cost.flops;
    }
}

fn run_counting(s: &mut Scheduler, totals: &mut Totals) {
    let mut fake = FakeExecutor::new(1000, FakeBehaviour::default());
    let mut steps = 0;
    while s.has_work() {
        steps += 1;
        assert!(steps < 10_000, "no progress");
        let batch = s.schedule(Instant::now());
        let out = fake.execute(&batch).expect("fake runs");
        let result = s.update_from_output(&batch, out, Instant::now());
        totals.add(&result.scheduler_stats, &result.iteration_stats);
        for (id, event) in result.events {
            if let TokenEvent::Finished { usage, .. } = event {
                totals.usage.push((id, usage));
            }
        }
    }
}

fn caching(blocks: usize) -> SchedulerConfig {
    SchedulerConfig {
        enable_prefix_caching: true,
        prefix_hasher: Default::default(),
        ..config(blocks)
    }
}

#[test]
fn an_admission_retried_for_lack_of_blocks_counts_its_lookup_once() {
    let mut s = Scheduler::new(caching(8), vec![EOS]);
    let mut totals = Totals::default();
    // "a" leaves its 12-token prompt cached (3 blocks of 4).
    s.add(request("a", 12, 1), Instant::now()).expect("admitted");
    run_counting(&mut s, &mut totals);
    // "b" holds most of the cache while "c", which starts like "a", waits for blocks: its
    // lookup hits and is undone step after step until "b" finishes.
    let mut b = request("b", 20, 8);
    b.prompt_token_ids.iter_mut().for_each(|t| *t += 200);
    s.add(b, Instant::now()).expect("admitted");
    let mut c = request("c", 20, 1);
    c.prompt_token_ids[12..].iter_mut().for_each(|t| *t += 50);
    s.add(c, Instant::now()).expect("admitted");
    run_counting(&mut s, &mut totals);

    assert!(
        totals.steps_with_waiting >= 3,
        "c was retried ({} steps)",
        totals.steps_with_waiting
    );
    assert_eq!(totals.queries, 12 + 20 + 20, "one lookup per request");
    let cached: Vec<usize> = totals.usage.iter().map(|(_, u)| u.cached_prompt_tokens).collect();
    assert_eq!(totals.hits, cached.iter().sum::<usize>() as u64);
    assert!(totals.hits <= 12, "at most a's blocks: {}", totals.hits);
    // Cached and computed prompt tokens, per request and in total.
    assert_eq!(totals.prompt_tokens, 52);
    assert_eq!(totals.prompt_tokens_cached, totals.hits);
    let computed: u64 = totals.prefill_kv_computed.iter().sum();
    assert_eq!(computed + totals.prompt_tokens_cached, totals.prompt_tokens);
    assert_eq!(totals.prefill_kv_computed.len(), 3);
}

#[test]
fn a_repeated_prompt_is_served_from_the_cache_and_says_so_in_its_usage() {
    let mut s = Scheduler::new(caching(64), vec![EOS]);
    let mut totals = Totals::default();
    s.add(request("first", 17, 2), Instant::now()).expect("admitted");
    run_counting(&mut s, &mut totals);
    s.add(request("again", 17, 2), Instant::now()).expect("admitted");
    run_counting(&mut s, &mut totals);
    let usage: std::collections::HashMap<_, _> = totals.usage.into_iter().collect();
    assert_eq!(usage["first"].cached_prompt_tokens, 0);
    assert_eq!(usage["again"].cached_prompt_tokens, 16, "4 full blocks of 4");
    assert_eq!((totals.queries, totals.hits), (34, 16));
    assert_eq!(totals.prefill_kv_computed, vec![17, 1]);
}

#[test]
fn sampled_blocks_report_residency_and_steps_their_cost_when_asked() {
    let model = ModelConfig::llama(1000, 8, 16, 2, 2, 1, 4, 512);
    let measured = SchedulerConfig {
        kv_block_metrics_sample: 1.0,
        step_cost: Some(StepCostModel::new(&model, 1000.0, 4)),
        ..caching(8)
    };
    for (cfg, on) in [(caching(8), false), (measured, true)] {
        let mut s = Scheduler::new(cfg, vec![EOS]);
        let mut totals = Totals::default();
        // A repeated prompt reuses its blocks; then distinct prompts through an 8-block
        // cache evict cached blocks.
        for (i, offset) in [0u32, 0, 1, 2, 3, 4].into_iter().enumerate() {
            let mut r = request(&format!("r{i}"), 12, 2);
            r.prompt_token_ids.iter_mut().for_each(|t| *t += 100 * offset);
            s.add(r, Instant::now()).expect("admitted");
            run_counting(&mut s, &mut totals);
        }
        assert_eq!(totals.lifetimes > 0, on, "evictions observed: {}", totals.lifetimes);
        assert_eq!(totals.reuse_gaps > 0, on, "reuses observed: {}", totals.reuse_gaps);
        assert_eq!(totals.flops > 0.0, on, "flops {}", totals.flops);
    }
}

#[test]
fn a_reset_prefix_cache_is_refused_while_a_request_runs_and_then_misses_every_prompt() {
    let mut s = Scheduler::new(caching(64), vec![EOS]);
    let mut totals = Totals::default();
    s.add(request("first", 17, 2), Instant::now()).expect("admitted");
    let batch = s.schedule(Instant::now());
    assert!(!s.reset_prefix_cache(), "first holds its blocks");
    let mut fake = FakeExecutor::new(1000, FakeBehaviour::default());
    let out = fake.execute(&batch).expect("fake runs");
    s.update_from_output(&batch, out, Instant::now());
    run_counting(&mut s, &mut totals);
    assert!(s.num_cached_blocks() > 0);
    assert!(s.reset_prefix_cache());
    assert_eq!(s.num_cached_blocks(), 0);
    s.add(request("again", 17, 2), Instant::now()).expect("admitted");
    run_counting(&mut s, &mut totals);
    let usage: std::collections::HashMap<_, _> = totals.usage.into_iter().collect();
    assert_eq!(usage["again"].cached_prompt_tokens, 0, "the cache was emptied");
}
