//! A stream's chunks are formatted off the HTTP workers (issue 28, defect 3): the worker
//! only writes the bytes the output threads made, so a stream whose every chunk carries 20
//! alternatives for each of 16 choices leaves a one-worker server answering other clients
//! at about their usual latency.

use std::time::{Duration, Instant};

use kiln::testing::TinyModelSpec;
use serde_json::{Value, json};

use crate::common::timed::{median, timed};
use crate::common::{Tiny, start_tiny_spec};

fn get_models(t: &Tiny) -> Duration {
    timed(t, "GET", "/v1/models", &Value::Null)
}

/// Probes `/v1/models` while `heavy` streams; prints and returns (idle median, the heavy
/// stream's duration, every probe's latency).
fn probe_during(t: &Tiny, path: &str, heavy: &Value) -> (Duration, Duration, Vec<Duration>) {
    let idle = median((0..9).map(|_| get_models(t)).collect());
    let heavy_client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .expect("client");
    let started = Instant::now();
    std::thread::scope(|s| {
        let stream = s.spawn(|| {
            let response = heavy_client.post(t.server.url(path)).json(heavy).send().expect("heavy");
            assert_eq!(response.status().as_u16(), 200);
            let body = response.text().expect("stream");
            assert!(body.ends_with("data: [DONE]\n\n"), "the stream ended");
            started.elapsed()
        });
        let mut during = Vec::new();
        while !stream.is_finished() {
            during.push(get_models(t));
        }
        let heavy = stream.join().expect("the heavy stream");
        let mut slowest = during.clone();
        slowest.sort_by(|a, b| b.cmp(a));
        slowest.truncate(8);
        eprintln!(
            "idle {idle:?}; heavy stream {heavy:?}; {} probes during it: median {:?}; slowest {slowest:?}",
            during.len(),
            median(during.clone())
        );
        (idle, heavy, during)
    })
}

#[test]
fn a_heavily_formatted_stream_leaves_other_clients_served() {
    let t = start_tiny_spec(
        TinyModelSpec {
            context: 2048,
            ..TinyModelSpec::default()
        },
        |c| c.server.http_workers = 1,
    );
    // Each choice's first chunk: the echoed prompt with 20 alternatives a token, twice
    // (`logprobs` and `prompt_logprobs`), megabytes of JSON.
    let prompt: Vec<u64> = (0..1500).map(|i| 40 + (i * 7919) % 200).collect();
    let echo = json!({"prompt": prompt, "max_tokens": 8, "n": 16, "echo": true, "logprobs": 20,
                      "prompt_logprobs": 20, "stream": true, "ignore_eos": true});
    let (idle, heavy, during) = probe_during(&t, "/v1/completions", &echo);
    let worst = during.iter().copied().max().unwrap_or_default();
    assert!(during.len() >= 10, "/v1/models was served while the stream ran");
    assert!(
        worst < heavy / 8 + idle * 20,
        "/v1/models: worst {worst:?}, idle {idle:?}, stream {heavy:?}"
    );
    // Every chunk of 16 choices carries 20 alternatives a token.
    let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1000, "n": 16,
                      "logprobs": true, "top_logprobs": 20, "stream": true, "ignore_eos": true});
    let (idle, heavy, during) = probe_during(&t, "/v1/chat/completions", &chat);
    let typical = median(during.clone());
    let worst = during.iter().copied().max().unwrap_or_default();
    assert!(during.len() >= 10, "/v1/models was served while the stream ran");
    // Loose for a loaded machine: the stream's CPU use may slow the probe, not queue it.
    assert!(
        typical < idle * 10,
        "/v1/models: median {typical:?} during the stream, idle {idle:?}"
    );
    assert!(
        worst < heavy / 8 + idle * 20,
        "/v1/models: worst {worst:?}, idle {idle:?}, stream {heavy:?}"
    );
}
