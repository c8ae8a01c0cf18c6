//! Faults in the engine: a panic anywhere in a step fails only that step's requests with a
//! 500 that names an internal error (never the panic's text), the executor restarts with an
//! empty cache (the prefix cache too), `kiln_engine_restarts_total` counts it, and `/ready`
//! and `/health` tell restarting from dead.

use std::thread;
use std::time::Duration;

use kiln::engine::step::StepStage;
use kiln::executor::fake::FakeBehaviour;
use serde_json::{Value, json};

use crate::common::wait::wait_until;
use crate::common::{Tiny, metric_value, scrape_until, start_fake};

/// A prompt token that makes the fake executor panic.
const POISON: u32 = 200;

fn panics_at(stage: StepStage) -> FakeBehaviour {
    FakeBehaviour {
        panic_on_token: Some(POISON),
        panic_stage: stage,
        ..Default::default()
    }
}

fn complete(t: &Tiny, prompt: &[u32]) -> (u16, Value) {
    t.post("/v1/completions", &json!({"prompt": prompt, "max_tokens": 3}))
}

/// The error body of a failed step: a server error that says the engine restarted, and
/// nothing of the panic.
fn assert_internal_error(status: u16, body: &Value) {
    assert_eq!(status, 500, "{body}");
    assert_eq!(body["error"]["type"], "server_error", "{body}");
    let message = body["error"]["message"].as_str().expect("a message");
    assert!(message.contains("internal error"), "{message}");
    assert!(
        !message.contains("panic") && !message.contains("fake executor"),
        "{message}"
    );
}

fn status_of(t: &Tiny, path: &str) -> u16 {
    t.get_text(path).0
}

/// Waits until `path` answers `status`.
fn wait_for_status(t: &Tiny, path: &str, status: u16) {
    wait_until(&format!("{path} answering {status}"), || status_of(t, path) == status);
}

#[test]
fn a_panic_at_any_stage_of_a_step_fails_only_that_step_and_the_executor_restarts() {
    for stage in [StepStage::BeforeExecute, StepStage::Execute, StepStage::AfterExecute] {
        let t = start_fake(panics_at(stage), |_| {});
        let (status, body) = complete(&t, &[1, POISON, 3]);
        assert_internal_error(status, &body);
        let (status, body) = complete(&t, &[1, 2, 3]);
        assert_eq!(status, 200, "{stage:?}: {body}");
        assert_eq!(status_of(&t, "/ready"), 200, "{stage:?}");
        assert_eq!(status_of(&t, "/health"), 200, "{stage:?}");
        let text = scrape_until(&t, |m| metric_value(m, "kiln_engine_restarts_total", "") == Some(1.0));
        assert_eq!(
            metric_value(&text, "vllm:request_success_total", "finished_reason=\"error\""),
            Some(1.0),
            "{stage:?}"
        );
    }
}

#[test]
fn a_panic_mid_stream_ends_the_stream_with_an_error_event_without_panic_text() {
    // The fake emits last token + 1: the prompt [1, 198] generates 199, then runs 199 to
    // generate 200, then panics on the step that runs 200.
    let t = start_fake(panics_at(StepStage::Execute), |_| {});
    let events = t.stream(
        "/v1/completions",
        &json!({"prompt": [1, POISON - 2], "max_tokens": 10, "stream": true}),
    );
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{events:?}");
    let error: Value = serde_json::from_str(&events[events.len() - 2]).expect("a JSON error event");
    let message = error["error"]["message"].as_str().expect("an error event");
    assert!(message.contains("internal error"), "{message}");
    assert!(!message.contains("panic"), "{message}");
    let (status, _) = complete(&t, &[1, 2, 3]);
    assert_eq!(status, 200);
}

#[test]
fn a_restart_empties_the_prefix_cache() {
    let t = start_fake(panics_at(StepStage::Execute), |c| {
        c.engine.enable_prefix_caching = true;
        c.engine.block_size = 4;
    });
    let prompt: Vec<u32> = (10..30).collect();
    let hits = |m: &str| metric_value(m, "vllm:prefix_cache_hits_total", "").unwrap_or(0.0);
    let finished = |m: &str| metric_value(m, "vllm:e2e_request_latency_seconds_count", "");
    assert_eq!(complete(&t, &prompt).0, 200);
    assert_eq!(complete(&t, &prompt).0, 200);
    let warm = scrape_until(&t, |m| finished(m) == Some(2.0) && hits(m) > 0.0);
    let warm_hits = hits(&warm);

    let (status, body) = complete(&t, &[1, POISON, 3]);
    assert_internal_error(status, &body);
    assert_eq!(complete(&t, &prompt).0, 200);
    let after = scrape_until(&t, |m| {
        finished(m) == Some(4.0) && metric_value(m, "kiln_engine_restarts_total", "") == Some(1.0)
    });
    assert_eq!(hits(&after), warm_hits, "no hit on blocks the restart wiped");
    // The cache fills again from there.
    assert_eq!(complete(&t, &prompt).0, 200);
    scrape_until(&t, |m| finished(m) == Some(5.0) && hits(m) > warm_hits);
}

#[test]
fn ready_is_503_while_the_executor_restarts_and_health_stays_200() {
    let t = start_fake(
        FakeBehaviour {
            reset_delay: Duration::from_millis(1500),
            ..panics_at(StepStage::Execute)
        },
        |_| {},
    );
    assert_eq!(status_of(&t, "/ready"), 200);
    thread::scope(|s| {
        let failing = s.spawn(|| complete(&t, &[1, POISON, 3]));
        wait_for_status(&t, "/ready", 503);
        assert!(t.get_text("/ready").1.contains("restarting"));
        assert_eq!(status_of(&t, "/health"), 200);
        let (status, body) = failing.join().expect("request");
        assert_internal_error(status, &body);
    });
    wait_for_status(&t, "/ready", 200);
    assert_eq!(complete(&t, &[1, 2, 3]).0, 200);
}

#[test]
fn exhausted_restarts_make_the_engine_dead_and_health_503() {
    let t = start_fake(
        FakeBehaviour {
            panics_in_reset: 10,
            ..panics_at(StepStage::Execute)
        },
        |c| c.engine.max_engine_restarts = 2,
    );
    // Both resets panic: the restarts run out within the first failure.
    let (status, body) = complete(&t, &[1, POISON, 3]);
    assert_internal_error(status, &body);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("could not be restarted")
    );
    assert_eq!(status_of(&t, "/health"), 503);
    assert_eq!(status_of(&t, "/ready"), 503);
    let (status, body) = complete(&t, &[1, 2, 3]);
    assert_eq!(status, 500, "{body}");
    scrape_until(&t, |m| metric_value(m, "kiln_engine_restarts_total", "") == Some(2.0));
}

#[test]
fn a_step_hung_past_its_deadline_makes_the_engine_dead() {
    let t = start_fake(
        FakeBehaviour {
            stall_on_token: Some((POISON, Duration::from_secs(2))),
            ..Default::default()
        },
        |c| c.engine.step_timeout_s = 0.3,
    );
    thread::scope(|s| {
        let stalled = s.spawn(|| complete(&t, &[1, POISON, 3]));
        wait_for_status(&t, "/health", 503);
        assert_eq!(status_of(&t, "/ready"), 503);
        let (status, body) = stalled.join().expect("request");
        assert_eq!(status, 500, "a dead engine runs no further step: {body}");
    });
}
