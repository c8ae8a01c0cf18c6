//! Loading PEFT folders and GGUF LoRA files (what is refused, and why) and the grouped
//! shrink/expand arithmetic.

use std::collections::HashMap;
use std::path::Path;

use safetensors::Dtype;
use safetensors::tensor::TensorView;

use super::*;
use crate::model::config::ModelConfig;

/// hidden 8, intermediate 16, 2 layers, q 8, kv 4.
fn base() -> ModelConfig {
    ModelConfig::llama(100, 8, 16, 2, 2, 1, 4, 64)
}

/// Writes a PEFT folder: `config` merged over a plain rank-2 LoRA config, and `tensors`
/// (PEFT key without the `base_model.model.` prefix, shape), filled with 0.01 × index.
fn adapter(dir: &Path, config: serde_json::Value, tensors: &[(&str, Vec<usize>)]) {
    let mut full = serde_json::json!({"peft_type": "LORA", "r": 2, "lora_alpha": 4, "bias": "none",
        "base_model_name_or_path": "tiny"});
    for (k, v) in config.as_object().expect("object") {
        full[k] = v.clone();
    }
    std::fs::write(dir.join("adapter_config.json"), full.to_string()).expect("config");
    let data: Vec<(String, Vec<u8>, Vec<usize>)> = tensors
        .iter()
        .map(|(name, shape)| {
            let n: usize = shape.iter().product();
            let bytes = (0..n).flat_map(|i| (0.01 * i as f32).to_le_bytes()).collect();
            (format!("base_model.model.{name}"), bytes, shape.clone())
        })
        .collect();
    let views: Vec<(String, TensorView)> = data
        .iter()
        .map(|(name, bytes, shape)| {
            (
                name.clone(),
                TensorView::new(Dtype::F32, shape.clone(), bytes).expect("view"),
            )
        })
        .collect();
    let bytes = safetensors::serialize(views, None::<HashMap<String, String>>).expect("serialize");
    std::fs::write(dir.join("adapter_model.safetensors"), bytes).expect("weights");
}

fn q_and_down() -> Vec<(&'static str, Vec<usize>)> {
    vec![
        ("model.layers.0.self_attn.q_proj.lora_A.weight", vec![2, 8]),
        ("model.layers.0.self_attn.q_proj.lora_B.weight", vec![8, 2]),
        ("model.layers.1.self_attn.v_proj.lora_A.weight", vec![2, 8]),
        ("model.layers.1.self_attn.v_proj.lora_B.weight", vec![4, 2]),
        ("model.layers.1.mlp.down_proj.lora_A.weight", vec![2, 16]),
        ("model.layers.1.mlp.down_proj.lora_B.weight", vec![8, 2]),
    ]
}

fn load(config: serde_json::Value, tensors: &[(&str, Vec<usize>)], max_rank: usize) -> Result<LoraAdapter, LoraError> {
    let dir = tempfile::tempdir().expect("tempdir");
    adapter(dir.path(), config, tensors);
    load_adapter(1, "a", dir.path(), &base(), max_rank)
}

#[test]
fn modules_land_on_their_fused_projections_with_the_scaling_in_b() {
    let a = load(serde_json::json!({}), &q_and_down(), 16).expect("loads");
    assert_eq!((a.rank, a.layers.len()), (2, 2));
    let q = &a.layers[0].qkv[0];
    assert_eq!((q.offset, q.outputs, q.inputs), (0, 8, 8));
    // lora_alpha / r = 2.
    assert!((q.b[1] - 2.0 * 0.01).abs() < 1e-7);
    let v = &a.layers[1].qkv[0];
    assert_eq!((v.offset, v.outputs), (12, 4), "v after q (8) and k (4)");
    assert_eq!(a.layers[1].down[0].inputs, 16);
    assert!(a.layers[0].gate_up.is_empty() && a.layers[1].attn_out.is_empty());
}

#[test]
fn rslora_scales_by_the_square_root_of_the_rank() {
    let a = load(
        serde_json::json!({"use_rslora": true, "r": 4, "lora_alpha": 8}),
        &[
            ("model.layers.0.mlp.up_proj.lora_A.weight", vec![4, 8]),
            ("model.layers.0.mlp.up_proj.lora_B.weight", vec![16, 4]),
        ],
        16,
    )
    .expect("loads");
    let up = &a.layers[0].gate_up[0];
    assert_eq!((up.offset, up.outputs), (16, 16), "up after gate");
    assert!((up.b[1] - 4.0 * 0.01).abs() < 1e-7, "8 / sqrt(4) = 4");
}

/// The error's text, which must name what is unsupported.
fn refusal(config: serde_json::Value, tensors: &[(&str, Vec<usize>)], max_rank: usize) -> String {
    load(config, tensors, max_rank).expect_err("refused").to_string()
}

#[test]
fn what_kiln_cannot_apply_is_refused_by_name() {
    let dora = refusal(serde_json::json!({"use_dora": true}), &q_and_down(), 16);
    assert!(dora.contains("DoRA"), "{dora}");
    let mut embed = q_and_down();
    embed.push(("model.embed_tokens.lora_embedding_A", vec![2, 100]));
    let embed = refusal(serde_json::json!({}), &embed, 16);
    assert!(embed.contains("embed_tokens"), "{embed}");
    let head = refusal(serde_json::json!({}), &[("lm_head.lora_A.weight", vec![2, 8])], 16);
    assert!(head.contains("lm_head"), "{head}");
    let saved = refusal(serde_json::json!({"modules_to_save": ["lm_head"]}), &q_and_down(), 16);
    assert!(saved.contains("modules_to_save"), "{saved}");
    let rank = refusal(serde_json::json!({}), &q_and_down(), 1);
    assert!(rank.contains("rank 2") && rank.contains("--max-lora-rank 1"), "{rank}");
}

#[test]
fn shapes_that_do_not_fit_the_base_are_refused() {
    let wide = refusal(
        serde_json::json!({}),
        &[
            ("model.layers.0.self_attn.k_proj.lora_A.weight", vec![2, 8]),
            ("model.layers.0.self_attn.k_proj.lora_B.weight", vec![8, 2]),
        ],
        16,
    );
    assert!(wide.contains("k_proj") && wide.contains("does not fit"), "{wide}");
    let deep = refusal(
        serde_json::json!({}),
        &[
            ("model.layers.5.self_attn.q_proj.lora_A.weight", vec![2, 8]),
            ("model.layers.5.self_attn.q_proj.lora_B.weight", vec![8, 2]),
        ],
        16,
    );
    assert!(deep.contains("2 layers"), "{deep}");
    let half = refusal(
        serde_json::json!({}),
        &[("model.layers.0.self_attn.q_proj.lora_A.weight", vec![2, 8])],
        16,
    );
    assert!(half.contains("lora_B"), "{half}");
}

/// Each group's rows get their adapter's `x·Aᵀ·Bᵀ` in its columns; rows of no group are
/// left alone.
#[test]
fn each_group_of_rows_gets_its_own_adapters_delta() {
    let delta = |a: Vec<f32>, b: Vec<f32>, offset| LoraDelta {
        a,
        b,
        rank: 1,
        inputs: 2,
        offset,
        outputs: 2,
    };
    let adapter = |id, d: LoraDelta| LoraAdapter {
        id,
        name: format!("a{id}"),
        path: PathBuf::new(),
        rank: 1,
        base_model_name_or_path: None,
        layers: vec![LayerLora {
            down: vec![d],
            ..Default::default()
        }],
    };
    // Adapter 1: shrink by [1, 1], expand into columns 0..2 by [1, 2].
    let one = adapter(1, delta(vec![1.0, 1.0], vec![1.0, 2.0], 0));
    // Adapter 2: shrink by [1, -1], expand into columns 1..3 by [3, 1].
    let two = adapter(2, delta(vec![1.0, -1.0], vec![3.0, 1.0], 1));
    let x = [1.0, 2.0, 5.0, 1.0, 7.0, 7.0];
    let mut y = vec![0.0; 9];
    let groups = [
        LoraRows {
            adapter: &one,
            rows: 0..1,
        },
        LoraRows {
            adapter: &two,
            rows: 1..2,
        },
    ];
    add_lora(&groups, 0, Target::Down, &x, 2, &mut y, 3);
    // Row 0: s = 3 → [3, 6, 0]; row 1: s = 4 → [0, 12, 4]; row 2: the base's alone.
    assert_eq!(y, [3.0, 6.0, 0.0, 0.0, 12.0, 4.0, 0.0, 0.0, 0.0]);
}

/// Writes a GGUF LoRA file as llama.cpp's converter does (`general.architecture = arch`,
/// alpha 4) with `tensors` (name, row-major shape), each filled with its row index.
fn gguf_adapter(dir: &Path, arch: &str, extra: &[(&str, &str)], tensors: &[(&str, Vec<usize>)]) -> PathBuf {
    use crate::kernels::GgmlType;
    use crate::model::gguf::GgufWriter;
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", arch)
        .add_metadata("general.type", "adapter")
        .add_metadata("adapter.type", "lora")
        .add_metadata("adapter.lora.alpha", 4.0f32);
    for (k, v) in extra {
        w.add_metadata(k, *v);
    }
    for (name, shape) in tensors {
        let cols = shape[1];
        let data: Vec<f32> = (0..shape[0] * cols).map(|i| (i / cols) as f32).collect();
        w.add_tensor_f32(name, shape, &data, GgmlType::F32).expect("tensor");
    }
    let path = dir.join("adapter.gguf");
    w.write_to(&path).expect("write");
    path
}

fn load_gguf(
    model: &ModelConfig,
    arch: &str,
    extra: &[(&str, &str)],
    tensors: &[(&str, Vec<usize>)],
    max_rank: usize,
) -> Result<LoraAdapter, LoraError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = gguf_adapter(dir.path(), arch, extra, tensors);
    load_adapter(1, "g", &path, model, max_rank)
}

fn gguf_q_k_down() -> Vec<(&'static str, Vec<usize>)> {
    vec![
        ("blk.0.attn_q.weight.lora_a", vec![2, 8]),
        ("blk.0.attn_q.weight.lora_b", vec![8, 2]),
        ("blk.0.attn_k.weight.lora_a", vec![2, 8]),
        ("blk.0.attn_k.weight.lora_b", vec![4, 2]),
        ("blk.1.ffn_down.weight.lora_a", vec![2, 16]),
        ("blk.1.ffn_down.weight.lora_b", vec![8, 2]),
    ]
}

/// The rows of each B, by the row index each was filled with.
fn b_rows(d: &LoraDelta) -> Vec<f32> {
    d.b.chunks_exact(d.rank).map(|r| r[0]).collect()
}

#[test]
fn a_gguf_adapter_lands_like_peft_with_llamas_qk_rows_put_back() {
    let a = load_gguf(&base(), "llama", &[], &gguf_q_k_down(), 16).expect("loads");
    assert_eq!(a.rank, 2);
    let qkv = &a.layers[0].qkv;
    let at = |offset| qkv.iter().find(|d| d.offset == offset).expect("delta");
    let (q, k) = (at(0), at(8));
    assert_eq!((q.offset, q.outputs, k.offset, k.outputs), (0, 8, 8, 4));
    // alpha / r = 2; head_dim 4: GGUF rows 0,2,1,3 of each head are Hugging Face rows 0..4.
    assert_eq!(b_rows(q), [0.0, 4.0, 2.0, 6.0, 8.0, 12.0, 10.0, 14.0]);
    assert_eq!(b_rows(k), [0.0, 4.0, 2.0, 6.0]);
    assert_eq!(
        b_rows(&a.layers[1].down[0]),
        [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0]
    );
    // Qwen's converter leaves Q/K alone.
    let mut qwen = base();
    qwen.architecture = "qwen2";
    let a = load_gguf(&qwen, "qwen2", &[], &gguf_q_k_down(), 16).expect("loads");
    let q = a.layers[0].qkv.iter().find(|d| d.offset == 0).expect("q delta");
    assert_eq!(b_rows(q), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0]);
}

#[test]
fn phi3s_gguf_ffn_up_is_its_fused_gate_up() {
    let mut phi3 = base();
    phi3.architecture = "phi3";
    let a = load_gguf(
        &phi3,
        "phi3",
        &[],
        &[
            ("blk.0.attn_qkv.weight.lora_a", vec![2, 8]),
            ("blk.0.attn_qkv.weight.lora_b", vec![16, 2]),
            ("blk.0.ffn_up.weight.lora_a", vec![2, 8]),
            ("blk.0.ffn_up.weight.lora_b", vec![32, 2]),
        ],
        16,
    )
    .expect("loads");
    let (qkv, gate_up) = (&a.layers[0].qkv[0], &a.layers[0].gate_up[0]);
    assert_eq!((qkv.offset, qkv.outputs), (0, 16));
    assert_eq!((gate_up.offset, gate_up.outputs), (0, 32));
    assert_eq!(b_rows(qkv)[..4], [0.0, 2.0, 4.0, 6.0], "no Q/K permutation on Phi-3");
}

#[test]
fn what_kiln_cannot_apply_from_a_gguf_adapter_is_refused_by_name() {
    let refused = |arch: &str, extra: &[(&str, &str)], tensors: &[(&str, Vec<usize>)], max_rank| {
        load_gguf(&base(), arch, extra, tensors, max_rank)
            .expect_err("refused")
            .to_string()
    };
    let other = refused("gemma3", &[], &gguf_q_k_down(), 16);
    assert!(other.contains("`gemma3` on a `llama` base"), "{other}");
    let mut embed = gguf_q_k_down();
    embed.push(("token_embd.weight.lora_a", vec![2, 8]));
    let embed = refused("llama", &[], &embed, 16);
    assert!(embed.contains("token_embd.weight.lora_a"), "{embed}");
    let head = refused("llama", &[], &[("output.weight.lora_b", vec![100, 2])], 16);
    assert!(head.contains("output.weight.lora_b"), "{head}");
    let model = refused("llama", &[("general.type", "model")], &gguf_q_k_down(), 16);
    assert!(model.contains("general.type = model"), "{model}");
    let control = refused("llama", &[("adapter.type", "control_vector")], &gguf_q_k_down(), 16);
    assert!(control.contains("adapter.type = control_vector"), "{control}");
    let rank = refused("llama", &[], &gguf_q_k_down(), 1);
    assert!(rank.contains("rank 2") && rank.contains("--max-lora-rank 1"), "{rank}");
    let wide = refused(
        "llama",
        &[],
        &[
            ("blk.0.attn_v.weight.lora_a", vec![2, 8]),
            ("blk.0.attn_v.weight.lora_b", vec![8, 2]),
        ],
        16,
    );
    assert!(wide.contains("v_proj") && wide.contains("does not fit"), "{wide}");
    let deep = refused(
        "llama",
        &[],
        &[
            ("blk.7.attn_q.weight.lora_a", vec![2, 8]),
            ("blk.7.attn_q.weight.lora_b", vec![8, 2]),
        ],
        16,
    );
    assert!(deep.contains("2 layers"), "{deep}");
}

#[test]
fn a_file_that_is_not_gguf_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("adapter.gguf");
    std::fs::write(&path, b"not a gguf file at all").expect("write");
    let err = load_adapter(1, "g", &path, &base(), 16)
        .expect_err("refused")
        .to_string();
    assert!(err.contains("not a GGUF file"), "{err}");
}
