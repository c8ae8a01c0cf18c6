//! The file's `tokenizer.ggml.*` metadata, handed to [`crate::tokenizer`] as plain data.

use super::GgufFile;
use super::GgufValue;
use crate::tokenizer::GgufVocab;

impl GgufFile {
    /// Every tokenizer key kiln reads; absent or mistyped keys are `None`.
    pub fn tokenizer_vocab(&self) -> GgufVocab {
        let key = |name: &str| format!("tokenizer.ggml.{name}");
        let scores = self
            .get_array(&key("scores"))
            .and_then(|a| a.iter().map(GgufValue::as_f32).collect::<Option<Vec<_>>>());
        GgufVocab {
            source: self.path().to_path_buf(),
            model: self.get_str(&key("model")).map(str::to_string),
            pre: self.get_str(&key("pre")).map(str::to_string),
            tokens: self.get_string_array(&key("tokens")),
            token_types: self.get_i32_array(&key("token_type")),
            scores,
            merges: self.get_string_array(&key("merges")),
            bos: self.get_u32(&key("bos_token_id")),
            eos: self.get_u32(&key("eos_token_id")),
            eot: self.get_u32(&key("eot_token_id")),
            eom: self.get_u32(&key("eom_token_id")),
            unknown: self.get_u32(&key("unknown_token_id")),
            add_bos: self.get_bool(&key("add_bos_token")),
            add_space_prefix: self.get_bool(&key("add_space_prefix")),
        }
    }
}
