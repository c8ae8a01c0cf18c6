//! The decoder layer's arithmetic as burn tensor ops (CUDA, and dense CPU models).

use burn::tensor::{Int, Tensor, activation::silu, backend::Backend};

use super::config::{Activation, ModelConfig};
use super::decoder::{LayerOps, NormWeight};
use super::lora::{LoraRows, Target, add_lora};
use super::projection::{Projection, to_host};
use super::rope::RotaryEmbedding;
use crate::kv_cache::backend_ops::KvCacheOps;

/// Tensor arithmetic for one step, with the step's RoPE rows looked up once.
pub(super) struct TensorOps<'a, B: KvCacheOps> {
    config: &'a ModelConfig,
    /// cos/sin, `[tokens, 1, head_dim / 2]` each: the global table's, then the local one's.
    tables: [(Tensor<B, 3>, Tensor<B, 3>); 2],
}

impl<'a, B: KvCacheOps> TensorOps<'a, B> {
    /// # Shapes
    /// - positions: `[tokens]`
    /// - ropes: the global and the local table (the same one when the model has one)
    pub(super) fn new(config: &'a ModelConfig, ropes: [&RotaryEmbedding<B>; 2], positions: Tensor<B, 1, Int>) -> Self {
        let global = ropes[0].tables(positions.clone());
        let local = match std::ptr::eq(ropes[0], ropes[1]) {
            true => global.clone(),
            false => ropes[1].tables(positions),
        };
        Self {
            config,
            tables: [global, local],
        }
    }
}

impl<B: KvCacheOps> LayerOps<B> for TensorOps<'_, B> {
    type Rows = Tensor<B, 2>;

    fn norm(&self, x: &Tensor<B, 2>, weight: &NormWeight<B>) -> Tensor<B, 2> {
        rms_norm(x.clone(), &weight.tensor, self.config.rms_norm_eps)
    }

    fn head_norm(&self, x: Tensor<B, 2>, weight: &NormWeight<B>) -> Tensor<B, 2> {
        let [tokens, width] = x.dims();
        let head_dim = weight.host.len();
        let heads = x.reshape([tokens * width / head_dim, head_dim]);
        rms_norm(heads, &weight.tensor, self.config.rms_norm_eps).reshape([tokens, width])
    }

    fn project(&self, projection: &Projection<B>, x: &Tensor<B, 2>) -> Tensor<B, 2> {
        projection.forward(x.clone())
    }

    /// On host rows: a plain loop over the adapters' groups (speed later).
    fn add_lora(
        &self,
        y: Tensor<B, 2>,
        x: &Tensor<B, 2>,
        lora: &[LoraRows<'_>],
        layer: usize,
        target: Target,
    ) -> Tensor<B, 2> {
        let ([tokens, in_width], [_, out_width]) = (x.dims(), y.dims());
        let device = y.device();
        let mut rows = to_host(y);
        add_lora(lora, layer, target, &to_host(x.clone()), in_width, &mut rows, out_width);
        Tensor::from_data(burn::tensor::TensorData::new(rows, [tokens, out_width]), &device)
    }

    fn add_bias(&self, x: Tensor<B, 2>, bias: &NormWeight<B>) -> Tensor<B, 2> {
        let [_, width] = x.dims();
        x + bias.tensor.clone().reshape([1, width])
    }

    fn split_qkv(&self, qkv: Tensor<B, 2>, q_dim: usize, kv_dim: usize) -> (Tensor<B, 2>, Tensor<B, 2>, Tensor<B, 2>) {
        (
            qkv.clone().narrow(1, 0, q_dim),
            qkv.clone().narrow(1, q_dim, kv_dim),
            qkv.narrow(1, q_dim + kv_dim, kv_dim),
        )
    }

    fn rotate(&self, x: Tensor<B, 2>, heads: usize, local: bool) -> Tensor<B, 2> {
        let [tokens, width] = x.dims();
        let (cos, sin) = &self.tables[usize::from(local)];
        RotaryEmbedding::apply(x.reshape([tokens, heads, width / heads]), cos, sin).reshape([tokens, width])
    }

    fn scale(&self, x: Tensor<B, 2>, factor: f32) -> Tensor<B, 2> {
        x.mul_scalar(factor)
    }

    fn add(&self, x: Tensor<B, 2>, y: Tensor<B, 2>) -> Tensor<B, 2> {
        x + y
    }

    fn gated(&self, gate_up: Tensor<B, 2>, ffn: usize, activation: Activation) -> Tensor<B, 2> {
        let gate = gate_up.clone().narrow(1, 0, ffn);
        let up = gate_up.narrow(1, ffn, ffn);
        let gate = match activation {
            Activation::Silu => silu(gate),
            Activation::GeluTanh => gelu_tanh(gate),
        };
        gate * up
    }

    fn to_tensor(&self, x: Tensor<B, 2>, _width: usize) -> Tensor<B, 2> {
        x
    }

    fn rows_of(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        x
    }
}

/// GELU, tanh approximation, as the host path computes it.
fn gelu_tanh<B: Backend>(x: Tensor<B, 2>) -> Tensor<B, 2> {
    let cube = x.clone() * x.clone() * x.clone();
    let inner = (x.clone() + cube.mul_scalar(0.044_715)).mul_scalar(0.797_884_6_f32);
    x.mul_scalar(0.5) * inner.tanh().add_scalar(1.0)
}

/// Root-mean-square normalisation over the last dimension.
///
/// # Shapes
/// - x: `[rows, hidden]`, weight: `[hidden]`
/// - output: `[rows, hidden]`
pub fn rms_norm<B: Backend>(x: Tensor<B, 2>, weight: &Tensor<B, 1>, eps: f32) -> Tensor<B, 2> {
    let [_, hidden] = x.dims();
    let mean_square = (x.clone() * x.clone()).mean_dim(1);
    let inv_rms = mean_square.add_scalar(eps).sqrt().recip();
    x * inv_rms * weight.clone().reshape([1, hidden])
}
