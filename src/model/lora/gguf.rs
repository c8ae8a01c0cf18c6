//! llama.cpp's GGUF LoRA adapters, as its `convert_lora_to_gguf.py` writes them:
//! `general.type = adapter`, `adapter.type = lora`, `adapter.lora.alpha`, and tensors
//! `blk.N.<tensor>.weight.lora_a` (`[r, inputs]`) / `.lora_b` (`[outputs, r]`) named as the
//! base model's GGUF tensors are. They are mapped onto the PEFT module names `load` places.

use std::path::Path;

use super::LoraError;
use super::load::{ModulePairs, ReadAdapter, Scaling, check_module};
use crate::model::arch;
use crate::model::config::ModelConfig;
use crate::model::gguf::GgufFile;
use crate::model::weights::unpermuted_row_order;

/// The PEFT module a GGUF layer tensor (without `blk.N.` and `.weight`) adapts; `ffn_up` is
/// Phi-3's fused gate and up where the architecture fuses them.
fn peft_module(tensor: &str, fused_gate_up: bool) -> Option<&'static str> {
    Some(match tensor {
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_qkv" => "self_attn.qkv_proj",
        "attn_output" => "self_attn.o_proj",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" if fused_gate_up => "mlp.gate_up_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    })
}

/// `blk.3.attn_q.weight.lora_a` → (3, `attn_q`, is_a).
fn parse_name(name: &str) -> Option<(usize, &str, bool)> {
    let rest = name.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let (tensor, is_a) = if let Some(t) = rest.strip_suffix(".weight.lora_a") {
        (t, true)
    } else {
        (rest.strip_suffix(".weight.lora_b")?, false)
    };
    Some((layer.parse().ok()?, tensor, is_a))
}

/// Whether an adapter converted for `adapter_arch` fits a base of `base_arch`: the same, or
/// a `llama` adapter on a Mistral base (llama.cpp converts Mistral as Llama).
fn same_architecture(adapter_arch: &str, base_arch: &str) -> bool {
    adapter_arch == base_arch || (adapter_arch == "llama" && base_arch == "mistral")
}

/// Reads the GGUF LoRA file at `path` for the base `model`, refusing another architecture's
/// adapter, a non-LoRA adapter and tensors kiln does not adapt (embeddings, the head).
pub(super) fn read_gguf_adapter(path: &Path, model: &ModelConfig) -> Result<ReadAdapter, LoraError> {
    let file = GgufFile::open(path)?;
    let unsupported = |message: String| LoraError::Unsupported {
        path: path.to_path_buf(),
        message,
    };
    match file.get_str("general.type") {
        Some("adapter") => {}
        other => {
            return Err(unsupported(format!(
                "general.type = {} (a GGUF LoRA adapter has `adapter`; is this a model file?)",
                other.unwrap_or("(none)")
            )));
        }
    }
    match file.get_str("adapter.type") {
        Some("lora") => {}
        other => {
            return Err(unsupported(format!(
                "adapter.type = {} (only lora)",
                other.unwrap_or("(none)")
            )));
        }
    }
    if file.get("adapter.alora.invocation_tokens").is_some() {
        return Err(unsupported("adapter.alora.invocation_tokens (activated LoRA)".into()));
    }
    let adapter_arch = file.get_str("general.architecture").unwrap_or("(none)");
    if !same_architecture(adapter_arch, model.architecture) {
        return Err(unsupported(format!(
            "an adapter for architecture `{adapter_arch}` on a `{}` base model",
            model.architecture
        )));
    }
    let layout = arch::by_name(model.architecture).map(|a| a.layout());
    let fused_gate_up = layout.is_some_and(|l| l.fused_gate_up);
    // llama.cpp's Llama converter permutes Q/K rows for its interleaved RoPE, and with them the
    // rows of lora_b; kiln holds Q/K in Hugging Face order (its GGUF base loader undoes the
    // permutation), so lora_b's rows are put back the same way.
    let interleaved = layout.is_some_and(|l| l.gguf_qk_interleaved);
    let alpha = file.get_f32("adapter.lora.alpha").unwrap_or(0.0);
    let mut pairs = ModulePairs::new();
    for info in file.tensors() {
        let name = info.name.as_str();
        let Some((layer, module, is_a)) =
            parse_name(name).and_then(|(layer, t, is_a)| Some((layer, peft_module(t, fused_gate_up)?, is_a)))
        else {
            return Err(unsupported(format!(
                "tensor `{name}` (kiln applies LoRA to q/k/v/o and gate/up/down only)"
            )));
        };
        check_module(path, name, layer, module, model)?;
        let mut tensor = file.tensor_f32(name)?;
        let heads = match module {
            "self_attn.q_proj" => model.num_heads,
            "self_attn.k_proj" => model.num_kv_heads,
            _ => 0,
        };
        if interleaved && !is_a && heads > 0 && tensor.shape.len() == 2 && tensor.shape[0] == heads * model.head_dim {
            let cols = tensor.shape[1];
            tensor.data = unpermuted_row_order(tensor.shape[0], heads)
                .into_iter()
                .flat_map(|src| tensor.data[src * cols..(src + 1) * cols].to_vec())
                .collect();
        }
        pairs.entry((layer, module.to_string())).or_default()[usize::from(!is_a)] = Some((tensor.shape, tensor.data));
    }
    Ok(ReadAdapter {
        file: path.to_path_buf(),
        pairs,
        scaling: Scaling::AlphaOverRank(alpha),
        base_model_name_or_path: None,
    })
}
