//! Every architecture against an independent implementation: tiny random-weight models under
//! `tests/data/tiny/<arch>/`, made by transformers and converted to GGUF (f32 and q8_0) by
//! llama.cpp's own converter, with transformers' float32 references
//! (`tests/data/tiny/make_fixtures.py`). Each model runs in all three files: the Hugging
//! Face folder and the f32 GGUF against the reference on the original weights, the q8_0 GGUF
//! against the reference on its dequantised weights.

use std::path::{Path, PathBuf};
use std::time::Instant;

use kiln::executor::Executor;
use kiln::testing::{direct_engine, greedy_request, run_to_completion};
use serde_json::Value;

/// Largest allowed |kiln − transformers| for a first-step logit. Both run f32 on the same
/// weights and differ only in summation order (and kiln's RoPE tables, computed in f64):
/// logits here are of magnitude 1–20.
const LOGIT_TOLERANCE: f32 = 1e-3;

pub fn fixture(arch: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tiny").join(arch)
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// The model in each of its files matches the reference: first-step logits, one prompt at a
/// time, then the stable greedy prefix of every prompt decoded together in one batch.
/// `gguf`: whether the fixture has the GGUF conversions (not Mistral's: llama.cpp drops its
/// window).
fn matches_transformers(arch: &str, gguf: bool) {
    let dir = fixture(arch);
    let reference = read_reference(&dir);
    let mut files = vec![(dir.join("hf"), &reference["f32"])];
    if gguf {
        files.push((dir.join(format!("{arch}-f32.gguf")), &reference["f32"]));
        files.push((dir.join(format!("{arch}-q8_0.gguf")), &reference["q8_0"]));
    }
    files_match_reference(&files);
}

/// A fixture folder's `reference.json`.
pub fn read_reference(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("reference.json")).expect("reference.json (make_fixtures.py)");
    serde_json::from_str(&text).expect("json")
}

/// Each model file against its reference cases (make_fixtures.py's `reference()`).
pub fn files_match_reference(files: &[(PathBuf, &Value)]) {
    for (model, cases) in files {
        let label = model.strip_prefix(fixture("")).unwrap_or(model).display().to_string();
        let cases = cases.as_array().expect("cases");
        let (mut scheduler, mut runner) =
            direct_engine(model, |c| c.engine.kv_cache_memory = "8MiB".into()).expect("engine");
        for (i, case) in cases.iter().enumerate() {
            scheduler
                .add(
                    greedy_request(&format!("c{i}"), ids(&case["prompt_ids"]), 1, true),
                    Instant::now(),
                )
                .expect("admitted");
            let batch = scheduler.schedule(Instant::now());
            let logits = runner.logits(&batch);
            let expected = case["first_logits"].as_array().expect("first_logits");
            assert_eq!(logits.len(), expected.len(), "{label} case {i}: vocabulary size");
            let worst = logits
                .iter()
                .zip(expected)
                .map(|(a, b)| (a - b.as_f64().expect("logit") as f32).abs())
                .fold(0.0f32, f32::max);
            assert!(worst <= LOGIT_TOLERANCE, "{label} case {i}: max |Δlogit| {worst}");
            let output = runner.execute(&batch).expect("step");
            scheduler.update_from_output(&batch, output, Instant::now());
            assert!(!scheduler.has_work());
        }
        for (i, case) in cases.iter().enumerate() {
            let steps = case["greedy_ids"].as_array().expect("greedy").len() as u32;
            scheduler
                .add(
                    greedy_request(&format!("g{i}"), ids(&case["prompt_ids"]), steps, true),
                    Instant::now(),
                )
                .expect("admitted");
        }
        let out = run_to_completion(&mut scheduler, &mut runner).tokens;
        for (i, case) in cases.iter().enumerate() {
            let stable = case["stable"].as_u64().expect("stable") as usize;
            let expected = ids(&case["greedy_ids"]);
            assert_eq!(
                &out[&format!("g{i}")][..stable],
                &expected[..stable],
                "{label} case {i}: greedy tokens"
            );
        }
    }
}

#[test]
fn llama_with_llama3_rope_scaling_matches_transformers() {
    matches_transformers("llama", true);
}

#[test]
fn qwen2_with_qkv_biases_matches_transformers() {
    matches_transformers("qwen2", true);
}

#[test]
fn qwen3_with_qk_norms_matches_transformers() {
    matches_transformers("qwen3", true);
}

#[test]
fn mistral_with_a_sliding_window_matches_transformers() {
    matches_transformers("mistral", false);
}

#[test]
fn gemma3_with_local_layers_norms_and_gelu_matches_transformers() {
    matches_transformers("gemma3", true);
}

#[test]
fn phi3_with_fused_qkv_and_gate_up_matches_transformers() {
    matches_transformers("phi3", true);
}
