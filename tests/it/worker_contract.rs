//! The routers' worker contract on a real server (the tiny model): each endpoint in the shape
//! vllm-router and smg parse, the prefix cache reset through the scheduler, the render
//! endpoints' token ids equal to what generation uses, and a request pinned to a rank this
//! one-engine server does not have refused with a 400 naming it.

use serde_json::{Value, json};

use crate::common::{Tiny, metric_value, start_tiny};

fn get(t: &Tiny, path: &str) -> Value {
    let (status, text) = t.get_text(path);
    assert_eq!(status, 200, "{path}: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"))
}

#[test]
fn load_and_info_endpoints_answer_in_the_routers_shapes() {
    let t = start_tiny(|c| c.engine.block_size = 4);
    let load = get(&t, "/get_load");
    assert_eq!(load["load"], 0, "{load}");
    assert!(load["load"].is_i64(), "power_of_two reads an integer: {load}");
    let loads = get(&t, "/v1/loads");
    assert_eq!(loads["dp_rank_count"], 1, "{loads}");
    assert_eq!(loads["loads"][0]["dp_rank"], 0, "{loads}");
    assert_eq!(loads["loads"][0]["num_running_reqs"], 0, "{loads}");
    assert!(loads["loads"][0]["max_total_num_tokens"].as_u64() > Some(0), "{loads}");
    assert_eq!(loads["aggregate"]["total_reqs"], 0, "{loads}");
    let info = get(&t, "/get_server_info");
    assert_eq!(info["dp_size"], 1, "{info}");
    assert_eq!(info["block_size"], 4, "{info}");
    assert_eq!(
        info["prefix_caching_hash_algo"], "kiln",
        "no KV events: kiln's own: {info}"
    );
    let (_, models) = t.get_text("/v1/models");
    let models: Value = serde_json::from_str(&models).expect("models");
    let card = &models["data"][0];
    assert_eq!(info["max_model_len"], card["max_model_len"], "{info}");
    assert_eq!(card["root"], card["id"], "{card}");
    assert!(card.get("parent").is_some_and(Value::is_null), "{card}");
    assert_eq!(get(&t, "/server_info")["vllm_config"], info);
    let model = get(&t, "/get_model_info");
    assert_eq!(model["model_path"], card["id"], "{model}");
    assert_eq!(model["is_generation"], true, "{model}");
    // The deep health check generates one token: the engine counts it.
    let before = metric_value(&t.get_text("/metrics").1, "vllm:request_success_total", "length").unwrap_or(0.0);
    assert_eq!(t.get_text("/health_generate").0, 200);
    let after = metric_value(&t.get_text("/metrics").1, "vllm:request_success_total", "length").unwrap_or(0.0);
    assert_eq!(after - before, 1.0);
    // smg's cache view.
    let metrics = t.get_text("/metrics").1;
    assert!(
        metric_value(&metrics, "vllm:gpu_prefix_cache_hit_rate", "").is_some(),
        "{metrics}"
    );
}

fn cached_tokens(t: &Tiny, prompt: &[u32]) -> u64 {
    let (status, body) = t.post("/v1/completions", &json!({"prompt": prompt, "max_tokens": 2}));
    assert_eq!(status, 200, "{body}");
    body["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("cached_tokens")
}

#[test]
fn flush_cache_and_reset_prefix_cache_empty_the_prefix_cache() {
    let t = start_tiny(|c| {
        c.engine.block_size = 4;
        c.engine.enable_prefix_caching = true;
    });
    let prompt: Vec<u32> = (3..23).collect();
    for path in ["/reset_prefix_cache", "/flush_cache"] {
        cached_tokens(&t, &prompt);
        assert!(cached_tokens(&t, &prompt) >= 16, "the repeat hits the cache");
        let (status, body) = t.post(path, &json!({}));
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(cached_tokens(&t, &prompt), 0, "{path} emptied the cache");
    }
    let (status, _) = t.post("/flush_cache", &json!({}));
    assert_eq!(status, 200, "an empty cache flushes too");
}

#[test]
fn render_gives_the_token_ids_generation_computes() {
    let t = start_tiny(|_| {});
    let (status, rendered) = t.post(
        "/v1/completions/render",
        &json!({"prompt": ["Hello there", "Hi"], "max_tokens": 3}),
    );
    assert_eq!(status, 200, "{rendered}");
    let rendered = rendered.as_array().expect("one entry per prompt").clone();
    assert_eq!(rendered.len(), 2);
    let (_, tokenized) = t.post("/tokenize", &json!({"prompt": "Hello there"}));
    assert_eq!(rendered[0]["token_ids"], tokenized["tokens"], "{rendered:?}");
    assert_eq!(rendered[0]["sampling_params"]["max_tokens"], 3);
    let (_, completion) = t.post("/v1/completions", &json!({"prompt": "Hello there", "max_tokens": 1}));
    assert_eq!(
        rendered[0]["token_ids"].as_array().map(Vec::len),
        completion["usage"]["prompt_tokens"].as_u64().map(|n| n as usize),
        "{completion}"
    );

    let messages = json!([{"role": "user", "content": "What is a kiln?"}]);
    let (status, chat) = t.post("/v1/chat/completions/render", &json!({"messages": messages}));
    assert_eq!(status, 200, "{chat}");
    let (_, tokenized) = t.post("/tokenize", &json!({"messages": messages}));
    assert_eq!(chat["token_ids"], tokenized["tokens"], "{chat}");
    let room = tokenized["max_model_len"].as_u64().expect("context") - tokenized["count"].as_u64().expect("count");
    assert_eq!(
        chat["sampling_params"]["max_tokens"], room,
        "an open max_tokens fills the context"
    );
    // The same 400s as generation.
    let (status, err) = t.post("/v1/chat/completions/render", &json!({"messages": []}));
    assert_eq!(status, 400, "{err}");
    let (status, err) = t.post("/v1/completions/render", &json!({"prompt": "x", "model": "other"}));
    assert_eq!(status, 404, "{err}");
}

#[test]
fn a_rank_this_server_does_not_have_is_a_400_naming_it() {
    let t = start_tiny(|_| {});
    let url = t.server.url("/v1/completions");
    let body = json!({"prompt": "Hi", "max_tokens": 1});
    let send = |rank: &str| {
        t.client
            .post(&url)
            .header("X-data-parallel-rank", rank)
            .json(&body)
            .send()
            .expect("send")
    };
    assert_eq!(send("0").status().as_u16(), 200);
    let refused = send("1");
    assert_eq!(refused.status().as_u16(), 400);
    let error: Value = refused.json().expect("json");
    assert_eq!(error["error"]["param"], "X-data-parallel-rank", "{error}");
    assert!(
        error["error"]["message"].as_str().is_some_and(|m| m.contains("rank 1")),
        "{error}"
    );
    for path in ["/v1/completions", "/v1/completions/render"] {
        let (status, error) = t.post(path, &json!({"prompt": "Hi", "max_tokens": 1, "data_parallel_rank": 3}));
        assert_eq!(status, 400, "{path}: {error}");
        assert_eq!(error["error"]["param"], "data_parallel_rank", "{error}");
    }
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "data_parallel_rank": 1});
    let (status, error) = t.post("/v1/chat/completions", &chat);
    assert_eq!(status, 400, "{error}");
    let (status, _) = t.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "data_parallel_rank": 0}),
    );
    assert_eq!(status, 200);
}
