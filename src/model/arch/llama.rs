//! Llama 2/3/3.1/3.2 (and SmolLM, TinyLlama, ...): the reference layer, nothing differs.

use super::{Architecture, Metadata};
use crate::model::config::ArchFeatures;

pub struct Llama;

impl Architecture for Llama {
    fn name(&self) -> &'static str {
        "llama"
    }

    fn hf_names(&self) -> &'static [&'static str] {
        &["llama", "LlamaForCausalLM"]
    }

    fn features(&self, _meta: &Metadata<'_>) -> Result<ArchFeatures, String> {
        Ok(ArchFeatures::default())
    }
}
