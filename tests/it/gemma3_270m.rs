//! The real Gemma 3 270M Q4_K_M file (`kiln fetch-model gemma3-270m`) against
//! `tests/data/gemma3-270m/reference.json`: transformers' Gemma3ForCausalLM in float32 on the
//! file's weights dequantised by gguf-py (`make_reference.py` beside it). Needs the file:
//! `.ci/run` fetches it and sets `KILN_TEST_GEMMA3`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use kiln::config::Config;
use kiln::executor::Executor;
use kiln::model::loader::open_model;
use kiln::server::{prepare_model, resolve_model_path};
use kiln::testing::{TestServer, direct_engine, greedy_request};
use kiln::tokenizer::encode_prompt;
use serde_json::{Value, json};

use crate::reference_parity::{GreedyShape, greedy_prefixes_match_alone_and_batched, ids};

/// Largest allowed |kiln − reference| for a first-step logit. Both compute in f32 on the same
/// weight values (kiln multiplies the Q4_K/Q5_0/Q6_K/Q8_0 blocks as repacked or widened at
/// load, the reference their gguf-py dequantisation); only summation order differs. Measured:
/// at most 5.2e-5 (the 800-token prompt) on logits up to ~20, so 1e-3 leaves 20x headroom
/// and still catches any real divergence (a wrong window, RoPE base or norm moves logits by
/// tenths).
const LOGIT_TOLERANCE: f32 = 1e-3;

#[track_caller]
fn model_path() -> PathBuf {
    let Some(path) = std::env::var_os("KILN_TEST_GEMMA3") else {
        panic!("KILN_TEST_GEMMA3 must name gemma-3-270m-q4_k_m.gguf (`kiln fetch-model gemma3-270m`; .ci/run sets it)");
    };
    let path = PathBuf::from(path);
    assert!(path.is_file(), "KILN_TEST_GEMMA3={} is not a file", path.display());
    path
}

fn reference() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gemma3-270m/reference.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("reference.json")).expect("json")
}

fn cases() -> Vec<Value> {
    reference()["cases"].as_array().expect("cases").clone()
}

fn stable(case: &Value) -> usize {
    case["stable"].as_u64().expect("stable") as usize
}

#[test]
#[ignore = "needs the Gemma 3 file (KILN_TEST_GEMMA3); .ci/run provides it"]
fn gemma3_tokenizer_reproduces_every_reference_prompt_and_continuation() {
    let files = open_model(&model_path()).expect("open model");
    for case in cases() {
        let name = &case["name"];
        let text = case["text"].as_str().expect("text");
        // Plain prompts get the model's BOS; chat prompts render it themselves.
        let chat = !case["messages"].is_null();
        let encoded = encode_prompt(&files.tokenizer, text, !chat).expect("encode");
        assert_eq!(encoded, ids(&case["prompt_ids"]), "case {name}: prompt ids");
        let decoded = files
            .tokenizer
            .decode(&ids(&case["greedy_ids"]), false)
            .expect("decode");
        assert_eq!(
            decoded,
            case["greedy_text"].as_str().expect("greedy_text"),
            "case {name}"
        );
    }
}

#[test]
#[ignore = "needs the Gemma 3 file (KILN_TEST_GEMMA3); .ci/run provides it"]
fn gemma3_first_step_logits_match_the_reference() {
    // The whole prompt in one step, as the reference computed it: no step-time budget to chunk it.
    let (mut scheduler, mut runner) = direct_engine(&model_path(), |c| c.scheduler.max_step_ms = 0.0).expect("engine");
    for case in cases() {
        let name = case["name"].as_str().expect("name");
        scheduler
            .add(greedy_request(name, ids(&case["prompt_ids"]), 1, true), Instant::now())
            .expect("admitted");
        let batch = scheduler.schedule(Instant::now());
        let logits = runner.logits(&batch);
        assert_eq!(logits.len(), 262_144, "case {name}: vocabulary");
        let mut worst = 0.0f32;
        for list in ["first_top", "first_spread"] {
            for pair in case[list].as_array().expect(list) {
                let token = pair[0].as_u64().expect("token") as usize;
                worst = worst.max((logits[token] - pair[1].as_f64().expect("logit") as f32).abs());
            }
        }
        eprintln!("case {name}: max |Δlogit| {worst}");
        assert!(
            worst <= LOGIT_TOLERANCE,
            "case {name}: max |Δlogit| {worst} > {LOGIT_TOLERANCE}"
        );
        let output = runner.execute(&batch).expect("step");
        scheduler.update_from_output(&batch, output, Instant::now());
        assert!(!scheduler.has_work());
    }
}

#[test]
#[ignore = "needs the Gemma 3 file (KILN_TEST_GEMMA3); .ci/run provides it"]
fn gemma3_greedy_generation_reproduces_the_stable_prefixes_alone_and_batched() {
    let shape = GreedyShape {
        stable_field: "stable",
        max_tokens: None,
        ignore_eos: false,
    };
    greedy_prefixes_match_alone_and_batched(&model_path(), &cases(), shape);
}

/// `--model gemma3-270m` resolves to the cached file (no network: the cache already holds it),
/// is served under that name, and chat renders Gemma's template (the file has none).
#[test]
#[ignore = "needs the Gemma 3 file (KILN_TEST_GEMMA3); .ci/run provides it"]
fn gemma3_served_by_short_name_answers_chat_as_the_reference() {
    let cache = tempfile::tempdir().expect("tempdir");
    let cached = cache.path().join("gemma-3-270m-q4_k_m.gguf");
    std::os::unix::fs::symlink(model_path(), &cached).expect("symlink");
    std::fs::write(cache.path().join("gemma-3-270m-q4_k_m.gguf.verified"), "").expect("marker");
    let mut config = Config::default();
    config.model.path = "gemma3-270m".into();
    config.model.cache_dir = cache.path().display().to_string();
    config.engine.kv_cache_memory = "64MiB".into();
    let path = resolve_model_path(&config).expect("resolves");
    assert_eq!(path, cached);
    let prepared = prepare_model(&config, open_model(&path).expect("open")).expect("prepare");
    let server = TestServer::start(config, prepared).expect("server");
    let client = reqwest::blocking::Client::new();
    let models: Value = client
        .get(server.url("/v1/models"))
        .send()
        .expect("models")
        .json()
        .expect("json");
    assert_eq!(models["data"][0]["id"], "gemma3-270m");
    let post = |path: &str, body: Value| -> Value {
        let response = client.post(server.url(path)).json(&body).send().expect(path);
        assert_eq!(response.status(), 200, "{path}");
        response.json().expect("json")
    };
    let files = open_model(&model_path()).expect("open model");
    for case in cases().iter().filter(|c| !c["messages"].is_null()) {
        let name = &case["name"];
        let rendered = post(
            "/tokenize",
            json!({"model": "gemma3-270m", "messages": case["messages"]}),
        );
        assert_eq!(
            ids(&rendered["tokens"]),
            ids(&case["prompt_ids"]),
            "case {name}: rendered prompt"
        );
        let expected = ids(&case["greedy_ids"])[..stable(case)].to_vec();
        let body = json!({
            "model": "gemma3-270m",
            "messages": case["messages"],
            "temperature": 0,
            "max_tokens": expected.len(),
        });
        let response = post("/v1/chat/completions", body);
        let expected_text = files.tokenizer.decode(&expected, true).expect("decode");
        assert_eq!(
            response["choices"][0]["message"]["content"],
            expected_text.as_str(),
            "case {name}"
        );
    }
}

/// `kiln fetch-model` prints a cached known model's path without the network, and refuses an
/// unknown name with the list of known ones.
#[test]
#[ignore = "needs the Gemma 3 file (KILN_TEST_GEMMA3); .ci/run provides it"]
fn gemma3_fetch_model_prints_the_cached_file() {
    let cache = tempfile::tempdir().expect("tempdir");
    let cached = cache.path().join("gemma-3-270m-q4_k_m.gguf");
    std::os::unix::fs::symlink(model_path(), &cached).expect("symlink");
    std::fs::write(cache.path().join("gemma-3-270m-q4_k_m.gguf.verified"), "").expect("marker");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["fetch-model", "gemma3-270m", "--cache-dir"])
        .arg(cache.path())
        .output()
        .expect("run kiln");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        cached.display().to_string()
    );
}

#[test]
fn fetch_model_refuses_an_unknown_name_with_the_known_ones() {
    let cache = tempfile::tempdir().expect("tempdir");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["fetch-model", "gemma3-27b", "--cache-dir"])
        .arg(cache.path())
        .env("NO_COLOR", "1")
        .output()
        .expect("run kiln");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no model called `gemma3-27b`; known models: smollm2-135m, gemma3-270m"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
    assert_eq!(
        std::fs::read_dir(cache.path()).expect("cache").count(),
        0,
        "nothing fetched"
    );
}
