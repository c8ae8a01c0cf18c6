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
    /// QKᵀ and AV over every layer and query head, per (query token, context token) pair.
    attention_flops_per_pair: f64,
    /// Bytes of weights one step reads.
    weight_bytes: f64,
    kv_bytes_per_token: f64,
}

impl StepCostModel {
    /// `weight_bytes`: the weights as the executor holds them (the GGUF's size when it
    /// multiplies quantised blocks, 4 bytes a parameter when dequantised).
    pub fn new(cfg: &ModelConfig, weight_bytes: f64, kv_bytes_per_value: usize) -> Self {
        let h = cfg.hidden_size as f64;
        let per_layer = layer_parameters(cfg);
        Self {
            linear_flops_per_token: 2.0 * cfg.num_layers as f64 * per_layer,
            lm_head_flops_per_sample: 2.0 * h * cfg.vocab_size as f64,
            attention_flops_per_pair: 4.0 * (cfg.num_layers * cfg.num_heads * cfg.head_dim) as f64,
            weight_bytes,
            kv_bytes_per_token: cfg.kv_bytes_per_token(kv_bytes_per_value) as f64,
        }
    }

    /// Parameters of the decoder matrices plus the embedding (4 bytes each when dequantised).
    pub fn parameters(cfg: &ModelConfig) -> f64 {
        let h = cfg.hidden_size as f64;
        let per_layer = layer_parameters(cfg);
        cfg.num_layers as f64 * per_layer + h * cfg.vocab_size as f64
    }

    /// One sequence's part of a step: `new_tokens` run from position `start`, sampling or not.
    pub fn sequence(&self, new_tokens: usize, start: usize, sample: bool) -> StepCost {
        let (n, p) = (new_tokens as f64, start as f64);
        // Query token i (0-based) attends to the p + i + 1 tokens up to itself.
        let pairs = n * p + n * (n + 1.0) / 2.0;
        StepCost {
            flops: self.linear_flops_per_token * n
                + self.attention_flops_per_pair * pairs
                + if sample { self.lm_head_flops_per_sample } else { 0.0 },
            read_bytes: (p + n) * self.kv_bytes_per_token,
            write_bytes: n * self.kv_bytes_per_token,
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
        // KV: 2 (K and V) × 2 layers × 4 values × 4 bytes.
        assert_eq!(m.kv_bytes_per_token, 64.0);
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
    }
}
