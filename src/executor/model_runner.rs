//! The real executor: the burn model, its paged KV cache, and the sampler.

use crate::kernels::dispatch::{Activations, with_activations};
use rand::SeedableRng;
use rand::rngs::StdRng;

use super::Executor;
use super::grammar_states::GrammarStates;
use super::host_pool::HostKvPool;
use super::prompt_logprobs::{
    MAX_PROMPT_LOGPROB_ROWS, Pass, chunk_prompt_logprobs, logit_rows, prompt_logprob_passes, wants_prompt_logprobs,
};
use super::sampler::{SamplingContext, apply_token_mask, sample, token_rng};
use std::time::Instant;

use crate::engine::memory::{MemoryComponent, MemoryFootprint};
use crate::engine::step::{ExecutorError, KvTransfer, ModelOutput, ScheduledSequence, SchedulerOutput};
use crate::kv_cache::device_cache::{CacheGeometry, PagedKvCache};
use crate::model::Backend;
use crate::model::transformer::{Model, SequenceBatch};
use burn::tensor::DType;
use std::sync::Arc;

pub struct ModelRunner {
    model: Model<Backend>,
    cache: PagedKvCache<Backend>,
    host: HostKvPool,
    rng: StdRng,
    /// Logits at and past this id are padding rows of the embedding, with no token behind
    /// them: they are never sampled.
    sampleable_vocab: usize,
    /// Matchers of the constrained sequences (unconstrained ones have none and pay nothing).
    grammars: GrammarStates,
    /// Ids that end a choice, masked until a request's `min_tokens` are out.
    end_of_generation: Vec<u32>,
    /// The activations' precision of this runner's matmuls (`--cpu-activations`); `None`:
    /// the process's setting.
    activations: Option<Activations>,
    /// What the weights, the caches and the kernels' scratch hold, for `/metrics`.
    memory: Arc<MemoryFootprint>,
}

impl ModelRunner {
    /// `host_blocks`: size of the swap pool (0: no swapping); K and V stored as `dtype`.
    pub fn new(model: Model<Backend>, geometry: CacheGeometry, dtype: DType, host_blocks: usize) -> Self {
        let cache = PagedKvCache::new(geometry, dtype, &model.device);
        let memory = Arc::new(MemoryFootprint::default());
        memory.set(MemoryComponent::Weights, model.weight_bytes());
        memory.set(MemoryComponent::KvCache, cache.size_bytes());
        Self {
            model,
            cache,
            host: HostKvPool::new(host_blocks),
            memory,
            rng: StdRng::from_os_rng(),
            sampleable_vocab: usize::MAX,
            grammars: GrammarStates::default(),
            end_of_generation: Vec::new(),
            activations: None,
        }
    }

    /// The memory gauge's shared counts (the server registers it on `/metrics`).
    pub fn memory(&self) -> Arc<MemoryFootprint> {
        Arc::clone(&self.memory)
    }

    /// Runs this runner's matmuls with `mode`'s activations (tests compare modes in one
    /// process; the server also sets the process's mode).
    pub fn computing_activations_in(mut self, mode: Activations) -> Self {
        self.activations = Some(mode);
        self
    }

    /// Never samples ids at or past `token_id_bound` (the tokenizer's), where the model's
    /// vocabulary is padded beyond the tokenizer's.
    pub fn sampling_only_below(mut self, token_id_bound: usize) -> Self {
        self.sampleable_vocab = token_id_bound;
        self
    }

    /// The model's end-of-generation ids, which `min_tokens` keeps from being sampled early.
    pub fn ending_generation_on(mut self, ids: Vec<u32>) -> Self {
        self.end_of_generation = ids;
        self
    }

    /// Logits of every sampled sequence, row-major `[rows, vocab]` (for tests and parity).
    pub fn logits(&mut self, batch: &SchedulerOutput) -> Vec<f32> {
        self.swap(batch);
        self.forward(&batch.sequences)
    }

    /// Fork copies first (their sources may be reused by this very step), then swap-outs
    /// (their device blocks may be too).
    fn swap(&mut self, batch: &SchedulerOutput) -> (KvTransfer, KvTransfer) {
        self.cache.copy_blocks(&batch.copy_blocks);
        let timed = |copy: &mut dyn FnMut() -> u64| {
            let started = Instant::now();
            let bytes = copy();
            KvTransfer {
                bytes,
                seconds: started.elapsed().as_secs_f64(),
            }
        };
        let out = timed(&mut || self.host.swap_out(&self.cache, &batch.swap_out));
        let back = timed(&mut || self.host.swap_in(&mut self.cache, &batch.swap_in));
        if out.bytes > 0 || back.bytes > 0 {
            self.memory.set(MemoryComponent::HostSwapPool, self.host.size_bytes());
        }
        (out, back)
    }

    /// One forward pass over `sequences`: the logits rows each asks for, row-major.
    fn forward(&mut self, sequences: &[ScheduledSequence]) -> Vec<f32> {
        let seqs: Vec<SequenceBatch> = sequences
            .iter()
            .map(|s| SequenceBatch {
                token_ids: s.token_ids.clone(),
                start_position: s.start_position,
                block_table: s.block_table.clone(),
                wants_logits: s.sample,
                all_logits: wants_prompt_logprobs(s),
                lora: s.lora,
            })
            .collect();
        if !seqs.iter().any(|s| !s.token_ids.is_empty()) {
            return Vec::new();
        }
        let (model, cache) = (&self.model, &mut self.cache);
        // The whole forward pass runs on one of rayon's workers: its ~150 parallel kernels a
        // step then start and end inside the pool, instead of each parking this thread on a
        // latch and waking it again (two context switches a kernel).
        let logits = rayon::scope(|_| match self.activations {
            Some(mode) => with_activations(mode, || model.forward(&seqs, cache)),
            None => model.forward(&seqs, cache),
        });
        logits.into_data().into_vec::<f32>().unwrap_or_default()
    }
}

impl Executor for ModelRunner {
    fn execute(&mut self, batch: &SchedulerOutput) -> Result<ModelOutput, ExecutorError> {
        self.model.apply_lora_changes(&batch.lora_changes);
        let (swapped_out, swapped_in) = self.swap(batch);
        self.grammars.begin_step();
        let output = match prompt_logprob_passes(&batch.sequences, MAX_PROMPT_LOGPROB_ROWS) {
            None => self.run_pass(&batch.sequences),
            Some(passes) => self.run_passes(batch.sequences.len(), passes),
        };
        self.grammars.end_step();
        output.map(|output| ModelOutput {
            swapped_out,
            swapped_in,
            ..output
        })
    }

    fn reset(&mut self) {
        self.host.clear();
        self.memory.set(MemoryComponent::HostSwapPool, 0);
        self.grammars.clear();
        self.allocate_cache_here();
    }

    fn allocate_cache_here(&mut self) {
        let geometry = self.cache.geometry();
        // The old cache goes first (a layerless cache holds no tensors), so a restart never
        // needs the memory of two caches.
        let dtype = self.cache.dtype();
        self.cache = PagedKvCache::new(
            CacheGeometry {
                num_layers: 0,
                ..geometry
            },
            dtype,
            &self.model.device,
        );
        release_freed_memory();
        self.cache = PagedKvCache::new(geometry, dtype, &self.model.device);
    }
}

impl ModelRunner {
    /// One forward pass and what its rows come to: samples, prompt logprobs, grammar stats.
    fn run_pass(&mut self, sequences: &[ScheduledSequence]) -> Result<ModelOutput, ExecutorError> {
        let vocab = self.model.config.vocab_size;
        if let Some(id) = sequences
            .iter()
            .filter_map(|s| s.lora)
            .find(|&id| self.model.adapter(id).is_none())
        {
            return Err(ExecutorError::Failed(format!("no LoRA adapter with id {id} is loaded")));
        }
        let mut logits = self.forward(sequences);
        let wanted: usize = sequences.iter().map(logit_rows).sum();
        if logits.len() != wanted * vocab {
            return Err(ExecutorError::Failed(format!(
                "expected {wanted} rows of logits, got {} values",
                logits.len()
            )));
        }
        for row in logits.chunks_mut(vocab) {
            if let Some(padding) = row.get_mut(self.sampleable_vocab..) {
                padding.fill(f32::NEG_INFINITY);
            }
        }
        let mut rest = logits.as_mut_slice();
        let mut prompt_logprobs = Vec::new();
        let mut grammar_mask_seconds = Vec::new();
        let mut grammar_failures = Vec::new();
        let sampled = sequences
            .iter()
            .map(|s| {
                let (rows, after) = std::mem::take(&mut rest).split_at_mut(logit_rows(s) * vocab);
                rest = after;
                if wants_prompt_logprobs(s) {
                    prompt_logprobs.push((s.id.clone(), chunk_prompt_logprobs(rows, vocab, s)));
                }
                if !s.sample {
                    return None;
                }
                let last = rows.len() - vocab;
                let row = &mut rows[last..];
                if let Some(mask) = self.grammars.mask(s) {
                    apply_token_mask(row, mask.allowed.as_slice());
                    grammar_mask_seconds.push(mask.seconds);
                    if let Some(error) = mask.failure {
                        grammar_failures.push((s.id.clone(), error));
                    }
                }
                let ctx = SamplingContext {
                    params: &s.params,
                    output_token_ids: &s.output_token_ids,
                    prompt_token_ids: s.prompt_token_ids.as_deref().map(Vec::as_slice),
                    num_generated: s.num_generated,
                    end_of_generation: &self.end_of_generation,
                };
                let mut rng = token_rng(s.seed, s.num_generated, &mut self.rng);
                let token = sample(row, &ctx, &mut rng);
                self.grammars.advance(s, token.token);
                Some(token)
            })
            .collect();
        Ok(ModelOutput {
            sampled,
            grammar_mask_seconds,
            prompt_logprobs,
            grammar_failures,
            ..ModelOutput::default()
        })
    }

    /// A step split into passes (see [`prompt_logprob_passes`]): each sequence's sample comes
    /// from the pass that ran the end of its chunk.
    fn run_passes(&mut self, num_sequences: usize, passes: Vec<Pass>) -> Result<ModelOutput, ExecutorError> {
        let mut output = ModelOutput {
            sampled: vec![None; num_sequences],
            ..ModelOutput::default()
        };
        for pass in passes {
            let (indices, sequences): (Vec<usize>, Vec<ScheduledSequence>) = pass.into_iter().unzip();
            let ran = self.run_pass(&sequences)?;
            for ((index, seq), sampled) in indices.into_iter().zip(&sequences).zip(ran.sampled) {
                if seq.sample {
                    output.sampled[index] = sampled;
                }
            }
            output.grammar_mask_seconds.extend(ran.grammar_mask_seconds);
            output.prompt_logprobs.extend(ran.prompt_logprobs);
            output.grammar_failures.extend(ran.grammar_failures);
        }
        Ok(output)
    }
}

/// Hands the freed heap pages back to the kernel. glibc keeps a freed cache's pages resident
/// in the arena of the thread that allocated it, and an engine's pool thread allocates the
/// new one from another arena: without this, moving the cache onto the pool would keep both
/// resident (measured: 4.4 GB instead of 2.3 GB with `--kv-cache-memory 2GiB -dp 2`).
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}
