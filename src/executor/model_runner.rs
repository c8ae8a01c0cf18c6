//! The real executor: the burn Llama, its paged KV cache, and the sampler.

use rand::SeedableRng;
use rand::rngs::StdRng;

use super::Executor;
use super::grammar_states::GrammarStates;
use super::host_pool::HostKvPool;
use super::sampler::{SamplingContext, apply_token_mask, sample, token_rng};
use crate::engine::step::{ExecutorError, ModelOutput, SchedulerOutput};
use crate::kv_cache::device_cache::{CacheGeometry, PagedKvCache};
use crate::model::Backend;
use crate::model::llama::{Llama, SequenceBatch};

pub struct ModelRunner {
    model: Llama<Backend>,
    cache: PagedKvCache<Backend>,
    host: HostKvPool,
    rng: StdRng,
    /// Logits at and past this id are padding rows of the embedding, with no token behind
    /// them: they are never sampled.
    sampleable_vocab: usize,
    /// Matchers of the constrained sequences (unconstrained ones have none and pay nothing).
    grammars: GrammarStates,
}

impl ModelRunner {
    /// `host_blocks`: size of the swap pool (0: no swapping).
    pub fn new(model: Llama<Backend>, geometry: CacheGeometry, host_blocks: usize) -> Self {
        let cache = PagedKvCache::new(geometry, &model.device);
        Self {
            model,
            cache,
            host: HostKvPool::new(host_blocks),
            rng: StdRng::from_os_rng(),
            sampleable_vocab: usize::MAX,
            grammars: GrammarStates::default(),
        }
    }

    /// Never samples ids at or past `token_id_bound` (the tokenizer's), where the model's
    /// vocabulary is padded beyond the tokenizer's.
    pub fn sampling_only_below(mut self, token_id_bound: usize) -> Self {
        self.sampleable_vocab = token_id_bound;
        self
    }

    /// Logits of every sampled sequence, row-major `[rows, vocab]` (for tests and parity).
    pub fn logits(&mut self, batch: &SchedulerOutput) -> Vec<f32> {
        // Swap-outs first: their device blocks may be reused by this very step.
        self.host.swap_out(&self.cache, &batch.swap_out);
        self.host.swap_in(&mut self.cache, &batch.swap_in);
        let seqs: Vec<SequenceBatch> = batch
            .sequences
            .iter()
            .map(|s| SequenceBatch {
                token_ids: s.token_ids.clone(),
                start_position: s.start_position,
                block_table: s.block_table.clone(),
                wants_logits: s.sample,
            })
            .collect();
        if !seqs.iter().any(|s| !s.token_ids.is_empty()) {
            return Vec::new();
        }
        let logits = self.model.forward(&seqs, &mut self.cache);
        logits.into_data().into_vec::<f32>().unwrap_or_default()
    }
}

impl Executor for ModelRunner {
    fn execute(&mut self, batch: &SchedulerOutput) -> Result<ModelOutput, ExecutorError> {
        let vocab = self.model.config.vocab_size;
        let mut logits = self.logits(batch);
        let wanted = batch.sequences.iter().filter(|s| s.sample).count();
        if logits.len() != wanted * vocab {
            return Err(ExecutorError::Failed(format!(
                "expected {wanted} rows of logits, got {} values",
                logits.len()
            )));
        }
        let mut rows = logits.chunks_mut(vocab);
        let mut grammar_mask_seconds = Vec::new();
        self.grammars.begin_step();
        let sampled = batch
            .sequences
            .iter()
            .map(|s| {
                if !s.sample {
                    return None;
                }
                let row = rows.next().expect("one row per sampled sequence");
                if let Some(padding) = row.get_mut(self.sampleable_vocab..) {
                    padding.fill(f32::NEG_INFINITY);
                }
                if let Some(mask) = self.grammars.mask(s) {
                    apply_token_mask(row, mask.allowed.as_slice());
                    grammar_mask_seconds.push(mask.seconds);
                }
                let ctx = SamplingContext {
                    params: &s.params,
                    output_token_ids: &s.output_token_ids,
                    prompt_token_ids: s.prompt_token_ids.as_deref().map(Vec::as_slice),
                };
                let mut rng = token_rng(s.seed, s.num_generated, &mut self.rng);
                let token = sample(row, &ctx, &mut rng);
                self.grammars.advance(s, token.token);
                Some(token)
            })
            .collect();
        self.grammars.end_step();
        Ok(ModelOutput {
            sampled,
            grammar_mask_seconds,
        })
    }

    fn reset(&mut self) {
        let geometry = self.cache.geometry();
        // The old cache goes first (a layerless cache holds no tensors), so a restart never
        // needs the memory of two caches.
        self.cache = PagedKvCache::new(
            CacheGeometry {
                num_layers: 0,
                ..geometry
            },
            &self.model.device,
        );
        self.host.clear();
        self.grammars.clear();
        self.cache = PagedKvCache::new(geometry, &self.model.device);
    }
}
