//! PEFT's `adapter_config.json`: what kiln reads of it, and what it refuses.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use super::LoraError;

/// The fields of `adapter_config.json` that change the arithmetic; the rest are ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct AdapterConfig {
    #[serde(default)]
    pub peft_type: Option<String>,
    pub r: usize,
    pub lora_alpha: f64,
    #[serde(default)]
    pub use_rslora: bool,
    #[serde(default)]
    pub use_dora: bool,
    #[serde(default)]
    pub fan_in_fan_out: bool,
    #[serde(default)]
    pub bias: Option<String>,
    #[serde(default)]
    pub modules_to_save: Option<Vec<String>>,
    #[serde(default)]
    pub rank_pattern: HashMap<String, serde_json::Value>,
    #[serde(default)]
    pub alpha_pattern: HashMap<String, serde_json::Value>,
    #[serde(default)]
    pub base_model_name_or_path: Option<String>,
    /// A trained bias on B (PEFT's `lora_bias`).
    #[serde(default)]
    pub lora_bias: bool,
    /// Newer PEFT settings that change what the adapter does; any value but null is refused.
    #[serde(default)]
    pub layer_replication: Option<serde_json::Value>,
    #[serde(default)]
    pub target_parameters: Option<serde_json::Value>,
    #[serde(default)]
    pub trainable_token_indices: Option<serde_json::Value>,
    #[serde(default)]
    pub alora_invocation_tokens: Option<serde_json::Value>,
}

impl AdapterConfig {
    pub fn read(dir: &Path) -> Result<Self, LoraError> {
        let path = dir.join("adapter_config.json");
        let text = std::fs::read_to_string(&path).map_err(|source| LoraError::Io {
            path: path.clone(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|e| LoraError::Invalid {
            path,
            message: e.to_string(),
        })
    }

    /// The settings kiln cannot apply, named (empty: all supported).
    pub fn unsupported(&self) -> Vec<String> {
        let mut found = Vec::new();
        if let Some(kind) = self.peft_type.as_deref().filter(|t| *t != "LORA") {
            found.push(format!("peft_type {kind} (only LORA)"));
        }
        if self.use_dora {
            found.push("DoRA (use_dora)".into());
        }
        if self.fan_in_fan_out {
            found.push("fan_in_fan_out".into());
        }
        if let Some(bias) = self.bias.as_deref().filter(|b| *b != "none") {
            found.push(format!("bias = {bias} (only none)"));
        }
        if let Some(modules) = self.modules_to_save.as_ref().filter(|m| !m.is_empty()) {
            found.push(format!("modules_to_save {modules:?}"));
        }
        if !self.rank_pattern.is_empty() {
            found.push("rank_pattern".into());
        }
        if !self.alpha_pattern.is_empty() {
            found.push("alpha_pattern".into());
        }
        if self.lora_bias {
            found.push("lora_bias".into());
        }
        for (name, value) in [
            ("layer_replication", &self.layer_replication),
            ("target_parameters", &self.target_parameters),
            (
                "trainable_token_indices (embedding targets)",
                &self.trainable_token_indices,
            ),
            (
                "alora_invocation_tokens (activated LoRA)",
                &self.alora_invocation_tokens,
            ),
        ] {
            if value.as_ref().is_some_and(|v| !v.is_null()) {
                found.push(name.into());
            }
        }
        if self.r == 0 {
            found.push("r = 0".into());
        }
        found
    }

    /// PEFT's scaling of the `B·A` product: `lora_alpha / r`, or `lora_alpha / sqrt(r)` for
    /// rsLoRA.
    pub fn scaling(&self) -> f32 {
        let r = self.r as f64;
        let divisor = if self.use_rslora { r.sqrt() } else { r };
        (self.lora_alpha / divisor) as f32
    }
}
