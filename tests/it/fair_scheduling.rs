//! Issue 31 on a real server (fake executor whose steps take time per token): the step
//! budget keeps steps short, a short request is not starved by long prompts, and
//! `kiln_step_duration_seconds` shows the steps.

use std::time::{Duration, Instant};

use kiln::executor::fake::FakeBehaviour;
use serde_json::json;

use crate::common::{Tiny, metric_value, scrape_until, start_fake};

/// 10 ms a step plus 2 ms a token: a 240-token prompt alone is a 0.5 s step.
fn per_token_cost() -> FakeBehaviour {
    FakeBehaviour {
        step_delay: Duration::from_millis(10),
        token_delay: Duration::from_millis(2),
        ..Default::default()
    }
}

fn steps(text: &str) -> f64 {
    metric_value(text, "kiln_step_duration_seconds_count", "").unwrap_or(0.0)
}

#[test]
fn every_step_is_in_the_step_duration_histogram() {
    let slow = FakeBehaviour {
        step_delay: Duration::from_millis(20),
        ..Default::default()
    };
    let t = start_fake(slow, |_| {});
    let (status, _) = t.post("/v1/completions", &json!({"prompt": "abc", "max_tokens": 4}));
    assert_eq!(status, 200);
    let text = scrape_until(&t, |m| {
        steps(m) >= 1.0 && metric_value(m, "vllm:num_requests_running", "") == Some(0.0)
    });
    assert!(text.contains("# TYPE kiln_step_duration_seconds histogram"), "{text}");
    let count = steps(&text);
    // One observation per step that ran tokens, as iteration_tokens_total has.
    assert_eq!(
        Some(count),
        metric_value(&text, "vllm:iteration_tokens_total_count", "")
    );
    assert!(count >= 4.0, "4 tokens take 4 steps at least: {count}");
    // Every step slept 20 ms: none is under 10 ms, and the sum covers them all.
    assert_eq!(
        metric_value(&text, "kiln_step_duration_seconds_bucket", "le=\"0.01\""),
        Some(0.0)
    );
    let sum = metric_value(&text, "kiln_step_duration_seconds_sum", "").expect("sum");
    assert!(sum >= 0.02 * count, "sum {sum} over {count} steps");
}

fn long_prompt(i: u32) -> Vec<u32> {
    (0..240).map(|k| 1 + (k + i) % 200).collect()
}

fn post_long(t: &Tiny, i: u32) -> std::thread::JoinHandle<u16> {
    let client = t.client.clone();
    let url = t.server.url("/v1/completions");
    std::thread::spawn(move || {
        client
            .post(url)
            .json(&json!({"prompt": long_prompt(i), "max_tokens": 1}))
            .send()
            .expect("long request")
            .status()
            .as_u16()
    })
}

#[test]
fn a_short_request_is_served_within_a_few_steps_while_long_prompts_prefill() {
    let budget_ms = 50.0;
    let t = start_fake(per_token_cost(), |c| {
        c.engine.num_gpu_blocks_override = 256;
        c.scheduler.max_step_ms = budget_ms;
        c.scheduler.long_prefill_token_threshold = 32;
    });
    let longs: Vec<_> = (0..4).map(|i| post_long(&t, i)).collect();
    // The step-time model starts from the tiny model's shapes, far from this executor's
    // 2 ms a token: let it measure a few steps first.
    scrape_until(&t, |m| steps(m) >= 5.0);
    let start = Instant::now();
    let (status, _) = t.post("/v1/completions", &json!({"prompt": [1, 2, 3, 4, 5], "max_tokens": 1}));
    let ttft = start.elapsed();
    assert_eq!(status, 200);
    let still_prefilling = longs.iter().filter(|l| !l.is_finished()).count();
    for long in longs {
        assert_eq!(long.join().expect("long thread"), 200);
    }
    let text = scrape_until(&t, |m| metric_value(m, "vllm:num_requests_running", "") == Some(0.0));
    let count = steps(&text);
    let sum = metric_value(&text, "kiln_step_duration_seconds_sum", "").expect("sum");
    let mean = sum / count;
    // Loose bound: the step in flight, the one queued behind it, its own, plus HTTP and a
    // busy machine; without the budget it waits for 960 prompt tokens (about 2 s).
    let bound = Duration::from_secs_f64(6.0 * mean.max(budget_ms / 1000.0) + 0.3);
    assert!(
        ttft <= bound,
        "short request took {ttft:?} (bound {bound:?}, mean step {mean:.3} s, {still_prefilling} long prompts unfinished)"
    );
    let buckets: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("kiln_step_duration_seconds"))
        .collect();
    assert!(
        still_prefilling >= 2,
        "the long prompts were still prefilling: {still_prefilling}; ttft {ttft:?}; {buckets:#?}"
    );
    // The budget at work: most steps stay within twice it (the first ones, before the
    // model learned, may not).
    let within = metric_value(&text, "kiln_step_duration_seconds_bucket", "le=\"0.1\"").expect("bucket");
    assert!(within >= 0.8 * count, "{within} of {count} steps within 100 ms");
}
