//! Loading PEFT folders (what is refused, and why) and the grouped shrink/expand arithmetic.

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
