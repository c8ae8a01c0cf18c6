//! Output processing off the HTTP workers and bounded (issue 28, defect 3): a stream of
//! bytes that never completes a character comes out as it is generated (the detokenizer holds
//! back a few tokens, not everything since the last complete character); a long prompt's
//! logprobs are computed in bounded passes with the same values; and a request whose echo and
//! prompt logprobs take long to write leaves other clients served.

use std::time::{Duration, Instant};

use kiln::testing::TinyModelSpec;
use serde_json::{Value, json};

use crate::common::timed::{median, timed};
use crate::common::{Tiny, start_tiny_spec};

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_u64().expect("id"))
        .collect()
}

fn long_context(t: impl FnOnce(&mut kiln::config::Config)) -> Tiny {
    start_tiny_spec(
        TinyModelSpec {
            context: 2048,
            ..TinyModelSpec::default()
        },
        t,
    )
}

#[test]
fn a_stream_of_lone_continuation_bytes_arrives_as_it_is_generated() {
    let t = long_context(|_| {});
    // "€" is E2 82 AC: the tiny vocabulary has no merge for it, so its middle token is the
    // lone continuation byte 0x82, which never completes a character.
    let (_, v) = t.post("/tokenize", &json!({"prompt": "€", "add_special_tokens": false}));
    let euro = ids(&v["tokens"]);
    assert_eq!(euro.len(), 3, "one token a byte: {euro:?}");
    let lone = euro[1];
    let n = 600;
    let events = t.stream(
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": n, "temperature": 0, "ignore_eos": true, "stream": true,
                "logit_bias": { lone.to_string(): 100 }}),
    );
    let texts: Vec<String> = events
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str::<Value>(e).expect("chunk json"))
        .filter_map(|c| c["choices"][0]["text"].as_str().map(str::to_string))
        .filter(|text| !text.is_empty())
        .collect();
    let all: String = texts.concat();
    assert_eq!(
        all,
        "\u{FFFD}".repeat(n),
        "every byte shows as U+FFFD, as a full decode shows it"
    );
    // Held back at most a few tokens at a time: hundreds of pieces, not one flush at the end.
    assert!(texts.len() >= n - 8, "{} pieces of text for {n} tokens", texts.len());
}

#[test]
fn prompt_logprobs_of_a_long_prompt_match_those_of_its_prefix() {
    let t = long_context(|_| {});
    // 700 positions: more prompt-logprob rows than one forward pass materialises.
    let prompt: Vec<u64> = (0..700).map(|i| 40 + (i * 7919) % 200).collect();
    let logprobs = |prompt: &[u64]| {
        let (status, v) = t.post(
            "/v1/completions",
            &json!({"prompt": prompt, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 3}),
        );
        assert_eq!(status, 200, "{v}");
        v["choices"][0]["prompt_logprobs"]
            .as_array()
            .expect("prompt_logprobs")
            .clone()
    };
    let long = logprobs(&prompt);
    let short = logprobs(&prompt[..150]);
    assert_eq!(long.len(), 700);
    // Position p depends only on the tokens before it: the long prompt's first 150 positions
    // (computed in several passes) equal the short prompt's (one pass), within f32 noise.
    for p in 1..150 {
        let token = prompt[p].to_string();
        let (a, b) = (&long[p][&token], &short[p][&token]);
        let (a, b) = (
            a["logprob"].as_f64().expect("logprob"),
            b["logprob"].as_f64().expect("logprob"),
        );
        assert!((a - b).abs() < 1e-3, "position {p}: {a} vs {b}");
        assert_eq!(
            long[p].as_object().map(|m| m.len()),
            short[p].as_object().map(|m| m.len())
        );
    }
    for (p, entry) in long.iter().enumerate().skip(1) {
        let entry = &entry[prompt[p].to_string()];
        assert!(
            entry["logprob"].as_f64().is_some_and(|l| l <= 0.0),
            "position {p}: {entry}"
        );
    }
}

#[test]
fn a_request_with_a_heavy_echo_leaves_other_clients_served() {
    // One HTTP worker: before output processing moved off it, the heavy request's prompt
    // decoding and formatting held that worker, and every other client waited for it.
    let t = long_context(|c| c.server.http_workers = 1);
    let short = json!({"prompt": "hello", "max_tokens": 1, "temperature": 0});
    let probes = [("GET", "/v1/models"), ("POST", "/v1/completions")];
    let idle: Vec<Duration> = probes
        .iter()
        .map(|&(method, path)| median((0..7).map(|_| timed(&t, method, path, &short)).collect()))
        .collect();
    let prompt: Vec<u64> = (0..1500).map(|i| 40 + (i * 7919) % 200).collect();
    let heavy = json!({"prompt": prompt, "max_tokens": 1, "n": 16, "echo": true, "logprobs": 5,
                       "prompt_logprobs": 20, "temperature": 0});
    // The heavy request's own client, as another user's would be.
    let heavy_client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("client");
    let started = Instant::now();
    std::thread::scope(|s| {
        let heavy = s.spawn(|| {
            let response = heavy_client
                .post(t.server.url("/v1/completions"))
                .json(&heavy)
                .send()
                .expect("heavy");
            assert_eq!(response.status().as_u16(), 200);
            let v: Value = response.json().expect("json");
            assert_eq!(v["choices"].as_array().map(Vec::len), Some(16));
            started.elapsed()
        });
        let mut during: Vec<(Duration, usize, Duration)> = Vec::new();
        while !heavy.is_finished() {
            for (k, &(method, path)) in probes.iter().enumerate() {
                let at = started.elapsed();
                during.push((at, k, timed(&t, method, path, &short)));
            }
        }
        let heavy = heavy.join().expect("the heavy request");
        during.sort_by_key(|&(_, _, latency)| std::cmp::Reverse(latency));
        eprintln!(
            "idle {idle:?}; heavy request {heavy:?}; {} probes during it; slowest:",
            during.len()
        );
        for (at, k, latency) in during.iter().take(8) {
            eprintln!("  {} at {at:?}: {latency:?}", probes[*k].1);
        }
        assert!(during.len() >= 6, "short requests were served while the heavy one ran");
        let worst = |k: usize| {
            during
                .iter()
                .filter(|p| p.1 == k)
                .map(|p| p.2)
                .max()
                .unwrap_or_default()
        };
        // `/v1/models` needs only an HTTP worker: before output processing left the worker,
        // it waited seconds behind the heavy request's prompt decoding and formatting. Loose
        // for a loaded machine: the heavy request's CPU use may slow it, not queue it.
        assert!(
            worst(0) < heavy / 8 + idle[0] * 20,
            "/v1/models: worst {:?}, heavy {heavy:?}, idle {:?}",
            worst(0),
            idle[0]
        );
        // A completion also waits for engine steps: one arriving with the heavy prefill waits
        // for it (the scheduler's part, seconds here), the rest are served as usual.
        let mut completions: Vec<Duration> = during.iter().filter(|p| p.1 == 1).map(|p| p.2).collect();
        completions.sort();
        let typical = completions[completions.len() / 2];
        assert!(
            worst(1) < heavy,
            "/v1/completions: worst {:?}, heavy {heavy:?}",
            worst(1)
        );
        assert!(
            typical < idle[1] * 20 + heavy / 100,
            "/v1/completions: median {typical:?} during it, idle {:?}",
            idle[1]
        );
    });
}
