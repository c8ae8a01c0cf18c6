//! vLLM's tokenizer endpoints and the sampling parameters users send (issue 16, items 3–4):
//! `/tokenize` and `/detokenize`, `logit_bias`, `min_tokens`, `echo`, `prompt_logprobs`,
//! `suffix`, and `usage.completion_tokens` up to a stop string. The real server on the tiny
//! model; the real default model where the tokenizer matters.

use serde_json::{Value, json};

use crate::common::{Tiny, metric_value, scrape_until, start_tiny};

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_u64().expect("id"))
        .collect()
}

fn greedy(t: &Tiny, extra: Value) -> Value {
    let mut body = json!({"prompt": "hello world", "max_tokens": 6, "temperature": 0, "ignore_eos": true});
    body.as_object_mut()
        .expect("object")
        .extend(extra.as_object().expect("object").clone());
    let (status, v) = t.post("/v1/completions", &body);
    assert_eq!(status, 200, "{body} -> {v}");
    v
}

/// The `param` of a request's 400.
fn refused_param(t: &Tiny, path: &str, body: Value) -> String {
    let (status, v) = t.post(path, &body);
    assert_eq!(status, 400, "{body} -> {v}");
    v["error"]["param"].as_str().unwrap_or("<none>").to_owned()
}

#[test]
fn tokenize_and_detokenize_speak_vllms_shapes() {
    let t = start_tiny(|_| {});
    let body = json!({"prompt": "hello world", "return_token_strs": true, "add_special_tokens": false});
    let (s, v) = t.post("/tokenize", &body);
    assert_eq!(s, 200, "{v}");
    let tokens = ids(&v["tokens"]);
    assert!(!tokens.is_empty());
    assert_eq!(v["count"], tokens.len());
    assert!(v["max_model_len"].as_u64().expect("max_model_len") > 0);
    assert_eq!(v["token_strs"].as_array().expect("token_strs").len(), tokens.len());
    let (s, back) = t.post("/detokenize", &json!({"tokens": tokens}));
    assert_eq!(s, 200, "{back}");
    assert_eq!(back["prompt"], "hello world");

    // The same tokens the completions endpoint sees: its usage counts them.
    let v2 = greedy(&t, json!({"max_tokens": 1}));
    assert_eq!(v2["usage"]["prompt_tokens"], tokens.len());

    // Messages go through the chat template, with or without the assistant header.
    let messages = json!([{"role": "user", "content": "hi"}]);
    let (s, with) = t.post("/tokenize", &json!({"messages": messages}));
    assert_eq!(s, 200, "{with}");
    let (s, without) = t.post(
        "/tokenize",
        &json!({"messages": messages, "add_generation_prompt": false}),
    );
    assert_eq!(s, 200, "{without}");
    assert!(
        with["count"].as_u64() > without["count"].as_u64(),
        "{with} vs {without}"
    );
    assert!(with.get("token_strs").is_none(), "only when asked");

    assert_eq!(
        refused_param(&t, "/detokenize", json!({"tokens": [1, 99999999]})),
        "tokens"
    );
    assert_eq!(
        refused_param(&t, "/tokenize", json!({"prompt": "a", "messages": messages})),
        "messages"
    );
    let (s, _) = t.post("/tokenize", &json!({"prompt": "a", "model": "other"}));
    assert_eq!(s, 404);
    let text = scrape_until(&t, |m| {
        metric_value(m, "http_requests_total", "handler=\"/detokenize\"").is_some()
            && metric_value(m, "http_requests_total", "handler=\"/tokenize\"").is_some()
    });
    assert!(text.contains("handler=\"/tokenize\""));
}

#[test]
fn logit_bias_forces_and_bans_tokens_on_both_endpoints() {
    let t = start_tiny(|_| {});
    let (_, v) = t.post("/tokenize", &json!({"prompt": " zebra", "add_special_tokens": false}));
    let forced = ids(&v["tokens"])[0];
    let bias = json!({ forced.to_string(): 100 });
    let v = greedy(&t, json!({"logit_bias": bias, "max_tokens": 3}));
    let text = v["choices"][0]["text"].as_str().expect("text");
    let (_, back) = t.post("/detokenize", &json!({"tokens": [forced, forced, forced]}));
    assert_eq!(text, back["prompt"], "+100 makes greedy output that token every time");

    // -100 on that token beside +99 on another: the other one comes instead.
    let (_, v) = t.post("/tokenize", &json!({"prompt": "k", "add_special_tokens": false}));
    let other = ids(&v["tokens"])[0];
    assert_ne!(other, forced);
    let (_, other_text) = t.post("/detokenize", &json!({"tokens": [other]}));
    let banned = greedy(
        &t,
        json!({"max_tokens": 1, "logit_bias": { forced.to_string(): -100, other.to_string(): 99 }}),
    );
    assert_eq!(banned["choices"][0]["text"], other_text["prompt"], "{banned}");

    let (s, chat) = t.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": 0,
                "ignore_eos": true, "logit_bias": bias}),
    );
    assert_eq!(s, 200, "{chat}");
    let (_, two) = t.post("/detokenize", &json!({"tokens": [forced, forced]}));
    assert_eq!(chat["choices"][0]["message"]["content"], two["prompt"], "{chat}");

    for bad in [
        json!({"99999999": 1}),
        json!({"abc": 1}),
        json!({"5": 101}),
        json!({"5": -100.5}),
    ] {
        let body = json!({"prompt": "hi", "logit_bias": bad});
        assert_eq!(refused_param(&t, "/v1/completions", body), "logit_bias");
        let body = json!({"messages": [{"role": "user", "content": "hi"}], "logit_bias": bad});
        assert_eq!(refused_param(&t, "/v1/chat/completions", body), "logit_bias");
    }
}

#[test]
fn min_tokens_masks_stop_tokens_until_reached() {
    let t = start_tiny(|_| {});
    // A token forced by logit_bias and named as a stop token ends the choice at once ...
    let (_, v) = t.post("/tokenize", &json!({"prompt": " zebra", "add_special_tokens": false}));
    let first = ids(&v["tokens"])[0];
    let bias = json!({ first.to_string(): 100 });
    let stopped = greedy(&t, json!({"stop_token_ids": [first], "logit_bias": bias}));
    assert_eq!(stopped["usage"]["completion_tokens"], 1, "{stopped}");
    // ... unless min_tokens holds it back, then it may stop after them.
    let held = greedy(
        &t,
        json!({"stop_token_ids": [first], "logit_bias": bias, "min_tokens": 4, "max_tokens": 6}),
    );
    let n = held["usage"]["completion_tokens"].as_u64().expect("tokens");
    assert!(n >= 4, "min_tokens 4 gave {n} tokens: {held}");

    assert_eq!(
        refused_param(
            &t,
            "/v1/completions",
            json!({"prompt": "a", "min_tokens": 5, "max_tokens": 4})
        ),
        "min_tokens"
    );
    assert_eq!(
        refused_param(&t, "/v1/completions", json!({"prompt": "a", "min_tokens": -1})),
        "min_tokens"
    );
}

#[test]
fn echo_returns_the_prompt_and_its_logprobs_which_match_prompt_logprobs() {
    let t = start_tiny(|_| {});
    let (_, tok) = t.post(
        "/tokenize",
        &json!({"prompt": "hello world", "add_special_tokens": false}),
    );
    let prompt_len = ids(&tok["tokens"]).len();
    let v = greedy(
        &t,
        json!({"echo": true, "logprobs": 1, "prompt_logprobs": 1, "max_tokens": 2}),
    );
    let choice = &v["choices"][0];
    let text = choice["text"].as_str().expect("text");
    assert!(
        text.starts_with("hello world") && text.len() > "hello world".len(),
        "{text:?}"
    );
    let lp = &choice["logprobs"];
    let token_logprobs = lp["token_logprobs"].as_array().expect("token_logprobs");
    assert_eq!(token_logprobs.len(), prompt_len + 2, "{lp}");
    assert!(token_logprobs[0].is_null(), "the first prompt token has no logprob");
    assert!(lp["top_logprobs"][0].is_null());
    let prompt_logprobs = choice["prompt_logprobs"].as_array().expect("prompt_logprobs");
    assert_eq!(prompt_logprobs.len(), prompt_len);
    assert!(prompt_logprobs[0].is_null());
    let prompt_ids = ids(&tok["tokens"]);
    for p in 1..prompt_len {
        let entry = &prompt_logprobs[p][prompt_ids[p].to_string()];
        let logprob = entry["logprob"].as_f64().expect("logprob");
        assert!(logprob <= 0.0 && entry["rank"].as_u64().expect("rank") >= 1, "{entry}");
        let echoed = token_logprobs[p].as_f64().expect("echoed logprob");
        assert!((echoed - logprob).abs() < 1e-4, "position {p}: {echoed} vs {logprob}");
    }
    assert_eq!(
        v["usage"]["completion_tokens"], 2,
        "the echo is not billed as completion"
    );

    // Echo alone: the prompt text, no logprobs.
    let v = greedy(&t, json!({"echo": true, "max_tokens": 1}));
    assert!(
        v["choices"][0]["text"]
            .as_str()
            .expect("text")
            .starts_with("hello world")
    );
    assert!(v["choices"][0]["logprobs"].is_null());
    assert_eq!(
        refused_param(&t, "/v1/completions", json!({"prompt": "a", "prompt_logprobs": 21})),
        "prompt_logprobs"
    );
}

/// Chat answers `prompt_logprobs` once, at the top of the response, for the prompt the chat
/// template rendered (the tokens `/tokenize` gives for the same messages); not with `stream`,
/// as in vLLM.
#[test]
fn chat_answers_prompt_logprobs_for_the_rendered_prompt() {
    let t = start_tiny(|_| {});
    let messages = json!([{"role": "user", "content": "hello world"}]);
    let (_, tok) = t.post("/tokenize", &json!({"messages": messages}));
    let prompt_ids = ids(&tok["tokens"]);
    let body = json!({"messages": messages, "max_tokens": 2, "n": 2, "prompt_logprobs": 2});
    let (status, v) = t.post("/v1/chat/completions", &body);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["prompt_tokens"], prompt_ids.len(), "{v}");
    let positions = v["prompt_logprobs"].as_array().expect("top-level prompt_logprobs");
    assert_eq!(positions.len(), prompt_ids.len());
    assert!(positions[0].is_null(), "the first prompt token has no logprob");
    for (p, position) in positions.iter().enumerate().skip(1) {
        let map = position.as_object().expect("a map per position");
        let own = &map[&prompt_ids[p].to_string()];
        assert!(own["logprob"].as_f64().expect("logprob") <= 0.0, "{own}");
        assert!(
            (1..=3).contains(&map.len()),
            "the prompt's token and the top 2: {map:?}"
        );
        assert!(
            map.values().any(|e| e["rank"] == 1),
            "the most likely token is listed: {map:?}"
        );
    }
    assert!(
        v["choices"][0].get("prompt_logprobs").is_none(),
        "once per response, not per choice"
    );
    let (status, plain) = t.post("/v1/chat/completions", &json!({"messages": messages, "max_tokens": 1}));
    assert_eq!(status, 200);
    assert!(plain.get("prompt_logprobs").is_none(), "only when asked: {plain}");
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    assert_eq!(refused_param(&t, "/v1/chat/completions", streamed), "prompt_logprobs");
}

#[test]
fn prompt_logprobs_skip_the_prefix_cache() {
    let t = start_tiny(|c| c.engine.enable_prefix_caching = true);
    let prompt = "a long shared system prompt, the same every time ".repeat(3);
    let body = json!({"prompt": prompt, "max_tokens": 1, "prompt_logprobs": 0});
    let (s, first) = t.post("/v1/completions", &body);
    assert_eq!(s, 200, "{first}");
    // Fill the cache with the same prompt without prompt logprobs.
    let (_, plain) = t.post("/v1/completions", &json!({"prompt": prompt, "max_tokens": 1}));
    let (_, cached) = t.post("/v1/completions", &json!({"prompt": prompt, "max_tokens": 1}));
    assert!(
        cached["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64() > Some(0),
        "the prompt is cached: {plain} {cached}"
    );
    let (s, again) = t.post("/v1/completions", &body);
    assert_eq!(s, 200);
    assert_eq!(again["usage"]["prompt_tokens_details"]["cached_tokens"], 0, "{again}");
    let entries = again["choices"][0]["prompt_logprobs"]
        .as_array()
        .expect("prompt_logprobs");
    assert_eq!(
        entries.len() as u64,
        again["usage"]["prompt_tokens"].as_u64().expect("prompt_tokens")
    );
    assert_eq!(
        first["choices"][0]["prompt_logprobs"],
        again["choices"][0]["prompt_logprobs"]
    );
}

#[test]
fn completion_tokens_count_the_tokens_returned_up_to_the_stop_string() {
    let t = start_tiny(|_| {});
    let full = greedy(&t, json!({"max_tokens": 12, "logprobs": 0}));
    let tokens: Vec<String> = full["choices"][0]["logprobs"]["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|s| s.as_str().expect("token").to_owned())
        .collect();
    // Stop on the text of the 4th token: the answer ends before it, 4 tokens billed.
    let stop = tokens[3].clone();
    let k = tokens.iter().position(|s| s.contains(stop.as_str())).expect("found") + 1;
    let v = greedy(&t, json!({"max_tokens": 12, "stop": [stop], "logprobs": 0}));
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    assert_eq!(v["usage"]["completion_tokens"], k, "{v}");
    assert_eq!(v["choices"][0]["logprobs"]["tokens"].as_array().map(Vec::len), Some(k));
}

#[test]
fn suffix_is_refused_without_fill_in_the_middle_tokens() {
    let t = start_tiny(|_| {});
    assert_eq!(
        refused_param(&t, "/v1/completions", json!({"prompt": "def f(", "suffix": "return 1"})),
        "suffix"
    );
    greedy(&t, json!({"suffix": ""}));
    let (_, doc) = t.get_text("/openapi.json");
    let doc: Value = serde_json::from_str(&doc).expect("document");
    let suffix = &doc["components"]["schemas"]["CompletionRequest"]["properties"]["suffix"];
    assert_eq!(suffix["maxLength"], 0, "the served document says so: {suffix}");
}

#[test]
#[ignore = "needs the real model (KILN_TEST_MODEL); .ci/run provides it"]
fn the_real_tokenizer_round_trips_through_tokenize_and_detokenize() {
    use kiln::config::Config;
    use kiln::model::loader::open_model;
    use kiln::server::prepare_model;
    use kiln::testing::TestServer;
    use kiln::testing::real_model::{greedy_reference, model_path};

    let model = model_path();
    let mut config = Config::default();
    config.model.path = model.display().to_string();
    config.engine.kv_cache_memory = "256MiB".into();
    let prepared = prepare_model(&config, open_model(&model).expect("open model")).expect("prepare");
    let server = TestServer::start(config, prepared).expect("server");
    let client = reqwest::blocking::Client::new();
    let post = |path: &str, body: Value| -> Value {
        let resp = client.post(server.url(path)).json(&body).send().expect("request");
        assert_eq!(resp.status().as_u16(), 200);
        resp.json().expect("json")
    };
    for case in greedy_reference()["cases"].as_array().expect("cases") {
        let text = case["text"].as_str().expect("text");
        let v = post("/tokenize", json!({"prompt": text, "return_token_strs": true}));
        assert_eq!(ids(&v["tokens"]), ids(&case["prompt_ids"]), "case {}", case["name"]);
        assert!(v["max_model_len"].as_u64() > Some(0), "{v}");
        assert_eq!(
            v["token_strs"].as_array().map(Vec::len),
            Some(v["tokens"].as_array().expect("tokens").len())
        );
        let back = post("/detokenize", json!({"tokens": v["tokens"]}));
        assert_eq!(back["prompt"], text, "case {}", case["name"]);
    }
}

/// Prompt logprobs cost prompt tokens × (alternatives + 1) × `n` entries, each computed,
/// decoded and written: a body over `--max-prompt-logprob-entries` is refused with a 400 that
/// names the field that asked and every factor, and one at the bound is served.
#[test]
fn prompt_logprob_work_over_the_bound_is_refused_naming_its_parameters() {
    let t = start_tiny(|c| c.limits.max_prompt_logprob_entries = 600);
    let prompt: Vec<u64> = (0..100).map(|i| 40 + i % 50).collect();
    let completion = |extra: Value| {
        let mut body = json!({"prompt": prompt, "max_tokens": 1, "temperature": 0});
        body.as_object_mut()
            .expect("object")
            .extend(extra.as_object().expect("object").clone());
        t.post("/v1/completions", &body)
    };
    let refused = |(status, v): (u16, Value), param: &str| -> String {
        assert_eq!(status, 400, "{v}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        assert_eq!(v["error"]["param"], param, "{v}");
        v["error"]["message"].as_str().expect("message").to_owned()
    };
    // 100 × (2 + 1) × 2 = 600: at the bound, served.
    let (status, v) = completion(json!({"prompt_logprobs": 2, "n": 2}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][1]["prompt_logprobs"].as_array().map(Vec::len), Some(100));
    // A third choice: 900.
    let message = refused(completion(json!({"prompt_logprobs": 2, "n": 3})), "prompt_logprobs");
    for part in [
        "`prompt_logprobs` 2",
        "`n` 3",
        "100 prompt tokens",
        "= 900",
        "at most 600",
    ] {
        assert!(message.contains(part), "{part:?} missing from {message:?}");
    }
    // `echo` with `logprobs` asks for the same work under another name: 100 × 6 × 1 passes,
    // 100 × 7 × 1 does not.
    let (status, v) = completion(json!({"echo": true, "logprobs": 5}));
    assert_eq!(status, 200, "{v}");
    let message = refused(completion(json!({"echo": true, "logprobs": 6})), "logprobs");
    assert!(message.contains("`echo` with `logprobs` 6"), "{message}");
    // Chat's rendered prompt counts the same way.
    let (status, v) = t.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "n": 16, "prompt_logprobs": 20}),
    );
    refused((status, v), "prompt_logprobs");
    // The server still serves after the refusals.
    let (status, v) = completion(json!({"max_tokens": 2}));
    assert_eq!(status, 200, "{v}");
}
