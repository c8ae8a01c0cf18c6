//! The default model re-quantised to Q4_K_M by llama.cpp's own `llama-quantize`
//! (`KILN_TEST_Q4KM`: `.ci/run` makes it and checks its sha256) against transformers on the
//! file's dequantised weights (`tests/data/smollm2-q4_k_m/`, made by `make_reference.py`).
//! Its Q4_K and Q6_K tensors run on the packed kernels; Q5_0 and Q8_0 (the rows of 576,
//! not whole 256-element super-blocks, that llama-quantize falls back on) too.

use std::path::{Path, PathBuf};

use kiln::model::fetch::sha256_file;
use kiln::model::gguf::GgufFile;
use serde_json::{Value, json};

use crate::common::process::Launch;
use crate::reference_parity::{GreedyShape, first_logits_match_top10, greedy_prefixes_match_alone_and_batched};

/// As the Q4_1 file's test: both run f32 on the same weights and differ in summation order.
const LOGIT_TOLERANCE: f32 = 1e-3;

fn model() -> PathBuf {
    let Some(path) = std::env::var_os("KILN_TEST_Q4KM") else {
        panic!("KILN_TEST_Q4KM must name the default model's Q4_K_M GGUF (.ci/run makes it and sets it)");
    };
    PathBuf::from(path)
}

fn reference() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/smollm2-q4_k_m/reference.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("reference.json")).expect("json")
}

fn cases() -> Vec<Value> {
    reference()["cases"].as_array().expect("cases").clone()
}

#[test]
#[ignore = "needs KILN_TEST_Q4KM; .ci/run makes it"]
fn the_file_is_the_one_the_reference_ran_on_and_runs_packed() {
    let path = model();
    let digest = sha256_file(&path).expect("hash");
    assert_eq!(
        digest,
        reference()["gguf_sha256"].as_str().expect("sha256"),
        "{}",
        path.display()
    );
    let file = GgufFile::open(&path).expect("open");
    let types: Vec<String> = file.tensors().iter().map(|t| t.ty.to_string()).collect();
    for ty in ["Q4_K", "Q6_K"] {
        assert!(types.iter().any(|t| t == ty), "no {ty} tensor");
    }
    assert!(file.types_widened_at_load().is_empty(), "all of {types:?} run packed");
}

#[test]
#[ignore = "needs KILN_TEST_Q4KM; .ci/run makes it"]
fn first_step_logits_match_the_reference_top10() {
    first_logits_match_top10(&model(), &cases(), LOGIT_TOLERANCE);
}

#[test]
#[ignore = "needs KILN_TEST_Q4KM; .ci/run makes it"]
fn greedy_generation_reproduces_the_stable_prefixes() {
    greedy_prefixes_match_alone_and_batched(&model(), &cases(), GreedyShape::SMOLLM2);
}

#[test]
#[ignore = "needs KILN_TEST_Q4KM; .ci/run makes it"]
fn kiln_serve_answers_with_the_reference_greedy_text() {
    let kiln = Launch {
        model: Some(model()),
        ..Launch::default()
    }
    .arg("--served-model-name", "smollm2-q4km")
    .start();
    for case in cases() {
        let name = case["name"].as_str().expect("name");
        let body = json!({
            "model": "smollm2-q4km",
            "prompt": case["prompt_ids"],
            "max_tokens": 32,
            "temperature": 0,
        });
        let response = kiln
            .client
            .post(kiln.url("/v1/completions"))
            .json(&body)
            .send()
            .expect("request");
        assert_eq!(response.status(), 200, "case {name}");
        let answer: Value = response.json().expect("json");
        let text = answer["choices"][0]["text"].as_str().expect("text");
        let stable = case["stable_prefix_text"].as_str().expect("stable text");
        assert!(
            text.starts_with(stable),
            "case {name}: {text:?} does not start with {stable:?}"
        );
    }
}
