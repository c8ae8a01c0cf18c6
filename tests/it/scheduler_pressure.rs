//! The scheduler under KV pressure on the real model: outputs are exact whatever happens to
//! the cache (recompute, swap, prefix hits). Needs `KILN_TEST_MODEL`; `.ci/run` sets it.

use std::collections::HashMap;
use std::time::Instant;

use kiln::config::{Config, PreemptionMode};
use kiln::executor::model_runner::ModelRunner;
use kiln::model::loader::{ModelFiles, open_model};
use kiln::scheduler::{NewRequest, Scheduler};
use kiln::testing::real_model::model_path;
use kiln::testing::{EngineRun, direct_engine, greedy_request, run_to_completion};

fn engine(tweak: impl FnOnce(&mut Config)) -> (Scheduler, ModelRunner, ModelFiles) {
    let (scheduler, runner) = direct_engine(&model_path(), tweak).expect("engine");
    (scheduler, runner, open_model(&model_path()).expect("open"))
}

fn greedy(id: &str, prompt: Vec<u32>, max_tokens: u32) -> NewRequest {
    greedy_request(id, prompt, max_tokens, true)
}

const PROMPTS: [&str; 8] = [
    "The capital of France is",
    "Once upon a time, there was a little girl named Lily. She",
    "def fibonacci(n):",
    "In 1969, Neil Armstrong",
    "The three primary colours are",
    "Water boils at a temperature of",
    "My favourite recipe for pancakes starts with",
    "The quick brown fox jumps over the lazy dog. Then the fox",
];

fn run_all(scheduler: &mut Scheduler, runner: &mut ModelRunner, prompts: &[Vec<u32>], max_tokens: u32) -> EngineRun {
    for (i, p) in prompts.iter().enumerate() {
        scheduler
            .add(greedy(&format!("r{i}"), p.clone(), max_tokens), Instant::now())
            .expect("admitted");
    }
    run_to_completion(scheduler, runner)
}

fn alone(prompts: &[Vec<u32>], max_tokens: u32) -> HashMap<String, Vec<u32>> {
    let (mut scheduler, mut runner, _) = engine(|_| {});
    let mut out = HashMap::new();
    for (i, p) in prompts.iter().enumerate() {
        let id = format!("r{i}");
        scheduler
            .add(greedy(&id, p.clone(), max_tokens), Instant::now())
            .expect("admitted");
        out.extend(run_to_completion(&mut scheduler, &mut runner).tokens);
    }
    out
}

#[test]
#[ignore = "needs the real model (KILN_TEST_MODEL); .ci/run provides it"]
fn outputs_under_a_tiny_kv_budget_equal_outputs_alone_with_recompute_and_with_swap() {
    let (_, _, files) = engine(|_| {});
    let prompts: Vec<Vec<u32>> = PROMPTS
        .iter()
        .map(|p| files.tokenizer.encode(*p, false).expect("encode").get_ids().to_vec())
        .collect();
    let max_tokens = 40;
    let expected = alone(&prompts, max_tokens);
    for mode in [PreemptionMode::Recompute, PreemptionMode::Swap] {
        // 24 blocks of 16 tokens: 8 requests of ~50 tokens need ~32 blocks at once.
        let (mut scheduler, mut runner, _) = engine(|c| {
            c.engine.num_gpu_blocks_override = 24;
            c.engine.preemption_mode = mode;
        });
        let run = run_all(&mut scheduler, &mut runner, &prompts, max_tokens);
        assert!(run.preemptions > 0, "{mode:?}: the budget should force preemption");
        if mode == PreemptionMode::Swap {
            assert!(run.max_swapped > 0, "swap mode should swap");
        }
        for (id, tokens) in &expected {
            assert_eq!(&run.tokens[id], tokens, "{mode:?}: {id} differs from its output alone");
        }
        assert_eq!(scheduler.num_block_owners(), 0);
        let stats = scheduler.make_stats();
        assert_eq!((stats.kv_cache_usage, stats.cpu_cache_usage), (0.0, 0.0));
    }
}

#[test]
#[ignore = "needs the real model (KILN_TEST_MODEL); .ci/run provides it"]
fn a_repeated_long_system_prompt_hits_the_prefix_cache_with_identical_output() {
    let (_, _, files) = engine(|_| {});
    let system = "You are a meticulous assistant. Answer briefly, in plain English, without lists, \
                  and always mention one fact about geography that relates to the question asked.";
    let prompts: Vec<Vec<u32>> = [
        "What is the capital of France?",
        "Name a large river.",
        "What is a desert?",
    ]
    .iter()
    .map(|q| {
        let text =
            format!("<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n");
        files.tokenizer.encode(text, false).expect("encode").get_ids().to_vec()
    })
    .collect();
    let expected = alone(&prompts, 16);
    let (mut scheduler, mut runner, _) = engine(|c| c.engine.enable_prefix_caching = true);
    let mut hits = 0;
    for (i, p) in prompts.iter().enumerate() {
        let id = format!("r{i}");
        scheduler
            .add(greedy(&id, p.clone(), 16), Instant::now())
            .expect("admitted");
        let run = run_to_completion(&mut scheduler, &mut runner);
        assert_eq!(run.tokens[&id], expected[&id], "{id} differs with prefix caching");
        hits += run.prefix_cache_hits;
        if i > 0 {
            // Exactly the full 16-token blocks the prompts share are reused.
            let common = prompts[i].iter().zip(&prompts[0]).take_while(|(a, b)| a == b).count();
            let expected_hits = (common / 16 * 16) as u64;
            assert!(
                expected_hits >= 32,
                "the shared system prompt spans at least two blocks"
            );
            assert_eq!(run.prefix_cache_hits, expected_hits, "request {i}: {run:?}");
            assert_eq!(run.prefix_cache_queries, p.len() as u64);
        }
    }
    assert!(hits > 0);
    assert_eq!(
        scheduler.make_stats().kv_cache_usage,
        0.0,
        "cached blocks are free, not in use"
    );
}
