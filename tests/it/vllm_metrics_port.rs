//! vLLM's own metrics tests, ported to Python that runs over HTTP against a live kiln
//! (`tests/python/vllm_metrics/`, README there: the source files, their commit, every change
//! and every dropped case). Each file gets a fresh server (their expected counts are
//! absolute); pytest comes with the CI venv. Needs `KILN_TEST_PYTHON`, and `KILN_TEST_MODEL`
//! for the file that generates as vLLM's TinyLlama does; `.ci/run` sets both.

use std::process::Command;

use kiln::executor::fake::FakeBehaviour;
use kiln::testing::TestServer;

use crate::common::start_fake;
use crate::openai_client::serve_real_model;

/// Runs pytest on `tests/python/vllm_metrics/FILE` (with `-k SELECT` when given) against
/// `url`; `env` goes to the tests. Panics with pytest's output when a case fails.
fn pytest(file: &str, select: Option<&str>, url: &str, env: &[(&str, &str)]) {
    let python = std::env::var("KILN_TEST_PYTHON").expect("KILN_TEST_PYTHON");
    let dir = format!("{}/tests/python/vllm_metrics", env!("CARGO_MANIFEST_DIR"));
    let mut cmd = Command::new(python);
    cmd.current_dir(&dir)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", file])
        .env("KILN_URL", url);
    if let Some(select) = select {
        cmd.args(["-k", select]);
    }
    for (key, value) in env {
        cmd.env(key, value);
    }
    let output = cmd.output().expect("run pytest");
    assert!(
        output.status.success(),
        "{file} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn root(server: &TestServer) -> String {
    server.url("/").trim_end_matches('/').to_owned()
}

#[test]
#[ignore = "needs the real model and the CI venv (pytest, openai, prometheus-client)"]
fn vllm_instrumentator_metrics_tests() {
    let server = serve_real_model(|_| {});
    pytest("test_metrics.py", None, &root(&server), &[]);
}

#[test]
#[ignore = "needs the real model and the CI venv (pytest, openai, prometheus-client)"]
fn vllm_metrics_filter_tests() {
    let server = serve_real_model(|_| {});
    pytest("test_metrics_filter.py", None, &root(&server), &[]);
}

#[test]
#[ignore = "needs the real model and the CI venv (pytest, openai, prometheus-client)"]
fn vllm_priority_label_tests() {
    let server = serve_real_model(|_| {});
    pytest("test_priority_labels.py", None, &root(&server), &[]);
}

#[test]
#[ignore = "needs the real model and the CI venv (pytest, openai, prometheus-client)"]
fn vllm_histogram_bucket_tests() {
    let defaults = serve_real_model(|c| c.telemetry.kv_cache_metrics = true);
    let overrides = "override or applies_overrides";
    pytest(
        "test_histogram_buckets.py",
        Some(&format!("not ({overrides})")),
        &root(&defaults),
        &[],
    );
    drop(defaults);
    let two = r#"{"request_latency": [0.5, 1.0], "request_tokens": [16.0, 4096.0]}"#;
    let server = serve_real_model(|c| {
        c.telemetry.kv_cache_metrics = true;
        c.telemetry.custom_histogram_buckets = two.into();
    });
    let env = [("KILN_CUSTOM_BUCKETS", two)];
    pytest(
        "test_histogram_buckets.py",
        Some("override_precedence"),
        &root(&server),
        &env,
    );
    drop(server);
    // Each family a distinct list, in the sorted order of vLLM's test.
    let all = r#"{"inter_token_latency": [1.0, 2.0], "iteration_tokens": [2.0, 3.0],
        "kv_cache_residency": [3.0, 4.0], "request_latency": [4.0, 5.0],
        "request_num_preemptions": [5.0, 6.0], "request_params_n": [6.0, 7.0],
        "request_tokens": [7.0, 8.0], "time_to_first_token": [8.0, 9.0]}"#;
    let server = serve_real_model(|c| {
        c.telemetry.kv_cache_metrics = true;
        c.telemetry.custom_histogram_buckets = all.into();
    });
    let env = [("KILN_CUSTOM_BUCKETS", all)];
    pytest(
        "test_histogram_buckets.py",
        Some("applies_overrides"),
        &root(&server),
        &env,
    );
}

#[test]
#[ignore = "needs the CI venv (pytest, openai, prometheus-client)"]
fn vllm_request_failure_tests() {
    // The fake answers each token with the next id: a prompt of [5, 6] gets 7 first, and
    // the step that runs 7 fails, after generation started.
    let failing = FakeBehaviour {
        fail_on_token: Some(7),
        ..Default::default()
    };
    let t = start_fake(failing, |_| {});
    pytest("test_request_failure_metrics.py", None, &root(&t.server), &[]);
}

#[test]
#[ignore = "needs the CI venv (pytest, openai, prometheus-client)"]
fn vllm_fault_tolerance_tests() {
    // A prompt of [5, 6] gets 7 first; the step that runs 7 panics, and the restart takes
    // long enough to be seen.
    let panicking = FakeBehaviour {
        panic_on_token: Some(7),
        reset_delay: std::time::Duration::from_millis(1500),
        ..Default::default()
    };
    let t = start_fake(panicking, |_| {});
    pytest("test_fault_tolerance_metrics.py", None, &root(&t.server), &[]);
}
