//! Reads a PEFT folder, and places an adapter read from either format as per-layer deltas on
//! kiln's fused projections, refusing what does not fit the base model.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensors};

use super::config::AdapterConfig;
use super::{LayerLora, LoraAdapter, LoraDelta, LoraError, Target};
use crate::model::config::ModelConfig;

/// A tensor as read: its shape and its values widened to f32.
pub(super) type ShapedValues = (Vec<usize>, Vec<f32>);

/// Where a PEFT module lands: the fused projection, the first output column it writes, its
/// output and input widths.
pub(super) fn placement(module: &str, c: &ModelConfig) -> Option<(Target, usize, usize, usize)> {
    let (q, kv, hidden, ffn) = (c.q_dim(), c.kv_dim(), c.hidden_size, c.intermediate_size);
    Some(match module {
        "self_attn.q_proj" => (Target::Qkv, 0, q, hidden),
        "self_attn.k_proj" => (Target::Qkv, q, kv, hidden),
        "self_attn.v_proj" => (Target::Qkv, q + kv, kv, hidden),
        "self_attn.qkv_proj" => (Target::Qkv, 0, q + 2 * kv, hidden),
        "self_attn.o_proj" => (Target::AttnOut, 0, hidden, q),
        "mlp.gate_proj" => (Target::GateUp, 0, ffn, hidden),
        "mlp.up_proj" => (Target::GateUp, ffn, ffn, hidden),
        "mlp.gate_up_proj" => (Target::GateUp, 0, 2 * ffn, hidden),
        "mlp.down_proj" => (Target::Down, 0, hidden, ffn),
        _ => return None,
    })
}

/// `base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight` → (3, module, is_a).
fn parse_key(key: &str) -> Option<(usize, &str, bool)> {
    let rest = key.strip_prefix("base_model.model.model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let (module, is_a) = if let Some(m) = rest.strip_suffix(".lora_A.weight") {
        (m, true)
    } else {
        (rest.strip_suffix(".lora_B.weight")?, false)
    };
    Some((layer.parse().ok()?, module, is_a))
}

/// An adapter's modules as read from either format, before they are placed: (layer, PEFT
/// module name) → [A, B].
pub(super) type ModulePairs = BTreeMap<(usize, String), [Option<ShapedValues>; 2]>;

/// How the format states the scaling: PEFT fixes the rank and the factor in its config; a
/// GGUF adapter gives `alpha` and each module's rank is its A's rows (llama.cpp's rule: no
/// alpha, no scaling).
pub(super) enum Scaling {
    Fixed { rank: usize, factor: f32 },
    AlphaOverRank(f32),
}

/// An adapter as read, for [`assemble`].
pub(super) struct ReadAdapter {
    /// The weights file, for errors.
    pub file: PathBuf,
    pub pairs: ModulePairs,
    pub scaling: Scaling,
    pub base_model_name_or_path: Option<String>,
}

/// Reads a PEFT folder's config and tensors, refusing what kiln cannot apply.
pub(super) fn read_peft_folder(dir: &Path, model: &ModelConfig, max_rank: usize) -> Result<ReadAdapter, LoraError> {
    let config = AdapterConfig::read(dir)?;
    let unsupported = config.unsupported();
    if !unsupported.is_empty() {
        return Err(LoraError::Unsupported {
            path: dir.to_path_buf(),
            message: unsupported.join(", "),
        });
    }
    if config.r > max_rank {
        return Err(LoraError::RankTooLarge {
            path: dir.to_path_buf(),
            rank: config.r,
            max_rank,
        });
    }
    let path = dir.join("adapter_model.safetensors");
    let invalid = |message: String| LoraError::Invalid {
        path: path.clone(),
        message,
    };
    let bytes = std::fs::read(&path).map_err(|source| LoraError::Io {
        path: path.clone(),
        source,
    })?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| invalid(e.to_string()))?;
    let mut pairs = ModulePairs::new();
    for (key, view) in st.tensors() {
        let Some((layer, module, is_a)) = parse_key(&key) else {
            return Err(LoraError::Unsupported {
                path: path.clone(),
                message: format!("tensor `{key}` (kiln applies LoRA to q/k/v/o and gate/up/down only)"),
            });
        };
        check_module(&path, &key, layer, module, model)?;
        let values =
            to_f32(view.dtype(), view.data()).ok_or_else(|| invalid(format!("`{key}`: dtype {:?}", view.dtype())))?;
        pairs.entry((layer, module.to_string())).or_default()[usize::from(!is_a)] =
            Some((view.shape().to_vec(), values));
    }
    Ok(ReadAdapter {
        file: path,
        pairs,
        scaling: Scaling::Fixed {
            rank: config.r,
            factor: config.scaling(),
        },
        base_model_name_or_path: config.base_model_name_or_path,
    })
}

/// Refuses a module kiln does not apply, or a layer the base does not have.
pub(super) fn check_module(
    path: &Path,
    key: &str,
    layer: usize,
    module: &str,
    model: &ModelConfig,
) -> Result<(), LoraError> {
    if placement(module, model).is_none() {
        return Err(LoraError::Unsupported {
            path: path.to_path_buf(),
            message: format!("target module `{module}` (of `{key}`)"),
        });
    }
    if layer >= model.num_layers {
        return Err(LoraError::Invalid {
            path: path.to_path_buf(),
            message: format!("`{key}`: the base model has {} layers", model.num_layers),
        });
    }
    Ok(())
}

/// Places every module on its fused projection, checking its shapes against the base and
/// folding the scaling into B.
pub(super) fn assemble(
    id: u32,
    name: &str,
    path: &Path,
    model: &ModelConfig,
    max_rank: usize,
    read: ReadAdapter,
) -> Result<LoraAdapter, LoraError> {
    let ReadAdapter {
        file,
        pairs,
        scaling,
        base_model_name_or_path,
    } = read;
    let invalid = |message: String| LoraError::Invalid {
        path: file.clone(),
        message,
    };
    if pairs.is_empty() {
        return Err(invalid("no LoRA tensors".into()));
    }
    let mut layers = vec![LayerLora::default(); model.num_layers];
    let mut adapter_rank = 0;
    for ((layer, module), [a, b]) in pairs {
        let (target, offset, outputs, inputs) = placement(&module, model).expect("checked when read");
        let missing = |which: &str| invalid(format!("layer {layer} `{module}` has no lora_{which}"));
        let (a_shape, a) = a.ok_or_else(|| missing("A"))?;
        let (b_shape, mut b) = b.ok_or_else(|| missing("B"))?;
        let (rank, factor) = match scaling {
            Scaling::Fixed { rank, factor } => (rank, factor),
            Scaling::AlphaOverRank(alpha) => {
                let rank = a_shape.first().copied().unwrap_or(0);
                (rank, if alpha == 0.0 { 1.0 } else { alpha / rank as f32 })
            }
        };
        if rank > max_rank {
            return Err(LoraError::RankTooLarge {
                path: file.clone(),
                rank,
                max_rank,
            });
        }
        let fits = rank > 0 && a_shape == [rank, inputs] && b_shape == [outputs, rank];
        if !fits {
            return Err(LoraError::ShapeMismatch {
                path: file.clone(),
                module: format!("layer {layer} {module}"),
                expected: format!("A [{rank}, {inputs}], B [{outputs}, {rank}]"),
                found: format!("A {a_shape:?}, B {b_shape:?}"),
            });
        }
        b.iter_mut().for_each(|v| *v *= factor);
        adapter_rank = adapter_rank.max(rank);
        layers[layer].deltas_mut(target).push(LoraDelta {
            a,
            b,
            rank,
            inputs,
            offset,
            outputs,
        });
    }
    Ok(LoraAdapter {
        id,
        name: name.to_string(),
        path: path.to_path_buf(),
        rank: adapter_rank,
        base_model_name_or_path,
        layers,
    })
}

fn to_f32(dtype: Dtype, bytes: &[u8]) -> Option<Vec<f32>> {
    Some(match dtype {
        Dtype::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::F16 => bytes
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        Dtype::BF16 => bytes
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        _ => return None,
    })
}
