//! Estimated cost of an engine step from its shapes (vLLM's `--enable-mfu-metrics`):
//! model FLOPs, and bytes read (weights once per step, the KV context of every sequence) and
//! written (the new tokens' KV). An estimate from shapes, not a measurement: kernels'
//! padding, caches and activations are not counted. kiln runs one engine per process, so
//! vLLM's "per GPU" is "per engine" here.

use crate::model::config::ModelConfig;

/// A step's estimated cost.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepCost {
    pub flops: f64,
    pub read_bytes: f64,
    pub write_bytes: f64,
}

impl std::ops::AddAssign for StepCost {
    fn add_assign(&mut self, other: Self) {
        self.flops += other.flops;
        self.read_bytes += other.read_bytes;
        self.write_bytes += other.write_bytes;
    }
}

/// Parameters of one decoder layer's matrices: Q, K, V, O and the gated MLP.
fn layer_parameters(cfg: &ModelConfig) -> f64 {
    let h = cfg.hidden_size as f64;
    let q_dim = (cfg.num_heads * cfg.head_dim) as f64;
    let kv_dim = cfg.kv_dim() as f64;
    h * q_dim + 2.0 * h * kv_dim + q_dim * h + 3.0 * h * cfg.intermediate_size as f64
}

/// The per-token and per-step constants of one model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepCostModel {
    /// 2 × the parameters of the decoder layers' matrices: FLOPs per token through them.
    linear_flops_per_token: f64,
    /// 2 × hidden × vocab: the LM head, run for sampled positions only.
    lm_head_flops_per_sample: f64,
    /// QKᵀ and AV over one layer's query heads, per (query token, context token) pair.
    attention_flops_per_layer_pair: f64,
    /// Layers that attend to the whole context.
    full_layers: f64,
    /// Layers that attend through a window (Mistral, Gemma 3, Phi-3), and its width.
    windowed_layers: f64,
    window: f64,
    /// Bytes of weights one step reads.
    weight_bytes: f64,
    /// One layer's K and V of one token.
    kv_bytes_per_layer_token: f64,
}

impl StepCostModel {
    /// `weight_bytes`: the weights as the executor holds them (the GGUF's size when it
    /// multiplies quantised blocks, 4 bytes a parameter when dequantised).
    pub fn new(cfg: &ModelConfig, weight_bytes: f64, kv_bytes_per_value: usize) -> Self {
        let h = cfg.hidden_size as f64;
        let per_layer = layer_parameters(cfg);
        let windows: Vec<Option<usize>> = (0..cfg.num_layers).map(|i| cfg.layer_window(i)).collect();
        let windowed_layers = windows.iter().filter(|w| w.is_some()).count();
        Self {
            linear_flops_per_token: 2.0 * cfg.num_layers as f64 * per_layer,
            lm_head_flops_per_sample: 2.0 * h * cfg.vocab_size as f64,
            attention_flops_per_layer_pair: 4.0 * (cfg.num_heads * cfg.head_dim) as f64,
            full_layers: (cfg.num_layers - windowed_layers) as f64,
            windowed_layers: windowed_layers as f64,
            window: windows.iter().flatten().next().map_or(0.0, |&w| w as f64),
            weight_bytes,
            kv_bytes_per_layer_token: (2 * cfg.kv_dim() * kv_bytes_per_value) as f64,
        }
    }

    /// Parameters of the decoder matrices, the embedding and an untied head (4 bytes each
    /// when dequantised).
    pub fn parameters(cfg: &ModelConfig) -> f64 {
        let h = cfg.hidden_size as f64;
        let per_layer = layer_parameters(cfg);
        let matrices = if cfg.tie_word_embeddings { 1.0 } else { 2.0 };
        cfg.num_layers as f64 * per_layer + matrices * h * cfg.vocab_size as f64
    }

    /// One sequence's part of a step: `new_tokens` run from position `start`, sampling or not.
    pub fn sequence(&self, new_tokens: usize, start: usize, sample: bool) -> StepCost {
        let (n, p) = (new_tokens as f64, start as f64);
        // Query token i (0-based) attends to the p + i + 1 tokens up to itself; through a
        // window of w, to min(p + i + 1, w) of them.
        let full_pairs = n * p + n * (n + 1.0) / 2.0;
        let windowed_pairs = if self.windowed_layers > 0.0 {
            // Tokens i < w - p see p + i + 1; the rest see w.
            let short = (self.window - p).clamp(0.0, n);
            short * p + short * (short + 1.0) / 2.0 + (n - short) * self.window
        } else {
            0.0
        };
        let layers = self.full_layers + self.windowed_layers;
        StepCost {
            flops: self.linear_flops_per_token * n
                + self.attention_flops_per_layer_pair
                    * (self.full_layers * full_pairs + self.windowed_layers * windowed_pairs)
                + if sample { self.lm_head_flops_per_sample } else { 0.0 },
            read_bytes: self.kv_bytes_per_layer_token
                * (self.full_layers * (p + n) + self.windowed_layers * (p + n).min(self.window)),
            write_bytes: layers * n * self.kv_bytes_per_layer_token,
        }
    }

    /// The weights, read once per step whatever the batch.
    pub fn per_step(&self) -> StepCost {
        StepCost {
            read_bytes: self.weight_bytes,
            ..StepCost::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> ModelConfig {
        ModelConfig::llama(100, 8, 16, 2, 2, 1, 4, 64)
    }

    #[test]
    fn flops_and_bytes_follow_the_shapes() {
        let m = StepCostModel::new(&tiny(), 1000.0, 4);
        // Per layer: q 8×8, k and v 8×4 each, o 8×8, MLP 3×8×16 = 64+64+64+384 = 576.
        assert_eq!(m.linear_flops_per_token, 2.0 * 2.0 * 576.0);
        // KV: 2 (K and V) × 4 values × 4 bytes per layer; 2 layers.
        assert_eq!(m.kv_bytes_per_layer_token, 32.0);
        // A 3-token prefill from 0: pairs 1 + 2 + 3.
        let prefill = m.sequence(3, 0, true);
        assert_eq!(prefill.flops, 3.0 * 2304.0 + 4.0 * 16.0 * 6.0 + 2.0 * 8.0 * 100.0);
        assert_eq!(prefill.read_bytes, 3.0 * 64.0);
        assert_eq!(prefill.write_bytes, 3.0 * 64.0);
        // One decode token at position 10 attends to 11 tokens.
        let decode = m.sequence(1, 10, true);
        assert_eq!(decode.flops, 2304.0 + 4.0 * 16.0 * 11.0 + 1600.0);
        assert_eq!(decode.read_bytes, 11.0 * 64.0);
        assert_eq!(m.per_step().read_bytes, 1000.0);
        assert_eq!(StepCostModel::parameters(&tiny()), 2.0 * 576.0 + 800.0);
        let untied = ModelConfig {
            tie_word_embeddings: false,
            ..tiny()
        };
        assert_eq!(StepCostModel::parameters(&untied), 2.0 * 576.0 + 1600.0);
    }

    #[test]
    fn windowed_layers_attend_to_at_most_the_window() {
        let mut cfg = tiny();
        cfg.features.sliding_window = Some(4);
        cfg.features.sliding_layers = vec![true, false];
        let m = StepCostModel::new(&cfg, 0.0, 4);
        // QKᵀ and AV over 2 heads of 4 dimensions, per layer.
        let per_pair = 4.0 * 8.0;
        // A 6-token prefill: the full layer sees 1+2+…+6 = 21 pairs, the windowed 1+2+3+4+4+4 = 18.
        let prefill = m.sequence(6, 0, false);
        assert_eq!(prefill.flops, 6.0 * 2304.0 + per_pair * (21.0 + 18.0));
        // Then one token at position 6: 7 pairs against 4; the windowed layer reads 4 tokens' KV.
        let decode = m.sequence(1, 6, false);
        assert_eq!(decode.flops, 2304.0 + per_pair * (7.0 + 4.0));
        assert_eq!(decode.read_bytes, 32.0 * (7.0 + 4.0));
        assert_eq!(decode.write_bytes, 64.0);
        // Chunked, the same tokens cost the same: 4 then 2.
        let chunks = m.sequence(4, 0, false).flops + m.sequence(2, 4, false).flops;
        assert_eq!(chunks, prefill.flops);
    }
}
