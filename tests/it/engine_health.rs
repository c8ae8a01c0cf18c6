//! `vllm:engine_healthy{engine}` (issue 29, item 4) on a real server with the fake
//! executor's fault hooks: 1 while serving, 0 while the executor restarts and once restarts
//! are exhausted, always agreeing with `/ready` (and `/health` once dead).

use std::thread;
use std::time::Duration;

use kiln::engine::step::StepStage;
use kiln::executor::fake::FakeBehaviour;
use serde_json::json;

use crate::common::wait::wait_until;
use crate::common::{Tiny, metric_value, start_fake};

/// A prompt token that makes the fake executor panic.
const POISON: u32 = 200;

fn poisoned(behaviour: FakeBehaviour) -> FakeBehaviour {
    FakeBehaviour {
        panic_on_token: Some(POISON),
        panic_stage: StepStage::Execute,
        ..behaviour
    }
}

fn healthy(t: &Tiny) -> Option<f64> {
    metric_value(&t.get_text("/metrics").1, "vllm:engine_healthy", "engine=\"0\"")
}

/// Waits until the gauge reads `value`, then checks that `/ready` and `/health` agree.
fn wait_for_healthy(t: &Tiny, value: f64, ready: u16, health: u16) {
    wait_until(&format!("vllm:engine_healthy = {value}"), || healthy(t) == Some(value));
    assert_eq!(t.get_text("/ready").0, ready, "/ready while engine_healthy = {value}");
    assert_eq!(
        t.get_text("/health").0,
        health,
        "/health while engine_healthy = {value}"
    );
}

#[test]
fn the_gauge_is_0_while_the_executor_restarts_and_1_again_after() {
    let t = start_fake(
        poisoned(FakeBehaviour {
            reset_delay: Duration::from_millis(1500),
            ..Default::default()
        }),
        |_| {},
    );
    wait_for_healthy(&t, 1.0, 200, 200);
    thread::scope(|s| {
        let failing = s.spawn(|| t.post("/v1/completions", &json!({"prompt": [1, POISON, 3], "max_tokens": 3})));
        wait_for_healthy(&t, 0.0, 503, 200);
        assert!(t.get_text("/ready").1.contains("restarting"));
        assert_eq!(failing.join().expect("request").0, 500);
    });
    wait_for_healthy(&t, 1.0, 200, 200);
    let (status, body) = t.post("/v1/completions", &json!({"prompt": [1, 2, 3], "max_tokens": 3}));
    assert_eq!(status, 200, "{body}");
}

#[test]
fn the_gauge_is_0_once_the_engine_is_dead() {
    let t = start_fake(
        poisoned(FakeBehaviour {
            panics_in_reset: 10,
            ..Default::default()
        }),
        |c| c.engine.max_engine_restarts = 2,
    );
    wait_for_healthy(&t, 1.0, 200, 200);
    let (status, _) = t.post("/v1/completions", &json!({"prompt": [1, POISON, 3], "max_tokens": 3}));
    assert_eq!(status, 500);
    wait_for_healthy(&t, 0.0, 503, 503);
}
