//! The decoder layer's arithmetic on host rows, for models whose projections run on the
//! packed CPU kernels. RMSNorm, RoPE, the Q/K/V split and the residual adds are plain loops
//! over `Vec<f32>` here; as burn tensor ops they are about fifty ops a layer, each with its
//! own allocation and dispatch, which cost a one-stream decode step nearly a quarter of its
//! time (docs/08-performance.md, "Where a one-stream decode step goes"). The arithmetic is the burn path's,
//! in the same order, except the RMSNorm sum, whose summation order may differ.

use burn::tensor::{Tensor, TensorData};

use super::config::{Activation, ModelConfig};
use super::decoder::{LayerOps, NormWeight};
use super::lora::{LoraRows, Target, add_lora};
use super::projection::{Projection, to_host};
use super::rope::RotaryEmbedding;
use crate::kernels::activation::{gelu_tanh_gated, swiglu};
use crate::kv_cache::backend_ops::KvCacheOps;

/// Host-row arithmetic for one step: `positions` holds each row's position in its sequence.
pub(super) struct HostOps<'a, B: KvCacheOps> {
    config: &'a ModelConfig,
    /// The global and the local RoPE tables.
    ropes: [&'a RotaryEmbedding<B>; 2],
    device: &'a B::Device,
    positions: &'a [usize],
}

impl<'a, B: KvCacheOps> HostOps<'a, B> {
    pub(super) fn new(
        config: &'a ModelConfig,
        ropes: [&'a RotaryEmbedding<B>; 2],
        device: &'a B::Device,
        positions: &'a [usize],
    ) -> Self {
        Self {
            config,
            ropes,
            device,
            positions,
        }
    }

    fn tokens(&self) -> usize {
        self.positions.len()
    }
}

impl<B: KvCacheOps> LayerOps<B> for HostOps<'_, B> {
    type Rows = Vec<f32>;

    fn norm(&self, x: &Vec<f32>, weight: &NormWeight<B>) -> Vec<f32> {
        rms_norm_rows(x, &weight.host, self.config.rms_norm_eps)
    }

    fn head_norm(&self, x: Vec<f32>, weight: &NormWeight<B>) -> Vec<f32> {
        rms_norm_rows(&x, &weight.host, self.config.rms_norm_eps)
    }

    fn project(&self, projection: &Projection<B>, x: &Vec<f32>) -> Vec<f32> {
        projection.forward_host(x, self.tokens(), self.device)
    }

    fn add_lora(&self, mut y: Vec<f32>, x: &Vec<f32>, lora: &[LoraRows<'_>], layer: usize, target: Target) -> Vec<f32> {
        let tokens = self.tokens();
        let (in_width, out_width) = (x.len() / tokens, y.len() / tokens);
        add_lora(lora, layer, target, x, in_width, &mut y, out_width);
        y
    }

    fn add_bias(&self, mut x: Vec<f32>, bias: &NormWeight<B>) -> Vec<f32> {
        for row in x.chunks_exact_mut(bias.host.len()) {
            add_rows(row, &bias.host);
        }
        x
    }

    fn split_qkv(&self, qkv: Vec<f32>, q_dim: usize, kv_dim: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        split_qkv(&qkv, q_dim, kv_dim)
    }

    fn rotate(&self, mut x: Vec<f32>, heads: usize, local: bool) -> Vec<f32> {
        self.ropes[usize::from(local)].rotate_host(&mut x, heads, self.positions);
        x
    }

    fn scale(&self, mut x: Vec<f32>, factor: f32) -> Vec<f32> {
        x.iter_mut().for_each(|v| *v *= factor);
        x
    }

    fn add(&self, mut x: Vec<f32>, y: Vec<f32>) -> Vec<f32> {
        add_rows(&mut x, &y);
        x
    }

    fn gated(&self, gate_up: Vec<f32>, ffn: usize, activation: Activation) -> Vec<f32> {
        match activation {
            Activation::Silu => swiglu(&gate_up, ffn),
            Activation::GeluTanh => gelu_tanh_gated(&gate_up, ffn),
        }
    }

    fn to_tensor(&self, x: Vec<f32>, width: usize) -> Tensor<B, 2> {
        Tensor::from_data(TensorData::new(x, [self.tokens(), width]), self.device)
    }

    fn rows_of(&self, x: Tensor<B, 2>) -> Vec<f32> {
        to_host(x)
    }
}

/// The fused projection's rows split into Q, K and V.
///
/// # Shapes
/// - qkv: `[tokens, q_dim + 2 * kv_dim]`
/// - output: `[tokens, q_dim]`, `[tokens, kv_dim]`, `[tokens, kv_dim]`
fn split_qkv(qkv: &[f32], q_dim: usize, kv_dim: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let width = q_dim + 2 * kv_dim;
    let tokens = qkv.len() / width;
    let (mut q, mut k, mut v) = (
        Vec::with_capacity(tokens * q_dim),
        Vec::with_capacity(tokens * kv_dim),
        Vec::with_capacity(tokens * kv_dim),
    );
    for row in qkv.chunks_exact(width) {
        let (row_q, rest) = row.split_at(q_dim);
        let (row_k, row_v) = rest.split_at(kv_dim);
        q.extend_from_slice(row_q);
        k.extend_from_slice(row_k);
        v.extend_from_slice(row_v);
    }
    (q, k, v)
}

/// Root-mean-square normalisation of each `weight.len()`-wide row, as
/// the burn path's `rms_norm` computes it.
///
/// # Shapes
/// - x: `[rows, width]`, weight: `[width]`
/// - output: `[rows, width]`
pub fn rms_norm_rows(x: &[f32], weight: &[f32], eps: f32) -> Vec<f32> {
    let hidden = weight.len();
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks_exact(hidden) {
        let mean_square = row.iter().map(|v| v * v).sum::<f32>() / hidden as f32;
        let inv_rms = 1.0 / (mean_square + eps).sqrt();
        out.extend(row.iter().zip(weight).map(|(v, w)| v * inv_rms * w));
    }
    out
}

/// `x += y`, element by element.
fn add_rows(x: &mut [f32], y: &[f32]) {
    assert_eq!(x.len(), y.len(), "residual and branch must have one shape");
    x.iter_mut().zip(y).for_each(|(x, y)| *x += y);
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;

    #[test]
    fn rms_norm_rows_matches_the_burn_rms_norm() {
        let device = Default::default();
        let x: Vec<f32> = (0..3 * 8).map(|i| (i as f32 * 0.37).sin() * 2.0).collect();
        let w: Vec<f32> = (0..8).map(|i| 0.5 + i as f32 * 0.1).collect();
        let burn = crate::model::tensor_ops::rms_norm(
            Tensor::<Flex, 2>::from_data(TensorData::new(x.clone(), [3, 8]), &device),
            &Tensor::from_data(TensorData::new(w.clone(), [8]), &device),
            1e-5,
        );
        let host = rms_norm_rows(&x, &w, 1e-5);
        for (a, b) in to_host(burn).iter().zip(&host) {
            // Only the order of an eight-term sum differs: a few ulps.
            assert!((a - b).abs() <= 1e-6 * a.abs().max(1.0), "{a} vs {b}");
        }
    }

    #[test]
    fn split_qkv_takes_each_rows_q_then_k_then_v() {
        let qkv: Vec<f32> = (0..2 * 8).map(|i| i as f32).collect();
        let (q, k, v) = split_qkv(&qkv, 4, 2);
        assert_eq!(q, [0.0, 1.0, 2.0, 3.0, 8.0, 9.0, 10.0, 11.0]);
        assert_eq!(k, [4.0, 5.0, 12.0, 13.0]);
        assert_eq!(v, [6.0, 7.0, 14.0, 15.0]);
    }
}
