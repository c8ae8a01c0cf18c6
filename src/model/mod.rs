//! The model: decoder-only transformers in burn behind one seam (`arch/`), weight formats,
//! chat template, default-model fetch.

pub mod arch;
pub mod attention;
pub mod chat_template;
pub mod config;
pub mod decoder;
pub mod embedding;
pub mod error;
pub mod fetch;
pub mod gguf;
mod host_ops;
pub mod known_models;
pub mod loader;
pub mod lora;
pub mod projection;
pub mod rope;
pub mod sources;
mod tensor_ops;
pub mod transformer;
pub mod weights;

/// The burn backend kiln runs on: CUDA with the `cuda` feature, else the CPU `flex` backend.
#[cfg(feature = "cuda")]
pub type Backend = burn::backend::Cuda;
#[cfg(not(feature = "cuda"))]
pub type Backend = burn::backend::Flex;

/// Where [`Backend`] keeps the weights and KV cache (`kiln_memory_bytes`' `device` label).
#[cfg(feature = "cuda")]
pub const DEVICE_NAME: &str = "cuda";
#[cfg(not(feature = "cuda"))]
pub const DEVICE_NAME: &str = "cpu";

/// The device models are placed on.
pub fn default_device() -> burn::tensor::Device<Backend> {
    Default::default()
}
