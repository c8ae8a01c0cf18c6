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

/// Engine `index`'s device: with CUDA, device `index` (one device per engine of a
/// data-parallel server); on the CPU every engine's is the one CPU device.
#[cfg(feature = "cuda")]
pub fn engine_device(index: usize) -> burn::tensor::Device<Backend> {
    burn::backend::cuda::CudaDevice::new(index)
}

/// Engine `index`'s device: with CUDA, device `index` (one device per engine of a
/// data-parallel server); on the CPU every engine's is the one CPU device.
#[cfg(not(feature = "cuda"))]
pub fn engine_device(_index: usize) -> burn::tensor::Device<Backend> {
    default_device()
}

/// How many engines can have a device of their own: CUDA's visible devices (after
/// `CUDA_VISIBLE_DEVICES`); `None` on the CPU, where engines share the one device.
pub fn engine_device_count() -> Option<usize> {
    #[cfg(feature = "cuda")]
    {
        Some(<Backend as burn::tensor::backend::Backend>::device_count(0))
    }
    #[cfg(not(feature = "cuda"))]
    {
        None
    }
}
