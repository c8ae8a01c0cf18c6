//! A decoder-only transformer (any architecture under `arch/`) in burn, running a flattened
//! batch of sequences against the paged KV cache.

use std::cell::OnceCell;
use std::ops::Range;
use std::sync::Arc;

use burn::tensor::{Int, Tensor, TensorData, backend::Backend};

use super::attention::causal_gqa;
use super::config::ModelConfig;
use super::decoder::{DecoderLayer, NormWeight, StepAttention, decoder_layer};
use super::embedding::Embedding;
use super::host_ops::HostOps;
use super::lora::{LoraAdapter, LoraRows};
use super::projection::Projection;
use super::rope::RotaryEmbedding;
use super::tensor_ops::{TensorOps, rms_norm};
use crate::engine::step::LoraChange;
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
    /// The LoRA adapter the sequence runs under (its id in [`Model::adapters`]), or the base.
    pub lora: Option<u32>,
}

/// A loaded model.
#[derive(Debug, Clone)]
pub struct Model<B: Backend> {
    pub config: ModelConfig,
    /// `[vocab, hidden]`
    pub embed: Embedding<B>,
    pub layers: Vec<DecoderLayer<B>>,
    pub final_norm: NormWeight<B>,
    /// `hidden → vocab` (the embedding when tied).
    pub lm_head: Projection<B>,
    pub rope: RotaryEmbedding<B>,
    /// The windowed layers' table, when their RoPE base differs (Gemma 3).
    pub local_rope: Option<RotaryEmbedding<B>>,
    pub device: B::Device,
    /// The LoRA adapters requests may name (`--lora-modules`).
    pub adapters: Vec<Arc<LoraAdapter>>,
}

/// Which query rows attend over which context slots: `(sequence, first row, rows, slots)`.
type SpanPlan = Vec<(usize, usize, usize, Range<usize>)>;

/// Index data prepared once per step and shared by every layer.
struct Step<'a, B: KvCacheOps> {
    model: &'a Model<B>,
    write_runs: Vec<SlotRun>,
    /// Per sequence: context slot ids.
    slots: Vec<Vec<i64>>,
    /// Every query over its whole causal context.
    full: SpanPlan,
    /// Every query over the last `window` positions of its context (`None`: no window).
    windowed: Option<SpanPlan>,
    /// Slot ids of each span as device tensors, built on first use by backends without a
    /// paged attention kernel (full, windowed).
    slot_tensors: [OnceCell<Vec<Tensor<B, 1, Int>>>; 2],
}

impl<B: KvCacheOps> Model<B> {
    /// Runs one step for a batch of sequences and returns the logits of the last token of
    /// each sequence that asked for them, in batch order.
    ///
    /// # Shapes
    /// - output: `[sequences wanting logits, vocab]`
    pub fn forward(&self, batch: &[SequenceBatch], cache: &mut PagedKvCache<B>) -> Tensor<B, 2> {
        let block_size = cache.geometry().block_size;
        let mut ids = Vec::new();
        let mut positions = Vec::new();
        let mut step = Step {
            model: self,
            write_runs: Vec::new(),
            slots: Vec::with_capacity(batch.len()),
            full: Vec::with_capacity(batch.len()),
            windowed: None,
            slot_tensors: Default::default(),
        };
        let mut logit_rows = Vec::new();
        let mut lora: Vec<LoraRows> = Vec::new();
        for (s, seq) in batch.iter().enumerate() {
            let row = ids.len();
            let len = seq.token_ids.len();
            if let Some(id) = seq.lora {
                let adapter = self.adapter(id).expect("the runner checks a step's adapter ids");
                match lora.last_mut() {
                    Some(last) if last.adapter.id == id && last.rows.end == row => last.rows.end = row + len,
                    _ => lora.push(LoraRows {
                        adapter,
                        rows: row..row + len,
                    }),
                }
            }
            let context = seq.start_position + len;
            ids.extend(seq.token_ids.iter().map(|&t| t as i64));
            positions.extend(seq.start_position..context);
            step.write_runs
                .extend(slot_runs(&seq.block_table, block_size, seq.start_position, len, row));
            step.slots.push(context_slots(&seq.block_table, block_size, context));
            step.full.push((s, row, len, 0..context));
            if seq.all_logits {
                logit_rows.extend((row..row + len).map(|r| r as i64));
            } else if seq.wants_logits {
                logit_rows.push((row + len - 1) as i64);
            }
        }
        if let Some(window) = self.config.features.sliding_window {
            step.windowed = Some(windowed_plan(&step.full, window));
        }
        let tokens = ids.len();
        let scale = self.config.features.embedding_scale;
        let x = if self.layers_on_host() {
            let ops = HostOps::new(&self.config, [&self.rope, self.local_rope()], &self.device, &positions);
            let mut rows = self.embed.host_rows(&ids, &self.device);
            if scale != 1.0 {
                rows.iter_mut().for_each(|v| *v *= scale);
            }
            for (index, layer) in self.layers.iter().enumerate() {
                rows = decoder_layer(&self.config, &ops, &step, index, layer, &lora, rows, cache);
            }
            Tensor::from_data(TensorData::new(rows, [tokens, self.config.hidden_size]), &self.device)
        } else {
            let mut x = self.embed.rows(&ids, &self.device);
            if scale != 1.0 {
                x = x.mul_scalar(scale);
            }
            let positions = self.int_tensor(positions.iter().map(|&p| p as i64).collect());
            let ops = TensorOps::new(&self.config, [&self.rope, self.local_rope()], positions);
            for (index, layer) in self.layers.iter().enumerate() {
                x = decoder_layer(&self.config, &ops, &step, index, layer, &lora, x, cache);
            }
            x
        };
        let last = x.select(0, self.int_tensor(logit_rows));
        let normed = rms_norm(last, &self.final_norm.tensor, self.config.rms_norm_eps);
        self.lm_head.forward(normed)
    }

    /// Whether the layers run on host rows: any projection on the packed CPU kernels means
    /// the model is on the CPU, where activations already make a round trip through host
    /// memory for every projection.
    pub fn layers_on_host(&self) -> bool {
        self.lm_head.packed().is_some()
            || self.layers.iter().any(|l| {
                [&l.qkv, &l.attn_out, &l.gate_up, &l.down]
                    .iter()
                    .any(|p| p.packed().is_some())
            })
    }

    /// Installs and drops run-time adapters, in the order the scheduler sent them.
    pub fn apply_lora_changes(&mut self, changes: &[LoraChange]) {
        for change in changes {
            match change {
                LoraChange::Install(adapter) => {
                    self.adapters.retain(|a| a.id != adapter.id);
                    self.adapters.push(Arc::clone(adapter));
                }
                LoraChange::Remove(id) => self.adapters.retain(|a| a.id != *id),
            }
        }
    }

    /// Bytes the base model's weights hold: the embedding (unless the head shares it), every projection as stored
    /// (packed or f32) and the norms (a tensor and a host copy each). Adapters not included.
    pub fn weight_bytes(&self) -> u64 {
        let f32s = |n: usize| (n * size_of::<f32>()) as u64;
        let norm = |w: &NormWeight<B>| f32s(w.tensor.shape().num_elements() + w.host.len());
        let layers: u64 = self
            .layers
            .iter()
            .map(|l| {
                let projections: usize = [&l.qkv, &l.attn_out, &l.gate_up, &l.down]
                    .iter()
                    .map(|p| p.size_bytes())
                    .sum();
                let norms = [Some(&l.attn_norm), Some(&l.ffn_norm), l.qkv_bias.as_ref()]
                    .into_iter()
                    .chain([l.post_attn_norm.as_ref(), l.post_ffn_norm.as_ref()])
                    .chain(l.qk_norm.iter().flat_map(|(q, k)| [Some(q), Some(k)]))
                    .flatten()
                    .map(norm)
                    .sum::<u64>();
                projections as u64 + norms
            })
            .sum();
        let head = match &self.lm_head {
            Projection::Packed(matrix) => Some(matrix),
            Projection::Dense(_) => None,
        };
        self.embed.size_bytes_beside(head) + self.lm_head.size_bytes() as u64 + norm(&self.final_norm) + layers
    }

    /// The adapter with request id `id`.
    pub fn adapter(&self, id: u32) -> Option<&LoraAdapter> {
        self.adapters.iter().find(|a| a.id == id).map(|a| a.as_ref())
    }

    /// The windowed layers' RoPE table: their own, else the global one.
    fn local_rope(&self) -> &RotaryEmbedding<B> {
        self.local_rope.as_ref().unwrap_or(&self.rope)
    }

    fn int_tensor(&self, values: Vec<i64>) -> Tensor<B, 1, Int> {
        let n = values.len();
        Tensor::from_data(TensorData::new(values, [n]), &self.device)
    }
}

/// The plan with each query limited to the last `window` positions: sequences whose context
/// fits the window keep their span; the others get one span per query (masking by slots).
fn windowed_plan(full: &SpanPlan, window: usize) -> SpanPlan {
    let mut plan = Vec::with_capacity(full.len());
    for (s, row, len, slots) in full.iter().cloned() {
        let context = slots.end;
        if context <= window {
            plan.push((s, row, len, slots));
            continue;
        }
        for i in 0..len {
            let visible = context - len + i + 1;
            plan.push((s, row + i, 1, visible.saturating_sub(window)..visible));
        }
    }
    plan
}

impl<B: KvCacheOps> Step<'_, B> {
    /// Whether plan entry `(s, _, _, positions)` reads only positions this step computes
    /// (a prompt's first chunk, or a window inside it), and so can read them from the
    /// step's own K/V rows instead of the cache.
    fn reads_only_new_rows(&self, s: usize, positions: &Range<usize>) -> bool {
        let (_, _, len, context) = &self.full[s];
        positions.start >= context.end - len
    }

    /// The step rows holding `positions` of sequence `s`, in the order the cache slots would.
    fn new_rows(&self, s: usize, positions: &Range<usize>) -> Vec<i64> {
        let (_, first_row, len, context) = &self.full[s];
        let first_new = context.end - len;
        positions.clone().map(|p| (first_row + p - first_new) as i64).collect()
    }
}

impl<B: KvCacheOps> StepAttention<B> for Step<'_, B> {
    fn attention(
        &self,
        index: usize,
        window: Option<usize>,
        q: Tensor<B, 2>,
        k: Tensor<B, 2>,
        v: Tensor<B, 2>,
        cache: &mut PagedKvCache<B>,
    ) -> Tensor<B, 2> {
        let c = &self.model.config;
        // A cache narrower than f32 rounds what it stores. Positions computed in this step are
        // read from the step's own rows instead, as they were computed (as vLLM's prefill
        // attends over the fresh K/V): a prompt's first chunk, and so its first-step logits,
        // then match an f32 cache exactly; only later steps read rounded values.
        let unrounded = (cache.dtype() != burn::tensor::DType::F32).then(|| (k.clone(), v.clone()));
        cache.write(index, &self.write_runs, k, v);
        let (set, plan) = match (window, &self.windowed) {
            (Some(_), Some(windowed)) => (1, windowed),
            _ => (0, &self.full),
        };
        let from_step: Vec<bool> = plan
            .iter()
            .map(|(s, _, _, positions)| unrounded.is_some() && self.reads_only_new_rows(*s, positions))
            .collect();
        let step_rows: Vec<Vec<i64>> = plan
            .iter()
            .zip(&from_step)
            .map(|((s, _, _, positions), &fresh)| {
                if fresh {
                    self.new_rows(*s, positions)
                } else {
                    Vec::new()
                }
            })
            .collect();
        let spans: Vec<SequenceSpan> = plan
            .iter()
            .zip(&step_rows)
            .zip(&from_step)
            .map(|(((s, row, len, positions), rows), &fresh)| SequenceSpan {
                first_row: *row,
                len: *len,
                slots: if fresh {
                    rows
                } else {
                    &self.slots[*s][positions.clone()]
                },
            })
            .collect();
        let shape = HeadShape {
            num_heads: c.num_heads,
            num_kv_heads: c.num_kv_heads,
            head_dim: c.head_dim,
        };
        if let Some(attn) = self.kernel_attention(index, &q, &spans, &from_step, unrounded.as_ref(), cache, shape) {
            return attn;
        }
        // The portable path: each span's context gathered into new tensors.
        let [tokens, _] = q.dims();
        let q = q.reshape([tokens, c.num_heads, c.head_dim]);
        let slot_tensors = self.slot_tensors[set]
            .get_or_init(|| spans.iter().map(|s| self.model.int_tensor(s.slots.to_vec())).collect());
        let outputs: Vec<Tensor<B, 2>> = spans
            .iter()
            .zip(slot_tensors)
            .zip(&from_step)
            .map(|((span, slots), &fresh)| {
                let (k_ctx, v_ctx) = match (&unrounded, fresh) {
                    (Some((k, v)), true) => (k.clone().select(0, slots.clone()), v.clone().select(0, slots.clone())),
                    _ => cache.gather(index, slots.clone()),
                };
                causal_gqa(
                    q.clone().narrow(0, span.first_row, span.len),
                    k_ctx,
                    v_ctx,
                    c.num_kv_heads,
                )
            })
            .collect();
        if outputs.len() == 1 {
            outputs.into_iter().next().expect("one output")
        } else {
            Tensor::cat(outputs, 0)
        }
    }
}

impl<B: KvCacheOps> Step<'_, B> {
    /// Attention through the backend's paged kernel: the spans that read the cache over the
    /// cache, those that read only this step's rows over those rows; `None` where the backend
    /// has no such kernel.
    #[allow(clippy::too_many_arguments)]
    fn kernel_attention(
        &self,
        index: usize,
        q: &Tensor<B, 2>,
        spans: &[SequenceSpan],
        from_step: &[bool],
        unrounded: Option<&(Tensor<B, 2>, Tensor<B, 2>)>,
        cache: &PagedKvCache<B>,
        shape: HeadShape,
    ) -> Option<Tensor<B, 2>> {
        let Some((k, v)) = unrounded.filter(|_| from_step.iter().any(|&f| f)) else {
            return cache.attention(index, q.clone(), spans, shape);
        };
        let pick = |fresh: bool| -> Vec<SequenceSpan> {
            spans
                .iter()
                .zip(from_step)
                .filter(|(_, f)| **f == fresh)
                .map(|(span, _)| span.clone())
                .collect()
        };
        // Each call leaves the rows of the other's spans zero, so the sum is the whole.
        let fresh_spans = pick(true);
        let fresh = match B::paged_attention(q.clone(), k, v, &fresh_spans, shape) {
            Some(fresh) => fresh,
            // The kernel reads whole buffers; the rows may be a view into a fused projection.
            None => {
                let whole = |t: &Tensor<B, 2>| Tensor::from_data(t.clone().into_data(), &t.device());
                B::paged_attention(q.clone(), &whole(k), &whole(v), &fresh_spans, shape)?
            }
        };
        let cached = pick(false);
        if cached.is_empty() {
            return Some(fresh);
        }
        Some(fresh + cache.attention(index, q.clone(), &cached, shape)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_splits_long_spans_into_queries_over_their_last_positions() {
        // Sequence 0: 3 new tokens at the end of a 6-token context; sequence 1 fits.
        let full: SpanPlan = vec![(0, 0, 3, 0..6), (1, 3, 2, 0..2)];
        let plan = windowed_plan(&full, 4);
        assert_eq!(
            plan,
            vec![(0, 0, 1, 0..4), (0, 1, 1, 1..5), (0, 2, 1, 2..6), (1, 3, 2, 0..2)]
        );
    }
}
