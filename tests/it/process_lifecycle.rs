//! The process's life as an orchestrator sees it, against the real `kiln` binary: probes are
//! answered while the model loads, an engine that dies for good makes the process exit
//! non-zero, and a burst beyond the queue leaves resident memory bounded.

use std::io::{BufRead, BufReader};
use std::thread;
use std::time::Duration;

use kiln::server::load_gate::HOLD_LOAD_WHILE_ENV;
use serde_json::{Value, json};

use crate::common::process::{KilnProcess, Launch};
use crate::common::wait::wait_for;

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client")
}

#[test]
fn probes_are_answered_while_the_model_loads() {
    let gate_dir = tempfile::tempdir().expect("tempdir");
    let gate = gate_dir.path().join("hold-load");
    std::fs::write(&gate, "").expect("gate file");
    let mut kiln = Launch::default().env(HOLD_LOAD_WHILE_ENV, gate.as_os_str()).spawn();
    // The port is bound before the load begins: retry only until it accepts.
    let ready = wait_for("the port to accept", || kiln.ready().ok_or("no answer yet"));
    assert_eq!(ready, 503, "/ready while loading:\n{}", kiln.logs());
    let http = client();
    let body: Value = http
        .get(kiln.url("/ready"))
        .send()
        .expect("ready")
        .json()
        .expect("json");
    assert_eq!(body["status"], "loading");
    assert_eq!(kiln.status_of("/live"), Some(200), "alive while loading");
    // Routers check /health (vllm-router, smg): not up until the model can serve, as vLLM's.
    assert_eq!(
        kiln.status_of("/health"),
        Some(503),
        "not healthy for routers while loading"
    );
    let resp = http
        .post(kiln.url("/v1/completions"))
        .json(&json!({"prompt": "a", "max_tokens": 2}))
        .send()
        .expect("completion while loading");
    assert_eq!(resp.status().as_u16(), 503);
    assert_eq!(resp.headers().get("retry-after").map(|v| v.as_bytes()), Some(&b"1"[..]));
    let error: Value = resp.json().expect("json");
    assert_eq!(error["error"]["type"], "service_unavailable", "{error}");

    std::fs::remove_file(&gate).expect("open the gate");
    kiln.wait_ready();
    assert_eq!(kiln.status_of("/health"), Some(200), "healthy once loaded");
    let resp = http
        .post(kiln.url("/v1/completions"))
        .json(&json!({"prompt": "a", "max_tokens": 2}))
        .send()
        .expect("completion once ready");
    assert_eq!(resp.status().as_u16(), 200, "{}", kiln.logs());
}

#[test]
fn a_hung_step_makes_the_process_exit_non_zero() {
    // Every step outlasts a microsecond deadline; the watchdog checks every 50 ms and finds
    // one running as soon as a check lands inside a step, which a long generation makes
    // near-certain within a few checks.
    let mut kiln = Launch::default().arg("--step-timeout", "0.000001").start();
    let url = kiln.url("/v1/completions");
    let generation = thread::spawn(move || {
        let body = json!({"prompt": "a", "max_tokens": 3500, "ignore_eos": true, "stream": true, "n": 4});
        // The stream ends (or its connection drops) when the process exits.
        if let Ok(resp) = client().post(url).json(&body).send() {
            for _ in BufReader::new(resp).lines().map_while(Result::ok) {}
        }
    });
    let status = kiln.wait_exit(Duration::from_secs(60));
    let logs = kiln.logs();
    assert!(!status.success(), "exit status {status:?}\n{logs}");
    assert!(logs.contains("the engine is dead"), "{logs}");
    assert!(
        logs.contains("engine.step_timeout_s"),
        "the log names the deadline:\n{logs}"
    );
    generation.join().expect("client thread");
}

/// One burst of `n` concurrent completions; returns each status and whether a 429 carried an
/// integer `Retry-After`.
fn burst(kiln: &KilnProcess, n: usize) -> Vec<(u16, bool)> {
    let http = client();
    thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (http, url) = (&http, kiln.url("/v1/completions"));
                scope.spawn(move || {
                    let body = json!({"prompt": format!("burst {i}"), "max_tokens": 16, "ignore_eos": true});
                    let resp = http.post(url).json(&body).send().expect("every request is answered");
                    let retry_after = resp
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .is_some_and(|v| v.parse::<u32>().is_ok());
                    (resp.status().as_u16(), retry_after)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("client thread")).collect()
    })
}

#[test]
fn bursts_beyond_the_queue_leave_resident_memory_bounded() {
    const MAX_WAITING: usize = 16;
    const MIB: u64 = 1 << 20;
    let kiln = Launch::default()
        .arg("--max-waiting", &MAX_WAITING.to_string())
        .arg("--max-num-seqs", "4")
        .start();
    burst(&kiln, MAX_WAITING); // warm up: worker threads, allocator arenas, the cache
    let baseline = kiln.resident_bytes();
    let mut after = Vec::new();
    for _ in 0..4 {
        let outcomes = burst(&kiln, 5 * MAX_WAITING);
        for &(status, retry_after) in &outcomes {
            assert!(status == 200 || status == 429, "only 200s and 429s: {outcomes:?}");
            assert!(status == 200 || retry_after, "a 429 without Retry-After: {outcomes:?}");
        }
        assert!(outcomes.iter().any(|o| o.0 == 429), "5x the queue must overflow it");
        after.push(kiln.resident_bytes());
    }
    let mib = |b: u64| b / MIB;
    // A leak of even a few KiB per refused request would show across 320 requests; the
    // allowance is for allocator fragmentation, not growth per burst.
    assert!(
        after.iter().all(|&rss| rss < baseline + 48 * MIB),
        "resident memory grew past baseline + 48 MiB: baseline {} MiB, after each burst {:?} MiB",
        mib(baseline),
        after.iter().map(|&b| mib(b)).collect::<Vec<_>>()
    );
    assert!(
        after[3] < after[0] + 8 * MIB,
        "memory keeps growing burst after burst: {:?} MiB",
        after.iter().map(|&b| mib(b)).collect::<Vec<_>>()
    );
}
