//! The decoder layer, written once for every architecture and both ways of running it:
//! on burn tensors (`tensor_ops.rs`) or on host rows (`host_ops.rs`, for
//! projections on the packed CPU kernels). What an architecture changes is data on the
//! layer (biases, q/k norms, post-norms, window, RoPE, activation), never this code.

use burn::tensor::{Tensor, TensorData, backend::Backend};

use super::config::{Activation, ModelConfig};
use super::lora::{LoraRows, Target};
use super::projection::Projection;
use crate::kv_cache::backend_ops::KvCacheOps;
use crate::kv_cache::device_cache::PagedKvCache;

/// A vector weight (norm gain or bias), kept both as a tensor (the burn path) and in host
/// memory.
#[derive(Debug, Clone)]
pub struct NormWeight<B: Backend> {
    /// `[len]`
    pub tensor: Tensor<B, 1>,
    /// The same values, `[len]`.
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

/// The per-layer weights, and what the architecture says about this layer.
#[derive(Debug, Clone)]
pub struct DecoderLayer<B: Backend> {
    pub attn_norm: NormWeight<B>,
    /// Q, K and V projections fused: `hidden → (heads + 2 * kv_heads) * head_dim`.
    pub qkv: Projection<B>,
    /// `[(heads + 2 * kv_heads) * head_dim]`, added after `qkv` (Qwen2).
    pub qkv_bias: Option<NormWeight<B>>,
    /// Per-head RMSNorm gains of Q and K, `[head_dim]` each (Qwen3, Gemma 3).
    pub qk_norm: Option<(NormWeight<B>, NormWeight<B>)>,
    /// `heads * head_dim → hidden`
    pub attn_out: Projection<B>,
    /// RMSNorm of the attention output before the residual add (Gemma 3).
    pub post_attn_norm: Option<NormWeight<B>>,
    pub ffn_norm: NormWeight<B>,
    /// Gate and up projections fused: `hidden → 2 * intermediate`.
    pub gate_up: Projection<B>,
    /// `intermediate → hidden`
    pub down: Projection<B>,
    /// RMSNorm of the MLP output before the residual add (Gemma 3).
    pub post_ffn_norm: Option<NormWeight<B>>,
    /// Positions this layer attends over, itself included (`None`: the whole context).
    pub window: Option<usize>,
    /// Whether RoPE uses the model's local table (Gemma 3's windowed layers).
    pub local_rope: bool,
}

/// The arithmetic the layer needs, on one representation of `[tokens, width]` activations.
pub(super) trait LayerOps<B: KvCacheOps> {
    type Rows;
    /// RMSNorm of each row.
    fn norm(&self, x: &Self::Rows, weight: &NormWeight<B>) -> Self::Rows;
    /// RMSNorm of each `head_dim` slice of each row.
    fn head_norm(&self, x: Self::Rows, weight: &NormWeight<B>) -> Self::Rows;
    fn project(&self, projection: &Projection<B>, x: &Self::Rows) -> Self::Rows;
    /// `y + ` each adapter's `target` deltas of `layer` on its rows of `x`.
    fn add_lora(
        &self,
        y: Self::Rows,
        x: &Self::Rows,
        lora: &[LoraRows<'_>],
        layer: usize,
        target: Target,
    ) -> Self::Rows;
    /// `x + bias` on every row.
    fn add_bias(&self, x: Self::Rows, bias: &NormWeight<B>) -> Self::Rows;
    /// The fused rows split into `[.., q_dim]`, `[.., kv_dim]`, `[.., kv_dim]`.
    fn split_qkv(&self, qkv: Self::Rows, q_dim: usize, kv_dim: usize) -> (Self::Rows, Self::Rows, Self::Rows);
    /// RoPE on `heads` heads per row, with the global or the local table.
    fn rotate(&self, x: Self::Rows, heads: usize, local: bool) -> Self::Rows;
    fn scale(&self, x: Self::Rows, factor: f32) -> Self::Rows;
    /// `x + y`.
    fn add(&self, x: Self::Rows, y: Self::Rows) -> Self::Rows;
    /// `act(gate) * up` of `[tokens, 2 * ffn]` rows, gate columns first.
    fn gated(&self, gate_up: Self::Rows, ffn: usize, activation: Activation) -> Self::Rows;
    fn to_tensor(&self, x: Self::Rows, width: usize) -> Tensor<B, 2>;
    fn rows_of(&self, x: Tensor<B, 2>) -> Self::Rows;
}

/// Attention over the paged cache, as the step has laid it out.
pub(super) trait StepAttention<B: KvCacheOps> {
    /// Writes the new K/V rows into layer `index`'s cache and attends over it, through the
    /// last `window` positions when set.
    ///
    /// # Shapes
    /// - q: `[tokens, num_heads * head_dim]` (RoPE applied), k, v: `[tokens, kv_dim]`
    /// - output: `[tokens, num_heads * head_dim]`
    fn attention(
        &self,
        index: usize,
        window: Option<usize>,
        q: Tensor<B, 2>,
        k: Tensor<B, 2>,
        v: Tensor<B, 2>,
        cache: &mut PagedKvCache<B>,
    ) -> Tensor<B, 2>;
}

/// One decoder layer.
///
/// # Shapes
/// - x: `[tokens, hidden]`
/// - output: `[tokens, hidden]`
#[allow(clippy::too_many_arguments)]
pub(super) fn decoder_layer<B: KvCacheOps, O: LayerOps<B>>(
    c: &ModelConfig,
    ops: &O,
    step: &impl StepAttention<B>,
    index: usize,
    layer: &DecoderLayer<B>,
    lora: &[LoraRows<'_>],
    x: O::Rows,
    cache: &mut PagedKvCache<B>,
) -> O::Rows {
    let (q_dim, kv_dim) = (c.q_dim(), c.kv_dim());
    let project = |projection: &Projection<B>, x: &O::Rows, target: Target| {
        let y = ops.project(projection, x);
        if lora.is_empty() {
            y
        } else {
            ops.add_lora(y, x, lora, index, target)
        }
    };

    let h = ops.norm(&x, &layer.attn_norm);
    let mut qkv = project(&layer.qkv, &h, Target::Qkv);
    if let Some(bias) = &layer.qkv_bias {
        qkv = ops.add_bias(qkv, bias);
    }
    let (mut q, mut k, v) = ops.split_qkv(qkv, q_dim, kv_dim);
    if let Some((q_norm, k_norm)) = &layer.qk_norm {
        q = ops.head_norm(q, q_norm);
        k = ops.head_norm(k, k_norm);
    }
    q = ops.rotate(q, c.num_heads, layer.local_rope);
    k = ops.rotate(k, c.num_kv_heads, layer.local_rope);
    if c.features.query_scale != 1.0 {
        q = ops.scale(q, c.features.query_scale);
    }
    let attn = step.attention(
        index,
        layer.window,
        ops.to_tensor(q, q_dim),
        ops.to_tensor(k, kv_dim),
        ops.to_tensor(v, kv_dim),
        cache,
    );
    let mut out = project(&layer.attn_out, &ops.rows_of(attn), Target::AttnOut);
    if let Some(norm) = &layer.post_attn_norm {
        out = ops.norm(&out, norm);
    }
    let x = ops.add(x, out);

    let h = ops.norm(&x, &layer.ffn_norm);
    let gate_up = project(&layer.gate_up, &h, Target::GateUp);
    let mut out = project(
        &layer.down,
        &ops.gated(gate_up, c.intermediate_size, c.features.activation),
        Target::Down,
    );
    if let Some(norm) = &layer.post_ffn_norm {
        out = ops.norm(&out, norm);
    }
    ops.add(x, out)
}
