//! The decoder layer on host rows, for models whose projections run on the packed CPU
//! kernels. RMSNorm, RoPE, the Q/K/V split and the residual adds are plain loops over
//! `Vec<f32>` here; as burn tensor ops they are about fifty ops a layer, each with its own
//! allocation and dispatch, which cost a one-stream decode step nearly a quarter of its time
//! (README, "Where a one-stream decode step goes"). The arithmetic is the burn path's, in the
//! same order, except the RMSNorm sum, whose summation order may differ.

use burn::tensor::{Tensor, TensorData, backend::Backend};

use super::llama::{DecoderLayer, Llama, StepLayout};
use super::projection::to_host;
use crate::kernels::activation::swiglu;
use crate::kernels::attention::{HeadShape, SequenceSpan};
use crate::kv_cache::backend_ops::KvCacheOps;
use crate::kv_cache::device_cache::PagedKvCache;

/// An RMSNorm weight, kept both as a tensor (the burn path) and in host memory.
#[derive(Debug, Clone)]
pub struct NormWeight<B: Backend> {
    /// `[hidden]`
    pub tensor: Tensor<B, 1>,
    /// The same values, `[hidden]`.
    pub host: Vec<f32>,
}

impl<B: Backend> NormWeight<B> {
    pub fn new(values: Vec<f32>, device: &B::Device) -> Self {
        let n = values.len();
        Self {
            tensor: Tensor::from_data(TensorData::new(values.clone(), [n]), device),
            host: values,
        }
    }
}

impl<B: KvCacheOps> Llama<B> {
    /// Whether the layers run on host rows: any projection on the packed CPU kernels means
    /// the model is on the CPU, where activations already make a round trip through host
    /// memory for every projection.
    pub(super) fn layers_on_host(&self) -> bool {
        self.lm_head.packed().is_some()
            || self.layers.iter().any(|l| {
                [&l.qkv, &l.attn_out, &l.gate_up, &l.down]
                    .iter()
                    .any(|p| p.packed().is_some())
            })
    }

    /// [`Llama::layer_forward`](super::llama) on host rows: `positions` holds each row's
    /// position in its sequence.
    ///
    /// # Shapes
    /// - x: `[tokens, hidden]`, positions: `[tokens]`
    /// - output: `[tokens, hidden]`
    #[allow(clippy::too_many_arguments)]
    pub(super) fn layer_forward_host(
        &self,
        index: usize,
        layer: &DecoderLayer<B>,
        mut x: Vec<f32>,
        positions: &[usize],
        layout: &StepLayout<B>,
        spans: &[SequenceSpan],
        cache: &mut PagedKvCache<B>,
    ) -> Vec<f32> {
        let c = &self.config;
        let tokens = positions.len();
        let (q_dim, kv_dim) = (c.num_heads * c.head_dim, c.kv_dim());
        let device = &self.device;

        let h = rms_norm_rows(&x, &layer.attn_norm.host, c.rms_norm_eps);
        let qkv = layer.qkv.forward_host(&h, tokens, device);
        let (mut q, mut k, v) = split_qkv(&qkv, q_dim, kv_dim);
        self.rope.rotate_host(&mut q, c.num_heads, positions);
        self.rope.rotate_host(&mut k, c.num_kv_heads, positions);
        cache.write(
            index,
            &layout.write_runs,
            host_tensor(k, [tokens, kv_dim], device),
            host_tensor(v, [tokens, kv_dim], device),
        );

        let shape = HeadShape {
            num_heads: c.num_heads,
            num_kv_heads: c.num_kv_heads,
            head_dim: c.head_dim,
        };
        let q = host_tensor(q, [tokens, q_dim], device);
        let attn = match cache.attention(index, q.clone(), spans, shape) {
            Some(attn) => attn,
            None => {
                let q = q.reshape([tokens, c.num_heads, c.head_dim]);
                self.gathered_attention(index, q, layout, cache)
            }
        };
        add_rows(&mut x, &layer.attn_out.forward_host(&to_host(attn), tokens, device));

        let h = rms_norm_rows(&x, &layer.ffn_norm.host, c.rms_norm_eps);
        let gate_up = layer.gate_up.forward_host(&h, tokens, device);
        let down = layer
            .down
            .forward_host(&swiglu(&gate_up, c.intermediate_size), tokens, device);
        add_rows(&mut x, &down);
        x
    }
}

fn host_tensor<B: Backend>(values: Vec<f32>, shape: [usize; 2], device: &B::Device) -> Tensor<B, 2> {
    Tensor::from_data(TensorData::new(values, shape), device)
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

/// Root-mean-square normalisation of each row, as [`super::llama::rms_norm`] computes it.
///
/// # Shapes
/// - x: `[rows, hidden]`, weight: `[hidden]`
/// - output: `[rows, hidden]`
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
        let burn = super::super::llama::rms_norm(
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
