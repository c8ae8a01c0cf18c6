//! LoRA adapters against transformers + PEFT: tiny random-weight adapters made by PEFT on the
//! tiny models (`tests/data/tiny/make_lora_fixtures.py`), with float32 references. Each
//! adapter alone (first-step logits and greedy tokens), several adapters and the base model
//! mixed in one batch, and the served API (model lookup, `/v1/models`, streaming, chat).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use kiln::config::{Config, LoraModule};
use kiln::executor::Executor;
use kiln::scheduler::NewRequest;
use kiln::testing::{direct_engine, greedy_request, run_to_completion};
use serde_json::{Value, json};

use crate::arch_parity::{fixture, read_reference};
use crate::common::start_model;

/// Largest allowed |kiln − transformers + PEFT| for a first-step logit: both run f32 on the
/// same weights; kiln folds the scaling into B and sums in another order. Logits are of
/// magnitude 1–20, as in `arch_parity`.
pub(crate) const LOGIT_TOLERANCE: f32 = 1e-3;

/// An adapter's path under `tests/data/tiny/<arch>/lora/`: a PEFT folder, or a `.gguf` file.
pub(crate) fn adapter_dir(arch: &str, name: &str) -> PathBuf {
    fixture(arch).join("lora").join(name)
}

/// The real `kiln` binary's launch on the tiny llama with its `all` adapter served as `all`.
pub(crate) fn launch_with_tiny_adapter() -> crate::common::process::Launch {
    let mut launch = crate::common::process::Launch {
        model: Some(fixture("llama").join("hf")),
        ..Default::default()
    };
    launch.args.extend([
        "--enable-lora".into(),
        "--lora-modules".into(),
        format!("all={}", adapter_dir("llama", "all").display()),
    ]);
    launch
}

/// The base model's id as `/v1/models` lists it first.
pub(crate) fn served_base(kiln: &crate::common::process::KilnProcess) -> String {
    let models: Value = kiln
        .client
        .get(kiln.url("/v1/models"))
        .send()
        .expect("models")
        .json()
        .expect("json");
    models["data"][0]["id"].as_str().expect("base").to_owned()
}

pub(crate) fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// Serves `adapters` of `arch` (ids from 1, in order), at most `max_loras` in a step.
pub(crate) fn with_adapters(arch: &str, adapters: &[&str], max_loras: usize) -> impl FnOnce(&mut Config) {
    let modules: Vec<LoraModule> = adapters
        .iter()
        .map(|name| LoraModule {
            name: name.to_string(),
            path: adapter_dir(arch, name).display().to_string(),
            base_model_name: None,
        })
        .collect();
    move |c: &mut Config| {
        c.engine.kv_cache_memory = "8MiB".into();
        c.lora.enable_lora = true;
        c.lora.lora_modules = modules;
        c.lora.max_loras = max_loras;
    }
}

pub(crate) fn under(id: &str, lora: Option<u32>, prompt: Vec<u32>, max_tokens: u32) -> NewRequest {
    NewRequest {
        lora,
        ..greedy_request(id, prompt, max_tokens, true)
    }
}

fn adapter_matches_peft(arch: &str, adapter: &str) {
    served_adapter_matches_peft(&fixture(arch).join("hf"), arch, adapter, adapter);
}

/// The adapter `served` (under `lora/`) on the base `model`: its first-step logits, one prompt
/// at a time, then its greedy tokens with every prompt in one batch, against transformers +
/// PEFT's `reference` adapter.
pub(crate) fn served_adapter_matches_peft(model: &std::path::Path, arch: &str, served: &str, reference: &str) {
    let adapter = served;
    let reference = read_reference(&adapter_dir(arch, reference));
    let cases = reference["f32"].as_array().expect("cases");
    let (mut scheduler, mut runner) = direct_engine(model, with_adapters(arch, &[adapter], 1)).expect("engine");
    let mut worst = 0.0f32;
    for (i, case) in cases.iter().enumerate() {
        scheduler
            .add(
                under(&format!("c{i}"), Some(1), ids(&case["prompt_ids"]), 1),
                Instant::now(),
            )
            .expect("admitted");
        let batch = scheduler.schedule(Instant::now());
        let logits = runner.logits(&batch);
        let expected = case["first_logits"].as_array().expect("first_logits");
        assert_eq!(logits.len(), expected.len(), "{arch}/{adapter} case {i}: vocabulary");
        for (a, b) in logits.iter().zip(expected) {
            worst = worst.max((a - b.as_f64().expect("logit") as f32).abs());
        }
        let output = runner.execute(&batch).expect("step");
        scheduler.update_from_output(&batch, output, Instant::now());
    }
    assert!(worst <= LOGIT_TOLERANCE, "{arch}/{adapter}: max |Δlogit| {worst}");
    eprintln!("{arch}/{adapter}: max |Δlogit| {worst:e}");
    for (i, case) in cases.iter().enumerate() {
        let steps = case["greedy_ids"].as_array().expect("greedy").len() as u32;
        scheduler
            .add(
                under(&format!("g{i}"), Some(1), ids(&case["prompt_ids"]), steps),
                Instant::now(),
            )
            .expect("admitted");
    }
    let out = run_to_completion(&mut scheduler, &mut runner).tokens;
    for (i, case) in cases.iter().enumerate() {
        let stable = case["stable"].as_u64().expect("stable") as usize;
        assert_eq!(
            &out[&format!("g{i}")][..stable],
            &ids(&case["greedy_ids"])[..stable],
            "{arch}/{adapter} case {i}: greedy tokens"
        );
    }
}

#[test]
fn a_llama_adapter_on_every_projection_matches_peft() {
    adapter_matches_peft("llama", "all");
}

#[test]
fn an_rslora_adapter_on_some_projections_matches_peft() {
    adapter_matches_peft("llama", "rs");
}

#[test]
fn a_qwen2_adapter_beside_qkv_biases_matches_peft() {
    adapter_matches_peft("qwen2", "all");
}

#[test]
fn a_gemma3_adapter_matches_peft() {
    adapter_matches_peft("gemma3", "all");
}

#[test]
fn a_phi3_adapter_on_fused_qkv_and_gate_up_matches_peft() {
    adapter_matches_peft("phi3", "all");
}

/// Three adapters and the base model, every prompt under each, all in one batch: each
/// request gets the tokens it gets alone, and the reference's.
#[test]
fn a_mixed_batch_gives_every_request_the_tokens_it_gets_alone() {
    mixed_batch_matches_alone(&[("all", "all"), ("rs", "rs"), ("mlp", "mlp")]);
}

/// `adapters` (served name under `lora/`, its PEFT reference) of the tiny Llama and the base
/// model, every prompt under each, all in one batch: each request gets the tokens it gets
/// alone, and the reference's.
pub(crate) fn mixed_batch_matches_alone(adapters: &[(&str, &str)]) {
    let names: Vec<&str> = adapters.iter().map(|(served, _)| *served).collect();
    let mut references: Vec<(Option<u32>, Value)> = vec![(None, read_reference(&fixture("llama")))];
    for (i, (_, reference)) in adapters.iter().enumerate() {
        references.push((Some(i as u32 + 1), read_reference(&adapter_dir("llama", reference))));
    }
    let engine = || direct_engine(&fixture("llama").join("hf"), with_adapters("llama", &names, 4)).expect("engine");
    let mut requests = Vec::new();
    for (lora, reference) in &references {
        for (i, case) in reference["f32"].as_array().expect("cases").iter().enumerate() {
            let id = format!("{lora:?}-{i}");
            requests.push((id, *lora, ids(&case["prompt_ids"]), case.clone()));
        }
    }
    let mut alone = HashMap::new();
    for (id, lora, prompt, case) in &requests {
        let (mut scheduler, mut runner) = engine();
        let steps = case["greedy_ids"].as_array().expect("greedy").len() as u32;
        scheduler
            .add(under(id, *lora, prompt.clone(), steps), Instant::now())
            .expect("admitted");
        alone.insert(
            id.clone(),
            run_to_completion(&mut scheduler, &mut runner)
                .tokens
                .remove(id)
                .expect("tokens"),
        );
    }
    let (mut scheduler, mut runner) = engine();
    for (id, lora, prompt, case) in &requests {
        let steps = case["greedy_ids"].as_array().expect("greedy").len() as u32;
        scheduler
            .add(under(id, *lora, prompt.clone(), steps), Instant::now())
            .expect("admitted");
    }
    let first = scheduler.schedule(Instant::now());
    let loras: std::collections::BTreeSet<Option<u32>> = first.sequences.iter().map(|s| s.lora).collect();
    assert_eq!(
        loras.len(),
        names.len() + 1,
        "the first step mixes the adapters and the base"
    );
    let output = runner.execute(&first).expect("step");
    scheduler.update_from_output(&first, output, Instant::now());
    let mixed = run_to_completion(&mut scheduler, &mut runner).tokens;
    for (id, _, _, case) in &requests {
        let stable = case["stable"].as_u64().expect("stable") as usize;
        // The first token came from the step run above, by hand.
        assert_eq!(mixed[id][..stable - 1], alone[id][1..stable], "{id}: mixed vs alone");
        assert_eq!(
            &alone[id][..stable],
            &ids(&case["greedy_ids"])[..stable],
            "{id}: reference"
        );
    }
}

/// The served API: the adapter in `model` (completions, streaming, chat), `/v1/models` as
/// vLLM lists adapters, and an unknown name's 404.
#[test]
fn the_api_serves_adapters_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = start_model(
        dir,
        fixture("llama").join("hf"),
        with_adapters("llama", &["all", "rs"], 2),
    );
    let (status, models) = t.get_text("/v1/models");
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&models).expect("json");
    let data = models["data"].as_array().expect("data");
    let base = data[0]["id"].as_str().expect("base id").to_string();
    assert_eq!(data.len(), 3, "{models}");
    assert_eq!(data[1]["id"], "all");
    assert_eq!(data[1]["parent"], base.as_str());
    assert_eq!(data[1]["root"], adapter_dir("llama", "all").display().to_string());
    assert_eq!(data[2]["id"], "rs");

    let prompt = ids(&read_reference(&fixture("llama"))["f32"][0]["prompt_ids"]);
    let body =
        |model: &str| json!({"model": model, "prompt": prompt, "max_tokens": 6, "temperature": 0, "ignore_eos": true});
    let (status, base_out) = t.post("/v1/completions", &body(&base));
    assert_eq!(status, 200, "{base_out}");
    let (status, adapted) = t.post("/v1/completions", &body("all"));
    assert_eq!(status, 200, "{adapted}");
    assert_eq!(adapted["model"], "all");
    assert_ne!(
        adapted["choices"][0]["text"], base_out["choices"][0]["text"],
        "the adapter changes the tokens"
    );

    let mut streamed = body("all");
    streamed["stream"] = json!(true);
    let events = t.stream("/v1/completions", &streamed);
    let text: String = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str::<Value>(e).expect("chunk"))
        .filter_map(|c| c["choices"].get(0).and_then(|ch| ch["text"].as_str()).map(String::from))
        .collect();
    assert_eq!(text, adapted["choices"][0]["text"].as_str().expect("text"));

    let chat = json!({"model": "rs", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
    let (status, reply) = t.post("/v1/chat/completions", &chat);
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["model"], "rs");

    let responses = json!({"model": "all", "input": "hi", "max_output_tokens": 16});
    let (status, reply) = t.post("/v1/responses", &responses);
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["model"], "all");

    let (status, err) = t.post("/v1/completions", &body("no-such-adapter"));
    assert_eq!(status, 404, "{err}");
    assert_eq!(err["error"]["code"], "model_not_found");
}

/// The first-step logits of every reference prompt under adapter 1 (`adapters` of `arch`),
/// or the base model when there are none.
fn first_logits(model: &std::path::Path, arch: &str, adapters: &[&str], dequantize: bool) -> Vec<f32> {
    let tweak = with_adapters(arch, adapters, 1);
    let (mut scheduler, mut runner) = direct_engine(model, |c| {
        tweak(c);
        c.model.dequantize_weights = dequantize;
    })
    .expect("engine");
    let lora = (!adapters.is_empty()).then_some(1);
    let mut all = Vec::new();
    for (i, case) in read_reference(&fixture(arch))["f32"]
        .as_array()
        .expect("cases")
        .iter()
        .enumerate()
    {
        scheduler
            .add(
                under(&format!("c{i}"), lora, ids(&case["prompt_ids"]), 1),
                Instant::now(),
            )
            .expect("admitted");
        let batch = scheduler.schedule(Instant::now());
        all.extend(runner.logits(&batch));
        let output = runner.execute(&batch).expect("step");
        scheduler.update_from_output(&batch, output, Instant::now());
    }
    all
}

/// On a GGUF base whose Q/K rows llama.cpp permuted and whose projections stay packed (the
/// host-row path), an adapter gives the logits it gives on the same weights widened to f32
/// (the tensor path).
#[test]
fn an_adapter_on_packed_gguf_weights_matches_the_widened_ones() {
    let gguf = fixture("llama").join("llama-q8_0.gguf");
    let packed = first_logits(&gguf, "llama", &["all"], false);
    let widened = first_logits(&gguf, "llama", &["all"], true);
    assert_eq!(packed.len(), widened.len());
    let worst = packed
        .iter()
        .zip(&widened)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(worst <= LOGIT_TOLERANCE, "max |Δlogit| {worst}");
    let base = first_logits(&gguf, "llama", &[], false);
    let moved = packed
        .iter()
        .zip(&base)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(moved > 1.0, "the adapter changes the logits ({moved})");
}
