//! A linear projection: a burn tensor, or weights kept in quantised blocks and multiplied by
//! the CPU kernel (`crate::kernels`).

use std::sync::Arc;

use burn::tensor::{Tensor, TensorData, backend::Backend};

use crate::kernels::{PackedMatrix, matmul_packed};

#[derive(Debug, Clone)]
pub enum Projection<B: Backend> {
    /// `[in, out]`, applied with burn's matmul.
    Dense(Tensor<B, 2>),
    /// `[out, in]` in quantised blocks; the activations make a round trip through host
    /// memory, so this is for the CPU backend only.
    Packed(Arc<PackedMatrix>),
}

impl<B: Backend> Projection<B> {
    /// # Shapes
    /// - x: `[tokens, in]`
    /// - output: `[tokens, out]`
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        match self {
            Projection::Dense(w) => x.matmul(w.clone()),
            Projection::Packed(w) => {
                let [tokens, _] = x.dims();
                let device = x.device();
                let y = matmul_packed(&to_host(x), tokens, w);
                Tensor::from_data(TensorData::new(y, [tokens, w.rows]), &device)
            }
        }
    }

    /// [`forward`](Self::forward) on host rows: packed weights multiply them in place; dense
    /// ones make a round trip through a tensor on `device`.
    ///
    /// # Shapes
    /// - x: `[tokens, in]`
    /// - output: `[tokens, out]`
    pub fn forward_host(&self, x: &[f32], tokens: usize, device: &B::Device) -> Vec<f32> {
        match self {
            Projection::Packed(w) => matmul_packed(x, tokens, w),
            Projection::Dense(w) => {
                let [inputs, _] = w.dims();
                let x = Tensor::from_data(TensorData::new(x.to_vec(), [tokens, inputs]), device);
                to_host(x.matmul(w.clone()))
            }
        }
    }

    /// The packed weights, when the projection runs on the host kernel.
    pub fn packed(&self) -> Option<&PackedMatrix> {
        match self {
            Projection::Dense(_) => None,
            Projection::Packed(w) => Some(w),
        }
    }

    /// Bytes of weights one forward pass reads.
    pub fn size_bytes(&self) -> usize {
        match self {
            Projection::Dense(w) => w.shape().num_elements() * size_of::<f32>(),
            Projection::Packed(w) => w.size_bytes(),
        }
    }
}

/// The tensor's values in host memory, row-major.
pub fn to_host<B: Backend>(x: Tensor<B, 2>) -> Vec<f32> {
    x.into_data()
        .into_vec::<f32>()
        .expect("the model's activations are f32")
}
