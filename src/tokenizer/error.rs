//! Why a tokenizer could not be built.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("{path}: metadata key `{key}` is missing (or has the wrong type)")]
    Missing { path: PathBuf, key: &'static str },
    #[error("{path}: tokenizer model '{model}' is not supported (supported: {supported})")]
    UnsupportedModel {
        path: PathBuf,
        model: String,
        supported: String,
    },
    #[error("{path}: pre-tokenizer tokenizer.ggml.pre = '{pre}' is not supported (supported: {supported})")]
    UnsupportedPre {
        path: PathBuf,
        pre: String,
        supported: String,
    },
    #[error("{path}: tokenizer.ggml.merges[{index}] = {merge:?} is not two space-separated tokens")]
    BadMerge { path: PathBuf, index: usize, merge: String },
    #[error("{path}: tokenizer.ggml.{what} has {found} entries but there are {tokens} tokens")]
    Length {
        path: PathBuf,
        what: &'static str,
        found: usize,
        tokens: usize,
    },
    #[error("{path}: cannot build tokenizer: {message}")]
    Build { path: PathBuf, message: String },
    #[error("{path}: cannot read {what}: {message}")]
    Load {
        path: PathBuf,
        what: &'static str,
        message: String,
    },
}
