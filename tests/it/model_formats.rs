//! Loading: the same weights from GGUF and from a Hugging Face folder give the same logits;
//! broken files give errors that name the file, never a panic.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use crate::common::first_logits::first_logits;
use kiln::config::Config;
use kiln::model::gguf::{GgufFile, GgufValue, GgufWriter};
use kiln::model::loader::open_model;
use kiln::model::projection::Projection;
use kiln::model::sources::hf_name_to_gguf;
use kiln::model::weights::{HostTensor, LoadOptions, build_model, unpermute_rows};
use kiln::model::{Backend, default_device};
use kiln::server::prepare_model;
use kiln::testing::{TinyModelSpec, direct_engine, greedy_request, run_to_completion, write_tiny_model};

/// Largest |Δ| between logits of the two formats. The weight values are identical; the
/// GGUF side multiplies its Q8_0/Q4_x projections with the packed CPU kernel and the folder
/// side with burn's matmul, so only the f32 summation order differs.
const TOLERANCE: f32 = 1e-5;

/// Rewrites a GGUF model as a Hugging Face folder: config.json, model.safetensors
/// (Q/K rows un-permuted, HF names), tokenizer.json.
fn write_hf_folder(gguf_path: &Path, dir: &Path, spec: TinyModelSpec) {
    let gguf = GgufFile::open(gguf_path).expect("gguf");
    let gguf_to_hf: HashMap<String, String> = (0..spec.layers)
        .flat_map(|l| {
            [
                "input_layernorm",
                "self_attn.q_proj",
                "self_attn.k_proj",
                "self_attn.v_proj",
                "self_attn.o_proj",
                "post_attention_layernorm",
                "mlp.gate_proj",
                "mlp.up_proj",
                "mlp.down_proj",
            ]
            .map(|p| format!("model.layers.{l}.{p}.weight"))
        })
        .chain(["model.embed_tokens.weight".to_string(), "model.norm.weight".to_string()])
        .map(|hf| (hf_name_to_gguf(&hf).expect("mapped"), hf))
        .collect();
    let head_dim = spec.hidden / spec.heads;
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for info in gguf.tensors() {
        let t = gguf.tensor_f32(&info.name).expect("tensor");
        let mut host = HostTensor {
            shape: t.shape,
            data: t.data,
        };
        if info.name.ends_with("attn_q.weight") {
            host = unpermute_rows(&host, spec.heads);
        } else if info.name.ends_with("attn_k.weight") {
            host = unpermute_rows(&host, spec.kv_heads);
        }
        let bytes = host.data.iter().flat_map(|v| v.to_le_bytes()).collect();
        tensors.push((gguf_to_hf[&info.name].clone(), host.shape, bytes));
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(n, s, b)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b).expect("view"),
            )
        })
        .collect();
    safetensors::tensor::serialize_to_file(views, None, &dir.join("model.safetensors")).expect("safetensors");
    let config = serde_json::json!({
        "vocab_size": gguf.get_u32("llama.vocab_size"),
        "hidden_size": spec.hidden, "intermediate_size": spec.ffn, "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads, "num_key_value_heads": spec.kv_heads, "head_dim": head_dim,
        "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "max_position_embeddings": spec.context,
        "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2
    });
    std::fs::write(dir.join("config.json"), config.to_string()).expect("config.json");
    let files = open_model(gguf_path).expect("open gguf");
    files
        .tokenizer
        .save(dir.join("tokenizer.json"), false)
        .expect("tokenizer.json");
}

/// The tiny model as a GGUF file and as a Hugging Face folder beside it.
fn tiny_model_in_both_formats(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let spec = TinyModelSpec::default();
    let gguf = write_tiny_model(dir, spec).expect("tiny model");
    let hf = dir.join("hf");
    std::fs::create_dir(&hf).expect("mkdir");
    write_hf_folder(&gguf, &hf, spec);
    (gguf, hf)
}

#[test]
fn gguf_and_hugging_face_folders_give_the_same_logits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (gguf, hf) = tiny_model_in_both_formats(dir.path());
    let prompt = [5, 80, 81, 90, 100, 3, 7];
    let a = first_logits(&gguf, false, &prompt);
    let b = first_logits(&hf, false, &prompt);
    assert_eq!(a.len(), b.len());
    let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
    assert!(worst <= TOLERANCE, "max |Δlogit| {worst}");
    let hf_files = open_model(&hf).expect("hf");
    let gguf_files = open_model(&gguf).expect("gguf");
    let text = "hello <|im_start|> 123";
    assert_eq!(
        hf_files.tokenizer.encode(text, false).expect("enc").get_ids(),
        gguf_files.tokenizer.encode(text, false).expect("enc").get_ids()
    );
}

/// The GGUF model's layers run on host rows (its projections are packed) and the folder's
/// through burn's tensor ops (all dense): prompts of different lengths decoded together over
/// their cached contexts pick the same tokens at every step.
#[test]
fn host_rows_and_burn_tensor_layers_generate_the_same_tokens_batched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (gguf, hf) = tiny_model_in_both_formats(dir.path());
    let generate = |model: &Path| {
        let (mut scheduler, mut runner) = direct_engine(model, |_| {}).expect("engine");
        let prompts: [&[u32]; 3] = [
            &[5, 80, 81, 90, 100, 3, 7],
            &[9, 12],
            &[40, 41, 42, 43, 44, 45, 46, 47, 48, 49],
        ];
        for (i, prompt) in prompts.iter().enumerate() {
            let request = greedy_request(&format!("r{i}"), prompt.to_vec(), 16, true);
            scheduler.add(request, Instant::now()).expect("admitted");
        }
        run_to_completion(&mut scheduler, &mut runner).tokens
    };
    let (host, burn) = (generate(&gguf), generate(&hf));
    assert_eq!(host.len(), 3);
    assert!(host.values().all(|tokens| tokens.len() == 16), "{host:?}");
    assert_eq!(host, burn);
}

/// Projections stored in packable blocks stay packed (unless asked otherwise); others, and all
/// of a fused projection with any unpackable part, are widened to f32.
#[test]
fn quantised_projections_stay_packed_unless_dequantisation_is_asked_for() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_tiny_model(dir.path(), TinyModelSpec::default()).expect("write");
    let files = open_model(&path).expect("open");
    let load = |keep_quantized| {
        build_model::<Backend>(
            &files.config,
            files.weights.as_ref(),
            LoadOptions { keep_quantized },
            &default_device(),
        )
        .expect("build")
    };
    let packed = load(true);
    let is_packed = |p: &Projection<Backend>| matches!(p, Projection::Packed(_));
    let layer = &packed.layers[0];
    // The tiny model: Q8_0 embedding and attn_output, Q4_0 gate + Q4_1 up, F16/F32 Q/K/V.
    assert!(is_packed(&packed.lm_head) && is_packed(&layer.attn_out) && is_packed(&layer.gate_up));
    assert!(!is_packed(&layer.qkv), "F16/F32 parts cannot be packed");
    let widened = load(false);
    assert!(!is_packed(&widened.lm_head) && !is_packed(&widened.layers[0].gate_up));
    // Packed bytes are what the decode step saves: 34 bytes per 32 Q8_0 values against 128.
    assert!(packed.lm_head.size_bytes() * 3 < widened.lm_head.size_bytes());
}

#[test]
fn truncated_or_corrupt_files_give_errors_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = write_tiny_model(dir.path(), TinyModelSpec::default()).expect("tiny model");
    let bytes = std::fs::read(&good).expect("read");
    let broken = dir.path().join("broken.gguf");
    for cut in [0, 3, 10, 100, 5000, bytes.len() / 2, bytes.len() - 1] {
        std::fs::write(&broken, &bytes[..cut]).expect("write");
        let err = match open_model(&broken) {
            Err(e) => e.to_string(),
            Ok(files) => {
                // The header survived the cut; the tensor data must not.
                let config = Config::default();
                match prepare_model(&config, files) {
                    Err(e) => e.to_string(),
                    Ok(_) => panic!("a file cut at {cut} of {} bytes loaded", bytes.len()),
                }
            }
        };
        assert!(err.contains("broken.gguf"), "cut {cut}: {err}");
    }
    let missing = dir.path().join("absent.gguf");
    let err = open_model(&missing)
        .err()
        .expect("missing file is an error")
        .to_string();
    assert!(err.contains("absent.gguf"), "{err}");
}

/// A RoPE scaling kiln does not implement (YaRN, ...) would load and answer wrongly; it is
/// refused by name instead, from a folder and from a GGUF file alike.
#[test]
fn a_folder_with_an_unsupported_rope_variant_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, hf) = tiny_model_in_both_formats(dir.path());
    let path = hf.join("config.json");
    let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
    config["rope_scaling"] = serde_json::json!({"rope_type": "yarn", "factor": 32.0});
    std::fs::write(&path, config.to_string()).expect("write");
    let err = open_model(&hf).err().expect("refused").to_string();
    assert!(err.contains("config.json") && err.contains("yarn"), "{err}");
}

/// The tiny GGUF model rewritten with extra metadata.
fn tiny_gguf_with(dir: &Path, extra: &[(&str, GgufValue)]) -> std::path::PathBuf {
    let original = write_tiny_model(dir, TinyModelSpec::default()).expect("tiny model");
    let file = GgufFile::open(&original).expect("gguf");
    let mut writer = GgufWriter::new();
    for (key, value) in file.metadata() {
        writer.add_metadata(key, value.clone());
    }
    for (key, value) in extra {
        writer.add_metadata(key, value.clone());
    }
    for info in file.tensors() {
        let bytes = file.tensor_bytes(&info.name).expect("bytes").to_vec();
        writer
            .add_tensor_raw(&info.name, &info.shape, info.ty, bytes)
            .expect("tensor");
    }
    let path = dir.join("rewritten.gguf");
    writer.write_to(&path).expect("write");
    path
}

#[test]
fn a_gguf_with_an_unsupported_rope_scaling_or_architecture_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let yarn = tiny_gguf_with(
        dir.path(),
        &[("llama.rope.scaling.type", GgufValue::String("yarn".into()))],
    );
    let err = open_model(&yarn).err().expect("refused").to_string();
    assert!(err.contains("rewritten.gguf") && err.contains("yarn"), "{err}");
    let falcon = tiny_gguf_with(
        dir.path(),
        &[("general.architecture", GgufValue::String("falcon".into()))],
    );
    let err = open_model(&falcon).err().expect("refused").to_string();
    assert!(err.contains("falcon") && err.contains("llama"), "{err}");
}

/// Linear RoPE scaling divides every frequency: the logits change, and a factor of 1 is the
/// plain model's.
#[test]
fn a_gguf_with_linear_rope_scaling_changes_the_logits_and_factor_one_does_not() {
    let prompt = [5, 80, 81, 90, 100, 3, 7];
    let plain_dir = tempfile::tempdir().expect("tempdir");
    let plain = first_logits(
        &write_tiny_model(plain_dir.path(), TinyModelSpec::default()).expect("tiny"),
        false,
        &prompt,
    );
    let scaled = |factor: f32| {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = tiny_gguf_with(
            dir.path(),
            &[
                ("llama.rope.scaling.type", GgufValue::String("linear".into())),
                ("llama.rope.scaling.factor", GgufValue::F32(factor)),
            ],
        );
        first_logits(&path, false, &prompt)
    };
    assert_eq!(scaled(1.0), plain);
    let worst = scaled(4.0)
        .iter()
        .zip(&plain)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(worst > 1e-3, "scaling by 4 left the logits as they were ({worst})");
}
