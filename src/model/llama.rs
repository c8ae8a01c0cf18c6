//! The Llama-family decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU) in burn,
//! running a flattened batch of sequences against the paged KV cache.

use std::cell::OnceCell;

use burn::tensor::{Int, Tensor, TensorData, activation::silu, backend::Backend};

use super::attention::causal_gqa;
use super::config::LlamaConfig;
use super::host_layer::NormWeight;
use super::projection::{Projection, to_host};
use super::rope::RotaryEmbedding;
use crate::kernels::attention::{HeadShape, SequenceSpan};
use crate::kv_cache::backend_ops::KvCacheOps;
use crate::kv_cache::device_cache::{PagedKvCache, SlotRun, context_slots, slot_runs};

/// One sequence's share of a forward pass.
#[derive(Debug, Clone)]
pub struct SequenceBatch {
    /// Tokens to run (a prompt chunk, or the last generated token).
    pub token_ids: Vec<u32>,
    /// Position of the first of `token_ids`; earlier positions are already cached.
    pub start_position: usize,
    /// Physical block ids covering positions `0 .. start_position + token_ids.len()`.
    pub block_table: Vec<u32>,
    /// Whether the logits of the last token are wanted (false for a non-final prompt chunk).
    pub wants_logits: bool,
    /// Whether the logits of every token are wanted (prompt logprobs); implies the last's.
    pub all_logits: bool,
}

/// The per-layer weights.
#[derive(Debug, Clone)]
pub struct DecoderLayer<B: Backend> {
    pub attn_norm: NormWeight<B>,
    /// Q, K and V projections fused: `hidden → (heads + 2 * kv_heads) * head_dim`.
    pub qkv: Projection<B>,
    /// `heads * head_dim → hidden`
    pub attn_out: Projection<B>,
    pub ffn_norm: NormWeight<B>,
    /// Gate and up projections fused: `hidden → 2 * intermediate`.
    pub gate_up: Projection<B>,
    /// `intermediate → hidden`
    pub down: Projection<B>,
}

/// A loaded Llama model.
#[derive(Debug, Clone)]
pub struct Llama<B: Backend> {
    pub config: LlamaConfig,
    /// `[vocab, hidden]`
    pub embed: Tensor<B, 2>,
    pub layers: Vec<DecoderLayer<B>>,
    pub final_norm: Tensor<B, 1>,
    /// `hidden → vocab` (the embedding when tied).
    pub lm_head: Projection<B>,
    pub rope: RotaryEmbedding<B>,
    pub device: B::Device,
}

/// Index data prepared once per step and shared by every layer.
pub(super) struct StepLayout<B: KvCacheOps> {
    pub(super) write_runs: Vec<SlotRun>,
    /// Per sequence: first row in the flattened batch, rows, and context slot ids.
    sequences: Vec<(usize, usize, Vec<i64>)>,
    /// The slot ids as device tensors, built on first use by backends without a paged
    /// attention kernel.
    slot_tensors: OnceCell<Vec<Tensor<B, 1, Int>>>,
}

impl<B: KvCacheOps> Llama<B> {
    /// Runs one step for a batch of sequences and returns the logits of the last token of
    /// each sequence that asked for them, in batch order.
    ///
    /// # Shapes
    /// - output: `[sequences wanting logits, vocab]`
    pub fn forward(&self, batch: &[SequenceBatch], cache: &mut PagedKvCache<B>) -> Tensor<B, 2> {
        let block_size = cache.geometry().block_size;
        let mut ids = Vec::new();
        let mut positions = Vec::new();
        let mut layout = StepLayout {
            write_runs: Vec::new(),
            sequences: Vec::with_capacity(batch.len()),
            slot_tensors: OnceCell::new(),
        };
        let mut logit_rows = Vec::new();
        for seq in batch {
            let row = ids.len();
            let len = seq.token_ids.len();
            let context = seq.start_position + len;
            ids.extend(seq.token_ids.iter().map(|&t| t as i64));
            positions.extend(seq.start_position..context);
            layout
                .write_runs
                .extend(slot_runs(&seq.block_table, block_size, seq.start_position, len, row));
            let slots = context_slots(&seq.block_table, block_size, context);
            layout.sequences.push((row, len, slots));
            if seq.all_logits {
                logit_rows.extend((row..row + len).map(|r| r as i64));
            } else if seq.wants_logits {
                logit_rows.push((row + len - 1) as i64);
            }
        }
        let tokens = ids.len();
        let mut x = self.embed.clone().select(0, self.int_tensor(ids));
        // The attention kernel's view of the layout, shared by every layer.
        let spans: Vec<SequenceSpan> = layout
            .sequences
            .iter()
            .map(|(row, len, slots)| SequenceSpan {
                first_row: *row,
                len: *len,
                slots,
            })
            .collect();
        if self.layers_on_host() {
            let mut rows = to_host(x);
            for (index, layer) in self.layers.iter().enumerate() {
                rows = self.layer_forward_host(index, layer, rows, &positions, &layout, &spans, cache);
            }
            x = Tensor::from_data(TensorData::new(rows, [tokens, self.config.hidden_size]), &self.device);
        } else {
            let positions = positions.iter().map(|&p| p as i64).collect();
            let (cos, sin) = self.rope.tables(self.int_tensor(positions));
            for (index, layer) in self.layers.iter().enumerate() {
                x = self.layer_forward(index, layer, x, &cos, &sin, &layout, &spans, cache);
            }
        }
        let last = x.select(0, self.int_tensor(logit_rows));
        let normed = rms_norm(last, &self.final_norm, self.config.rms_norm_eps);
        self.lm_head.forward(normed)
    }

    /// # Shapes
    /// - x: `[tokens, hidden]`, cos/sin: `[tokens, 1, head_dim / 2]`
    /// - output: `[tokens, hidden]`
    #[allow(clippy::too_many_arguments)]
    fn layer_forward(
        &self,
        index: usize,
        layer: &DecoderLayer<B>,
        x: Tensor<B, 2>,
        cos: &Tensor<B, 3>,
        sin: &Tensor<B, 3>,
        layout: &StepLayout<B>,
        spans: &[SequenceSpan],
        cache: &mut PagedKvCache<B>,
    ) -> Tensor<B, 2> {
        let c = &self.config;
        let [tokens, _] = x.dims();
        let q_dim = c.num_heads * c.head_dim;
        let kv_dim = c.kv_dim();

        let h = rms_norm(x.clone(), &layer.attn_norm.tensor, c.rms_norm_eps);
        let qkv = layer.qkv.forward(h);
        let q = qkv
            .clone()
            .narrow(1, 0, q_dim)
            .reshape([tokens, c.num_heads, c.head_dim]);
        let k = qkv
            .clone()
            .narrow(1, q_dim, kv_dim)
            .reshape([tokens, c.num_kv_heads, c.head_dim]);
        let v = qkv.narrow(1, q_dim + kv_dim, kv_dim);
        let q = RotaryEmbedding::apply(q, cos, sin);
        let k = RotaryEmbedding::apply(k, cos, sin).reshape([tokens, kv_dim]);
        cache.write(index, &layout.write_runs, k, v);

        let shape = HeadShape {
            num_heads: c.num_heads,
            num_kv_heads: c.num_kv_heads,
            head_dim: c.head_dim,
        };
        let attn = match cache.attention(index, q.clone().reshape([tokens, q_dim]), spans, shape) {
            Some(attn) => attn,
            None => self.gathered_attention(index, q, layout, cache),
        };
        let x = x + layer.attn_out.forward(attn);

        let h = rms_norm(x.clone(), &layer.ffn_norm.tensor, c.rms_norm_eps);
        x + self.feed_forward(layer, h)
    }

    /// SwiGLU: `down(silu(gate) * up)` (with packed weights the layers run on host rows and
    /// the activation is one fused pass there).
    ///
    /// # Shapes
    /// - h: `[tokens, hidden]`
    /// - output: `[tokens, hidden]`
    fn feed_forward(&self, layer: &DecoderLayer<B>, h: Tensor<B, 2>) -> Tensor<B, 2> {
        let ffn = self.config.intermediate_size;
        let gate_up = layer.gate_up.forward(h);
        let gate = gate_up.clone().narrow(1, 0, ffn);
        let up = gate_up.narrow(1, ffn, ffn);
        layer.down.forward(silu(gate) * up)
    }

    /// The portable attention: each sequence's context gathered into new tensors.
    ///
    /// # Shapes
    /// - q: `[tokens, num_heads, head_dim]`
    /// - output: `[tokens, num_heads * head_dim]`
    pub(super) fn gathered_attention(
        &self,
        index: usize,
        q: Tensor<B, 3>,
        layout: &StepLayout<B>,
        cache: &PagedKvCache<B>,
    ) -> Tensor<B, 2> {
        let slot_tensors = layout.slot_tensors.get_or_init(|| {
            layout
                .sequences
                .iter()
                .map(|(_, _, slots)| self.int_tensor(slots.clone()))
                .collect()
        });
        let outputs: Vec<Tensor<B, 2>> = layout
            .sequences
            .iter()
            .zip(slot_tensors)
            .map(|((row, len, _), slots)| {
                let (k_ctx, v_ctx) = cache.gather(index, slots.clone());
                causal_gqa(q.clone().narrow(0, *row, *len), k_ctx, v_ctx, self.config.num_kv_heads)
            })
            .collect();
        if outputs.len() == 1 {
            outputs.into_iter().next().expect("one output")
        } else {
            Tensor::cat(outputs, 0)
        }
    }

    fn int_tensor(&self, values: Vec<i64>) -> Tensor<B, 1, Int> {
        let n = values.len();
        Tensor::from_data(TensorData::new(values, [n]), &self.device)
    }
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
