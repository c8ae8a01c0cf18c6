//! Rotary position embeddings in the Hugging Face "rotate half" layout.
//!
//! GGUF files store Q/K rows permuted for llama.cpp's interleaved RoPE; the weight loader
//! un-permutes them, so one RoPE formulation serves both formats.

pub mod scaling;

use std::sync::Arc;

use burn::tensor::{Int, Tensor, backend::Backend};

use scaling::RopeScaling;

/// Precomputed cos/sin tables for every position up to the model's context length, as tensors
/// and in host memory (for the layers that run on host rows).
#[derive(Debug, Clone)]
pub struct RotaryEmbedding<B: Backend> {
    /// `[max_positions, head_dim / 2]`
    cos: Tensor<B, 2>,
    /// `[max_positions, head_dim / 2]`
    sin: Tensor<B, 2>,
    /// `cos` in host memory.
    cos_host: Arc<[f32]>,
    /// `sin` in host memory.
    sin_host: Arc<[f32]>,
    half: usize,
}

impl<B: Backend> RotaryEmbedding<B> {
    pub fn new(head_dim: usize, theta: f32, max_positions: usize, device: &B::Device) -> Self {
        Self::scaled(head_dim, theta, &RopeScaling::None, max_positions, device)
    }

    /// Tables with each frequency divided as `scaling` says.
    pub fn scaled(
        head_dim: usize,
        theta: f32,
        scaling: &RopeScaling,
        max_positions: usize,
        device: &B::Device,
    ) -> Self {
        let half = head_dim / 2;
        let mut cos = Vec::with_capacity(max_positions * half);
        let mut sin = Vec::with_capacity(max_positions * half);
        for pos in 0..max_positions {
            for i in 0..half {
                // Computed in f64 so long positions keep their precision before rounding.
                let inv_freq = 1.0 / (theta as f64).powf((2 * i) as f64 / head_dim as f64) / scaling.divisor(i);
                let angle = pos as f64 * inv_freq;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        let shape = [max_positions, half];
        Self {
            cos: Tensor::from_data(burn::tensor::TensorData::new(cos.clone(), shape), device),
            sin: Tensor::from_data(burn::tensor::TensorData::new(sin.clone(), shape), device),
            cos_host: cos.into(),
            sin_host: sin.into(),
            half,
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

    /// [`apply`](Self::apply) in place on host rows, with the same arithmetic in the same
    /// order (so the same bits).
    ///
    /// # Shapes
    /// - x: `[tokens, heads, head_dim]`, positions: `[tokens]`
    pub fn rotate_host(&self, x: &mut [f32], heads: usize, positions: &[usize]) {
        let half = self.half;
        assert_eq!(
            x.len(),
            positions.len() * heads * 2 * half,
            "x must be [tokens, {heads}, {}]",
            2 * half
        );
        for (row, &position) in x.chunks_exact_mut(heads * 2 * half).zip(positions) {
            let cos = &self.cos_host[position * half..][..half];
            let sin = &self.sin_host[position * half..][..half];
            for head in row.chunks_exact_mut(2 * half) {
                let (x1, x2) = head.split_at_mut(half);
                for (((x1, x2), cos), sin) in x1.iter_mut().zip(x2.iter_mut()).zip(cos).zip(sin) {
                    let (a, b) = (*x1, *x2);
                    *x1 = a * cos - b * sin;
                    *x2 = b * cos + a * sin;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::TensorData;

    #[test]
    fn rotate_host_equals_apply_bit_for_bit() {
        let device = Default::default();
        let rope = RotaryEmbedding::<Flex>::new(8, 10000.0, 64, &device);
        let positions = [0usize, 5, 63];
        let x: Vec<f32> = (0..3 * 2 * 8).map(|i| (i as f32 * 0.71).cos() * 3.0).collect();
        let ids: Vec<i64> = positions.iter().map(|&p| p as i64).collect();
        let (cos, sin) = rope.tables(Tensor::from_data(TensorData::new(ids, [3]), &device));
        let burn = RotaryEmbedding::apply(
            Tensor::from_data(TensorData::new(x.clone(), [3, 2, 8]), &device),
            &cos,
            &sin,
        );
        let mut host = x;
        rope.rotate_host(&mut host, 2, &positions);
        assert_eq!(burn.into_data().into_vec::<f32>().expect("f32"), host);
    }
}
