//! Mistral: Llama with a sliding window when the model sets one. llama.cpp converts Mistral
//! to a `llama` GGUF (without the window), so this is the Hugging Face path.

use super::{Architecture, Metadata};
use crate::model::config::ArchFeatures;

pub struct Mistral;

impl Architecture for Mistral {
    fn name(&self) -> &'static str {
        "mistral"
    }

    fn hf_names(&self) -> &'static [&'static str] {
        &["mistral", "MistralForCausalLM"]
    }

    fn features(&self, meta: &Metadata<'_>) -> Result<ArchFeatures, String> {
        Ok(ArchFeatures {
            sliding_window: meta.usize("attention.sliding_window", "sliding_window"),
            ..ArchFeatures::default()
        })
    }
}
