//! The start-up LoRA adapters (`--lora-modules`): loaded onto the model for the executor,
//! listed for the API under the ids engine requests carry (from 1, in flag order).

use std::path::Path;
use std::sync::Arc;

use crate::api::ServedAdapter;
use crate::config::LoraConfig;
use crate::model::config::ModelConfig;
use crate::model::lora::{LoraAdapter, LoraError, load_adapter};

/// The id engine requests carry for the `index`-th module.
fn adapter_id(index: usize) -> u32 {
    index as u32 + 1
}

/// Loads every adapter, refusing what does not fit the base; a different base model name
/// only warns (one model goes by a hub id, a folder or a GGUF name).
pub fn load_adapters(
    config: &LoraConfig,
    model: &ModelConfig,
    served_name: &str,
) -> Result<Vec<Arc<LoraAdapter>>, LoraError> {
    let mut adapters = Vec::with_capacity(config.lora_modules.len());
    for (index, module) in config.lora_modules.iter().enumerate() {
        let adapter = load_adapter(
            adapter_id(index),
            &module.name,
            Path::new(&module.path),
            model,
            config.max_lora_rank,
        )?;
        let stated = module
            .base_model_name
            .as_ref()
            .or(adapter.base_model_name_or_path.as_ref());
        if let Some(base) = stated.filter(|b| b.as_str() != served_name) {
            tracing::warn!(adapter = %module.name, base = %base, served = %served_name,
                "the LoRA adapter names another base model; it is served on this one");
        }
        tracing::info!(adapter = %module.name, id = adapter.id, rank = adapter.rank, path = %module.path, "LoRA adapter loaded");
        adapters.push(Arc::new(adapter));
    }
    if adapters.len() > config.cpu_loras() {
        tracing::warn!(
            adapters = adapters.len(),
            "more start-up LoRA adapters than --max-cpu-loras: all are kept in memory"
        );
    }
    Ok(adapters)
}

/// The adapters as the API lists and looks them up.
pub fn served_adapters(config: &LoraConfig) -> Vec<ServedAdapter> {
    config
        .lora_modules
        .iter()
        .enumerate()
        .map(|(index, m)| ServedAdapter {
            name: m.name.clone(),
            id: adapter_id(index),
            path: m.path.clone(),
        })
        .collect()
}
