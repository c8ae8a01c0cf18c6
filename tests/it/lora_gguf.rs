//! llama.cpp's GGUF LoRA adapters, converted from the PEFT fixtures by llama.cpp's own
//! `convert_lora_to_gguf.py` (`tests/data/tiny/make_lora_fixtures.py --gguf`): the same
//! logits and tokens as transformers + PEFT (the PEFT folders' tolerance, `LOGIT_TOLERANCE`),
//! on a Hugging Face base and on a GGUF base whose Q/K rows llama.cpp permuted; mixed with a
//! PEFT adapter and the base; and refused, naming why, at start-up and from the load endpoint.

use kiln::testing::direct_engine;
use serde_json::json;

use crate::arch_parity::fixture;
use crate::common::start_model;
use crate::lora::{adapter_dir, mixed_batch_matches_alone, served_adapter_matches_peft, with_adapters};
use crate::lora_runtime::{complete, error_message, load, model_ids, post_text, runtime_lora};

#[test]
fn a_llama_gguf_adapter_matches_peft() {
    served_adapter_matches_peft(&fixture("llama").join("hf"), "llama", "all.gguf", "all");
}

/// The converter permutes lora_b's Q/K rows as it permutes the base's; on a GGUF base (whose
/// rows kiln puts back) the adapter still matches.
#[test]
fn a_llama_gguf_adapter_on_a_gguf_base_matches_peft() {
    served_adapter_matches_peft(&fixture("llama").join("llama-f32.gguf"), "llama", "all.gguf", "all");
}

#[test]
fn a_phi3_gguf_adapter_on_fused_qkv_and_gate_up_matches_peft() {
    served_adapter_matches_peft(&fixture("phi3").join("hf"), "phi3", "all.gguf", "all");
}

#[test]
fn a_gemma3_gguf_adapter_matches_peft() {
    served_adapter_matches_peft(&fixture("gemma3").join("hf"), "gemma3", "all.gguf", "all");
}

/// A GGUF adapter, a PEFT adapter and the base in one batch: each request its tokens alone.
#[test]
fn a_gguf_adapter_mixes_with_a_peft_adapter_and_the_base() {
    mixed_batch_matches_alone(&[("all.gguf", "all"), ("rs", "rs")]);
}

/// `--lora-modules` with an adapter kiln cannot apply stops the start with the reason.
#[test]
fn an_unfit_gguf_adapter_stops_the_start_naming_why() {
    let llama = fixture("llama").join("hf");
    let other = direct_engine(&llama, with_adapters("phi3", &["all.gguf"], 1))
        .err()
        .expect("refused")
        .to_string();
    assert!(other.contains("architecture `phi3` on a `llama` base"), "{other}");
    let model_file = fixture("llama").join("llama-f32.gguf");
    let as_adapter = direct_engine(&llama, |c| {
        with_adapters("llama", &[], 1)(c);
        c.lora.lora_modules = vec![kiln::config::LoraModule {
            name: "m".into(),
            path: model_file.display().to_string(),
            base_model_name: None,
        }];
    })
    .err()
    .expect("refused")
    .to_string();
    assert!(as_adapter.contains("general.type = model"), "{as_adapter}");
}

/// The load endpoint takes a GGUF file as it takes a folder, and refuses an unfit one with a
/// 400 naming why, the server serving on.
#[test]
fn the_load_endpoint_takes_and_refuses_gguf_adapters() {
    let t = start_model(
        tempfile::tempdir().expect("tempdir"),
        fixture("llama").join("hf"),
        runtime_lora(4, 4),
    );
    let base = model_ids(&t)[0].clone();
    let (_, base_out) = complete(&t, &base);
    let path = |arch: &str| adapter_dir(arch, "all.gguf").display().to_string();
    let (status, text) = load(&t, "g", &path("llama"));
    assert_eq!(status, 200, "{text}");
    let (status, adapted) = complete(&t, "g");
    assert_eq!(status, 200, "{adapted}");
    assert_ne!(adapted["choices"][0]["text"], base_out["choices"][0]["text"]);
    let model_file = fixture("llama").join("llama-f32.gguf").display().to_string();
    for (name, path, says) in [
        ("phi", path("phi3"), "architecture `phi3` on a `llama` base"),
        ("model", model_file, "general.type = model"),
    ] {
        let (status, text) = post_text(
            &t,
            "/v1/load_lora_adapter",
            &json!({"lora_name": name, "lora_path": path}),
        );
        assert_eq!(status, 400, "{name}: {text}");
        assert!(error_message(&text).contains(says), "{name}: {text}");
    }
    assert_eq!(model_ids(&t), [base.clone(), "g".to_string()], "nothing half-loaded");
    let (status, again) = complete(&t, "g");
    assert_eq!(
        (status, &again["choices"][0]["text"]),
        (200, &adapted["choices"][0]["text"])
    );
}
