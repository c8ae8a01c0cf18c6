//! GGUF (llama.cpp's single-file model format): reading, dequantising and writing.
//!
//! Layout of a GGUF v2/v3 file (all little-endian):
//! `"GGUF"`, `u32 version`, `u64 tensor_count`, `u64 kv_count`, the key/value metadata,
//! the tensor infos (name, `u32 n_dims`, `u64 ne[n_dims]`, `u32 type`, `u64 offset`), padding to
//! `general.alignment` (default 32), then the tensor data. Offsets are relative to the start of
//! the data section. ggml lists dimensions innermost first (`ne[0]` is the row length); this
//! module exposes shapes outermost first (row-major), as the rest of kiln expects.

mod dequant;
mod parse;
mod reader;
#[cfg(test)]
mod tests;
mod tokenizer_vocab;
mod types;
mod widening;
mod writer;

pub use dequant::{DequantError, dequantize, quantize};
pub use parse::GgufTensorInfo;
pub use reader::{GgufFile, GgufTensor};
pub use types::{GgufValue, GgufValueType};
pub use writer::GgufWriter;

use std::path::PathBuf;

use crate::kernels::GgmlType;

/// Default data alignment when `general.alignment` is absent (llama.cpp's `GGUF_DEFAULT_ALIGNMENT`).
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// Everything that can go wrong opening or reading a GGUF file.
///
/// Every variant carries the file path so that a message in a server log is actionable
/// without any surrounding context.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("{path}: cannot read GGUF file: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a GGUF file (magic is {found:02x?}, expected \"GGUF\")")]
    BadMagic { path: PathBuf, found: [u8; 4] },
    #[error("{path}: unsupported GGUF version {version} (supported: 2, 3){hint}")]
    UnsupportedVersion {
        path: PathBuf,
        version: u32,
        hint: &'static str,
    },
    #[error("{path}: truncated {what}: need {needed} bytes at offset {offset}, file is {file_len} bytes")]
    Truncated {
        path: PathBuf,
        what: String,
        offset: u64,
        needed: u64,
        file_len: u64,
    },
    #[error("{path}: malformed {what}: {detail}")]
    Malformed {
        path: PathBuf,
        what: String,
        detail: String,
    },
    #[error("{path}: unknown metadata value type {type_id} in {what}")]
    UnknownValueType { path: PathBuf, what: String, type_id: u32 },
    #[error("{path}: tensor '{tensor}' has unknown ggml type id {type_id}")]
    UnknownTensorType {
        path: PathBuf,
        tensor: String,
        type_id: u32,
    },
    #[error(
        "{path}: tensor '{tensor}' has type {ty}, which kiln cannot dequantise (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS)"
    )]
    UnsupportedTensorType {
        path: PathBuf,
        tensor: String,
        ty: GgmlType,
    },
    #[error("{path}: tensor '{name}' not found")]
    MissingTensor { path: PathBuf, name: String },
}
