//! The special token ids generation needs: BOS for the chat template, and the ids that end
//! generation (EOS, end of turn, end of message, and the model's generation config).

use super::vocab::GgufVocab;

/// Texts that end a turn or a document in common vocabularies. llama.cpp also stops on
/// these whatever `eos_token_id` says, because converters often record the wrong EOS.
const END_TOKENS: [&str; 11] = [
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end|>",
    "</s>",
    "<|end_of_text|>",
    "<end_of_turn>",
    "<EOT>",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];

/// The special token ids generation needs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SpecialTokens {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// Ids that end generation: `eos` unless its text is a start token (some GGUFs record
    /// `<|im_start|>` as EOS), the end-of-turn/message ids, the vocabulary's end tokens by
    /// text, and (Hugging Face folders) every `eos_token_id` of the generation config.
    pub end_of_generation: Vec<u32>,
}

impl SpecialTokens {
    /// From `tokenizer.ggml.{bos,eos,eot,eom}_token_id` and the vocabulary's end tokens.
    pub fn from_vocab(vocab: &GgufVocab) -> SpecialTokens {
        let tokens = vocab.tokens.as_deref().unwrap_or_default();
        let text_of = |id: u32| tokens.get(id as usize).cloned();
        let id_of = |text: &str| tokens.iter().position(|t| t == text).map(|i| i as u32);
        let mut special = Self::build(vocab.bos, vocab.eos, text_of, id_of);
        special.add_end_ids(vocab.eot.into_iter().chain(vocab.eom));
        special
    }

    pub(super) fn build(
        bos: Option<u32>,
        eos: Option<u32>,
        text_of: impl Fn(u32) -> Option<String>,
        id_of: impl Fn(&str) -> Option<u32>,
    ) -> SpecialTokens {
        let mut special = SpecialTokens {
            bos,
            eos,
            end_of_generation: Vec::new(),
        };
        if let Some(eos) = eos {
            match text_of(eos) {
                Some(text) if is_start_token(&text) => tracing::warn!(
                    eos, text = %text, "EOS token looks like a start token; not stopping on it"
                ),
                _ => special.end_of_generation.push(eos),
            }
        }
        special.add_end_ids(END_TOKENS.iter().filter_map(|t| id_of(t)));
        special
    }

    /// Adds stop ids not yet present, in order.
    pub(super) fn add_end_ids(&mut self, ids: impl IntoIterator<Item = u32>) {
        for id in ids {
            if !self.end_of_generation.contains(&id) {
                self.end_of_generation.push(id);
            }
        }
    }
}

fn is_start_token(text: &str) -> bool {
    text == "<s>" || text.contains("start") || text.contains("begin")
}
