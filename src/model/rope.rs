//! Rotary position embeddings in the Hugging Face "rotate half" layout.
//!
//! GGUF files store Q/K rows permuted for llama.cpp's interleaved RoPE; the weight loader
//! un-permutes them, so one RoPE formulation serves both formats.

use burn::tensor::{Int, Tensor, backend::Backend};

/// Precomputed cos/sin tables for every position up to the model's context length.
#[derive(Debug, Clone)]
pub struct RotaryEmbedding<B: Backend> {
    /// `[max_positions, head_dim / 2]`
    cos: Tensor<B, 2>,
    /// `[max_positions, head_dim / 2]`
    sin: Tensor<B, 2>,
}

impl<B: Backend> RotaryEmbedding<B> {
    pub fn new(head_dim: usize, theta: f32, max_positions: usize, device: &B::Device) -> Self {
        let half = head_dim / 2;
        let mut cos = Vec::with_capacity(max_positions * half);
        let mut sin = Vec::with_capacity(max_positions * half);
        for pos in 0..max_positions {
            for i in 0..half {
                // Computed in f64 so long positions keep their precision before rounding.
                let inv_freq = 1.0 / (theta as f64).powf((2 * i) as f64 / head_dim as f64);
                let angle = pos as f64 * inv_freq;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        let shape = [max_positions, half];
        Self {
            cos: Tensor::from_data(burn::tensor::TensorData::new(cos, shape), device),
            sin: Tensor::from_data(burn::tensor::TensorData::new(sin, shape), device),
        }
    }

    /// Cos/sin rows for the given positions, shaped to broadcast over heads.
    ///
    /// # Shapes
    /// - positions: `[tokens]`
    /// - output: two tensors `[tokens, 1, head_dim / 2]`
    pub fn tables(&self, positions: Tensor<B, 1, Int>) -> (Tensor<B, 3>, Tensor<B, 3>) {
        let cos = self.cos.clone().select(0, positions.clone());
        let sin = self.sin.clone().select(0, positions);
        let [tokens, half] = cos.dims();
        (cos.reshape([tokens, 1, half]), sin.reshape([tokens, 1, half]))
    }

    /// Rotates queries or keys.
    ///
    /// # Shapes
    /// - x: `[tokens, heads, head_dim]`
    /// - cos, sin: `[tokens, 1, head_dim / 2]`
    /// - output: `[tokens, heads, head_dim]`
    pub fn apply(x: Tensor<B, 3>, cos: &Tensor<B, 3>, sin: &Tensor<B, 3>) -> Tensor<B, 3> {
        let [_, _, head_dim] = x.dims();
        let half = head_dim / 2;
        let x1 = x.clone().narrow(2, 0, half);
        let x2 = x.narrow(2, half, half);
        let out1 = x1.clone() * cos.clone() - x2.clone() * sin.clone();
        let out2 = x2 * cos.clone() + x1 * sin.clone();
        Tensor::cat(vec![out1, out2], 2)
    }
}
