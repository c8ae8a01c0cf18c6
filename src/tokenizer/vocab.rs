//! The `tokenizer.ggml.*` metadata a GGUF file describes its tokenizer with, as plain data:
//! the model layer reads it out of the file, this module builds the tokenizer from it.

use std::path::PathBuf;

/// llama.cpp's `LLAMA_TOKEN_TYPE_NORMAL`.
pub const TOKEN_TYPE_NORMAL: i32 = 1;
/// llama.cpp's `LLAMA_TOKEN_TYPE_UNKNOWN`: `<unk>`.
pub const TOKEN_TYPE_UNKNOWN: i32 = 2;
/// llama.cpp's `LLAMA_TOKEN_TYPE_CONTROL`: special tokens such as `<|im_start|>` or `<s>`.
pub const TOKEN_TYPE_CONTROL: i32 = 3;
/// llama.cpp's `LLAMA_TOKEN_TYPE_USER_DEFINED`: added tokens matched verbatim in text.
pub const TOKEN_TYPE_USER_DEFINED: i32 = 4;
/// llama.cpp's `LLAMA_TOKEN_TYPE_BYTE`: SentencePiece byte-fallback pieces `<0xXX>`.
pub const TOKEN_TYPE_BYTE: i32 = 6;

/// Everything under `tokenizer.ggml.` that kiln reads; `None` where the file lacks the key
/// (or holds it with another type).
#[derive(Debug, Clone, Default)]
pub struct GgufVocab {
    /// The file, to label errors.
    pub source: PathBuf,
    /// `tokenizer.ggml.model`: `gpt2` (byte-level BPE) or `llama` (SentencePiece).
    pub model: Option<String>,
    /// `tokenizer.ggml.pre`: which pre-tokenizer split a `gpt2` vocabulary was trained with.
    pub pre: Option<String>,
    pub tokens: Option<Vec<String>>,
    pub token_types: Option<Vec<i32>>,
    pub scores: Option<Vec<f32>>,
    pub merges: Option<Vec<String>>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// End of turn (`<|eot_id|>`, `<end_of_turn>`), when the converter recorded it.
    pub eot: Option<u32>,
    /// End of message (Llama 3.1's `<|eom_id|>`).
    pub eom: Option<u32>,
    pub unknown: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`.
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix` (SentencePiece's dummy prefix `▁`).
    pub add_space_prefix: Option<bool>,
}
