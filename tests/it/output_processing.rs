//! Output processing off the HTTP workers and bounded (issue 28, defect 3): a stream of
//! bytes that never completes a character comes out as it is generated (the detokenizer holds
//! back a few tokens, not everything since the last complete character); a long prompt's
//! logprobs are computed in bounded passes with the same values.

use kiln::testing::TinyModelSpec;
use serde_json::{Value, json};

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
