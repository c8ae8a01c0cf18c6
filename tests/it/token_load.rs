//! Load in tokens (issue 29, item 3): `vllm:num_tokens_waiting`, `vllm:num_tokens_running`,
//! `vllm:max_token_capacity` and `kiln_uncached_tokens_waiting` on `/metrics`, in `/load` and
//! in the ORCA header, checked on a real server: while one long request holds the only batch
//! slot, the waiting tokens are the sum of the queued prompts; the prefix cache's share is
//! subtracted from the uncached ones; everything but the capacity is 0 again when idle.

use std::time::Duration;

use kiln::executor::fake::FakeBehaviour;
use serde_json::{Value, json};

use crate::common::{Tiny, metric_value, scrape_until, start_fake};

const BLOCK_SIZE: u64 = 16;
const GPU_BLOCKS: u64 = 64;

/// Token ids `start .. start + len` (ordinary tokens of the tiny vocabulary of 263).
fn prompt(start: u32, len: u32) -> Vec<u32> {
    (start..start + len).collect()
}

fn gauge(text: &str, name: &str) -> Option<f64> {
    metric_value(text, name, "")
}

fn load_header(t: &Tiny) -> String {
    let resp = t
        .client
        .get(t.server.url("/v1/models"))
        .header("endpoint-load-metrics-format", "TEXT")
        .send()
        .expect("models");
    resp.headers()["endpoint-load-metrics"]
        .to_str()
        .expect("ascii")
        .to_string()
}

#[test]
fn waiting_tokens_are_the_queued_prompts_and_return_to_zero_when_idle() {
    let slow = FakeBehaviour {
        step_delay: Duration::from_millis(20),
        ..Default::default()
    };
    let t = start_fake(slow, |c| {
        c.engine.max_num_seqs = 1;
        c.engine.block_size = BLOCK_SIZE as usize;
        c.engine.num_gpu_blocks_override = GPU_BLOCKS as usize;
        c.engine.enable_prefix_caching = true;
    });
    let capacity = (BLOCK_SIZE * GPU_BLOCKS) as f64;
    // Leaves 40 tokens' first two blocks (32 tokens) in the prefix cache.
    let (status, body) = t.post("/v1/completions", &json!({"prompt": prompt(10, 40), "max_tokens": 1}));
    assert_eq!(status, 200, "{body}");
    let hold = json!({"prompt": prompt(100, 5), "max_tokens": 150, "ignore_eos": true});
    let queued = [
        json!({"prompt": prompt(10, 40), "max_tokens": 2}),
        json!({"prompt": prompt(150, 23), "max_tokens": 2}),
    ];
    let t = &t;
    std::thread::scope(|scope| {
        let holder = scope.spawn(|| t.post("/v1/completions", &hold));
        t.wait_for_load(|l| l["running"] == 1);
        let waiters: Vec<_> = queued
            .iter()
            .map(|body| scope.spawn(move || t.post("/v1/completions", body)))
            .collect();
        let load: Value = t.wait_for_load(|l| l["waiting"] == 2);
        assert_eq!(load["num_tokens_waiting"], 40 + 23, "{load}");
        assert_eq!(load["uncached_tokens_waiting"], 40 - 32 + 23, "{load}");
        assert_eq!(load["max_token_capacity"], capacity as u64, "{load}");
        let running = load["num_tokens_running"].as_u64().expect("running tokens");
        assert!((5..=5 + 150).contains(&running), "the holder's context: {load}");

        let busy = scrape_until(t, |m| gauge(m, "vllm:num_tokens_waiting") == Some(63.0));
        assert_eq!(gauge(&busy, "kiln_uncached_tokens_waiting"), Some(31.0), "{busy}");
        assert!(gauge(&busy, "vllm:num_tokens_running").unwrap_or(0.0) >= 5.0, "{busy}");
        let header = load_header(t);
        let capacity_part = format!("named_metrics.max_token_capacity={capacity}");
        for part in [
            "named_metrics.num_tokens_waiting=63",
            "named_metrics.uncached_tokens_waiting=31",
            capacity_part.as_str(),
        ] {
            assert!(header.contains(part), "{part} in {header}");
        }

        assert_eq!(holder.join().expect("holder").0, 200);
        for waiter in waiters {
            assert_eq!(waiter.join().expect("waiter").0, 200);
        }
    });
    let idle = t.wait_for_load(|l| l["running"] == 0 && l["waiting"] == 0);
    for key in ["num_tokens_waiting", "uncached_tokens_waiting", "num_tokens_running"] {
        assert_eq!(idle[key], 0, "{key}: {idle}");
    }
    let text = scrape_until(t, |m| {
        gauge(m, "vllm:num_requests_running") == Some(0.0) && gauge(m, "vllm:num_tokens_running") == Some(0.0)
    });
    for name in [
        "vllm:num_tokens_waiting",
        "kiln_uncached_tokens_waiting",
        "vllm:num_tokens_running",
    ] {
        assert_eq!(gauge(&text, name), Some(0.0), "{name}: {text}");
    }
    assert_eq!(gauge(&text, "vllm:max_token_capacity"), Some(capacity), "{text}");
}
