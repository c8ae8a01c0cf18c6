//! Request latency probes for the tests that check other clients stay served during heavy work.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::Tiny;

/// One request (`GET`, or `POST` with `body`) to `path`, which must answer 200; its wall time
/// including the whole body.
pub fn timed(t: &Tiny, method: &str, path: &str, body: &Value) -> Duration {
    let started = Instant::now();
    let request = match method {
        "GET" => t.client.get(t.server.url(path)),
        _ => t.client.post(t.server.url(path)).json(body),
    };
    let response = request.send().expect("request");
    assert_eq!(response.status().as_u16(), 200);
    response.bytes().expect("body");
    started.elapsed()
}

pub fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}
