//! What evaluation and benchmark harnesses (lm-eval, guidellm, inference-perf) read, matched
//! to vLLM and OpenAI on the tiny random-weight model: `echo` with `max_tokens: 0`, the chosen
//! token in `top_logprobs`, `text_offset` in characters, `continuous_usage_stats`, and
//! `vllm:request_max_num_generation_tokens`.

use serde_json::{Value, json};

use crate::common::{Tiny, metric_value, scrape_until, start_tiny};

fn complete(t: &Tiny, body: Value) -> Value {
    let (status, response) = t.post("/v1/completions", &body);
    assert_eq!(status, 200, "{body}: {response}");
    response
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|s| s.as_str().expect("string").to_owned())
        .collect()
}

#[test]
fn echo_with_max_tokens_zero_returns_the_prompt_alone() {
    let t = start_tiny(|_| {});
    let prompt = "The capital of France is";
    let v = complete(
        &t,
        json!({"prompt": prompt, "echo": true, "max_tokens": 0, "logprobs": 1, "temperature": 0}),
    );
    let choice = &v["choices"][0];
    assert_eq!(choice["text"], prompt, "{v}");
    assert_eq!(choice["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 0, "{v}");
    let prompt_tokens = v["usage"]["prompt_tokens"].as_u64().expect("prompt tokens") as usize;
    let tokens = strings(&choice["logprobs"]["tokens"]);
    assert_eq!(tokens.len(), prompt_tokens, "only the prompt's tokens: {v}");
    assert_eq!(tokens.concat(), prompt);
    // Without echo, max_tokens 0 stays a 400, as in vLLM.
    let (status, body) = t.post("/v1/completions", &json!({"prompt": prompt, "max_tokens": 0}));
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("max_tokens")));
}

#[test]
fn top_logprobs_hold_the_chosen_token() {
    let t = start_tiny(|_| {});
    // Sampled at temperature 1 so the chosen token is often not the most likely one.
    for k in [0u64, 1, 3] {
        let v = complete(
            &t,
            json!({"prompt": "hello there", "echo": true, "max_tokens": 12, "logprobs": k,
                   "temperature": 1.0, "seed": 5, "ignore_eos": true}),
        );
        let lp = &v["choices"][0]["logprobs"];
        let tokens = strings(&lp["tokens"]);
        for (i, token) in tokens.iter().enumerate().skip(1) {
            let top = lp["top_logprobs"][i].as_object().expect("top map");
            // Keyed by text, as OpenAI and vLLM send it: tokens that decode alike (byte
            // pieces of the random model) share a key and one of their logprobs, hence the
            // lower bound 1 and no check of the value.
            assert!(
                (1..=k as usize + 1).contains(&top.len()),
                "k {k}, position {i}: {top:?}"
            );
            assert!(top.contains_key(token), "k {k}, position {i}: {token:?} not in {top:?}");
        }
        assert!(lp["top_logprobs"][0].is_null(), "the first prompt token has none");
    }
}

#[test]
fn text_offset_counts_characters() {
    let t = start_tiny(|_| {});
    let prompt = "Héllo wörld ∑ done";
    for stream in [false, true] {
        let body = json!({"prompt": prompt, "echo": true, "max_tokens": 6, "logprobs": 0,
                          "temperature": 0, "ignore_eos": true, "stream": stream});
        let (tokens, offsets) = if stream {
            let (mut tokens, mut offsets) = (Vec::new(), Vec::new());
            for event in t.stream("/v1/completions", &body).iter().filter(|e| *e != "[DONE]") {
                let chunk: Value = serde_json::from_str(event).expect("chunk");
                let lp = &chunk["choices"][0]["logprobs"];
                if lp.is_object() {
                    tokens.extend(strings(&lp["tokens"]));
                    offsets.extend(lp["text_offset"].as_array().expect("offsets").iter().cloned());
                }
            }
            (tokens, offsets)
        } else {
            let v = complete(&t, body);
            let lp = &v["choices"][0]["logprobs"];
            (
                strings(&lp["tokens"]),
                lp["text_offset"].as_array().expect("offsets").clone(),
            )
        };
        let mut expected = Vec::new();
        let mut at = 0u64;
        for token in &tokens {
            expected.push(json!(at));
            at += token.chars().count() as u64;
        }
        assert_eq!(offsets, expected, "stream {stream}: {tokens:?}");
        let bytes: u64 = tokens.iter().map(|s| s.len() as u64).sum();
        assert!(at < bytes, "the prompt has multi-byte characters");
    }
}

#[test]
fn continuous_usage_stats_put_usage_in_every_chunk() {
    let t = start_tiny(|_| {});
    let body = |continuous: bool| {
        json!({"prompt": "abc", "max_tokens": 5, "temperature": 0, "ignore_eos": true, "stream": true,
               "stream_options": {"include_usage": true, "continuous_usage_stats": continuous}})
    };
    let chunks = |continuous: bool| -> Vec<Value> {
        t.stream("/v1/completions", &body(continuous))
            .iter()
            .filter(|e| *e != "[DONE]")
            .map(|e| serde_json::from_str(e).expect("chunk"))
            .collect()
    };
    let all = chunks(true);
    let (with_choices, closing) = all.split_at(all.len() - 1);
    assert_eq!(closing[0]["choices"], json!([]), "{all:?}");
    let mut seen = 0;
    for chunk in with_choices {
        let usage = &chunk["usage"];
        assert_eq!(usage["prompt_tokens"], closing[0]["usage"]["prompt_tokens"], "{chunk}");
        let generated = usage["completion_tokens"].as_u64().expect("completion tokens");
        assert!(generated >= seen, "{chunk}");
        assert_eq!(
            usage["total_tokens"].as_u64(),
            Some(generated + usage["prompt_tokens"].as_u64().unwrap())
        );
        seen = generated;
    }
    assert_eq!(seen, 5);
    assert_eq!(closing[0]["usage"]["completion_tokens"], 5);
    // Off (or without include_usage, as vLLM reads it): only the closing chunk has usage.
    let plain = chunks(false);
    assert!(
        plain[..plain.len() - 1].iter().all(|c| c.get("usage").is_none()),
        "{plain:?}"
    );
}

#[test]
fn max_num_generation_tokens_is_exported_as_vllm_does() {
    let t = start_tiny(|_| {});
    complete(&t, json!({"prompt": "abc", "max_tokens": 7, "temperature": 0}));
    complete(&t, json!({"prompt": "abc", "max_tokens": 3, "temperature": 0}));
    let text = scrape_until(&t, |m| {
        metric_value(m, "vllm:request_max_num_generation_tokens_count", "") == Some(2.0)
    });
    assert_eq!(
        metric_value(&text, "vllm:request_max_num_generation_tokens_sum", ""),
        Some(10.0)
    );
}

#[test]
fn tokenizer_info_is_served_when_enabled_as_in_vllm() {
    let off = start_tiny(|_| {});
    assert_eq!(off.get_text("/tokenizer_info").0, 404);
    let t = start_tiny(|c| c.server.enable_tokenizer_info_endpoint = true);
    let (status, text) = t.get_text("/tokenizer_info");
    assert_eq!(status, 200, "{text}");
    let info: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(info["tokenizer_class"], "PreTrainedTokenizerFast");
    assert!(info["eos_token"].is_string(), "{info}");
    assert!(info["chat_template"].as_str().is_some_and(|s| !s.is_empty()), "{info}");
    let (_, models) = t.get_text("/v1/models");
    let models: Value = serde_json::from_str(&models).expect("models");
    assert_eq!(info["model_max_length"], models["data"][0]["max_model_len"]);
    // The eos token is the one /tokenize knows by that text.
    let eos = info["eos_token"].as_str().expect("eos");
    let (status, tokens) = t.post("/tokenize", &json!({"prompt": eos, "add_special_tokens": false}));
    assert_eq!(status, 200);
    assert_eq!(tokens["tokens"].as_array().map(Vec::len), Some(1), "{tokens}");
    // Documented in the served OpenAPI document only where it is routed.
    let doc = |t: &Tiny| -> Value { serde_json::from_str(&t.get_text("/openapi.json").1).expect("doc") };
    assert!(doc(&t)["paths"].get("/tokenizer_info").is_some());
    assert!(doc(&off)["paths"].get("/tokenizer_info").is_none());
}
