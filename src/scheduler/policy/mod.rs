//! The scheduler's policy as a plain struct with synchronous methods: continuous batching,
//! FCFS admission, chunked prefill within the token budget, preemption by swap or recompute,
//! prefix caching.
//! Tests drive it directly; `SchedulerActor` is a thin shell around it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use super::request::{NewRequest, Request};
use crate::engine::events::{EngineError, TokenEvent};
use crate::engine::messages::AbortReason;
use crate::engine::step::{ModelOutput, PENDING_TOKEN, ScheduledSequence, SchedulerOutput};
use crate::engine::timeline::RequestEventKind;
use crate::engine::types::{FinishReason, RequestId};
use crate::kv_cache::block::hash::BlockHasher;
use crate::kv_cache::block::{BlockManager, BlockManagerConfig};
use crate::scheduler::step::budget::StepBudget;
pub use crate::scheduler::step::budget::StepSharing;
use crate::scheduler::step::time::{StepShape, StepTimeModel};
use crate::stats::data::{FinishedRequestStats, IterationStats, Observation, SchedulerStats};
use crate::stats::step_cost::StepCostModel;

/// Limits the scheduler enforces.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerConfig {
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
    pub max_model_len: usize,
    /// Requests allowed to wait; beyond it `add` refuses with `Overloaded`.
    pub max_waiting: usize,
    pub num_gpu_blocks: usize,
    pub block_size: usize,
    /// Host swap-pool blocks (0: swapping falls back to recompute).
    pub num_cpu_blocks: usize,
    pub preemption_mode: PreemptionMode,
    pub enable_prefix_caching: bool,
    /// How the prefix cache hashes full blocks.
    pub prefix_hasher: BlockHasher,
    /// Schedule each step while the one before runs ([`Scheduler::schedule_ahead`]).
    pub async_scheduling: bool,
    /// Fraction of KV-block allocations sampled for the residency histograms
    /// (`--kv-cache-metrics`); 0: off.
    pub kv_block_metrics_sample: f64,
    /// Estimate each step's FLOPs and bytes (`--enable-mfu-metrics`); `None`: off.
    pub step_cost: Option<StepCostModel>,
    /// The time budget and the partial-prefill limits (off by default).
    pub sharing: StepSharing,
    /// Distinct LoRA adapters one step may run (`--max-loras`); a request whose adapter
    /// finds no slot waits.
    pub max_loras: usize,
}

pub use crate::config::PreemptionMode;

/// Events for requests plus the step's stats.
#[derive(Debug, Default)]
pub struct StepResult {
    pub events: Vec<(RequestId, TokenEvent)>,
    pub scheduler_stats: SchedulerStats,
    pub iteration_stats: IterationStats,
}

/// Continuous-batching scheduler over a paged KV cache.
#[derive(Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    blocks: BlockManager,
    waiting: VecDeque<Request>,
    running: Vec<Request>,
    /// Preempted by swap, oldest first; their blocks sit in the host pool.
    swapped: VecDeque<Request>,
    /// Tokens that end generation unless `ignore_eos` (EOS and end-of-turn tokens).
    end_of_generation: Vec<u32>,
    /// Finished-request stats and preemptions not yet reported in a `StepResult`.
    pending: IterationStats,
    preemptions: u64,
    /// Prompt tokens looked up in / found in the prefix cache since the last stats, once per
    /// request (`count_prefix_lookup`).
    prefix_queries: u64,
    prefix_hits: u64,
    /// Predicts step times for the time budget; learns from the executor's measurements.
    step_time: StepTimeModel,
    /// Run-time adapter loads and unloads on their way to the executor.
    loras: lora::LoraChanges,
}

impl Scheduler {
    /// A `max_model_len` beyond what the cache holds for one sequence is cut to the cache: a
    /// longer sequence would preempt itself, could never be admitted again, and would hold
    /// up every request queued behind it. The server refuses such a config at start
    /// (`kv_cache::capacity`); this keeps the policy safe on its own.
    pub fn new(mut config: SchedulerConfig, end_of_generation: Vec<u32>) -> Self {
        let cache_tokens = config.num_gpu_blocks * config.block_size;
        if config.max_model_len > cache_tokens {
            tracing::warn!(
                max_model_len = config.max_model_len,
                cache_tokens,
                "max_model_len exceeds the KV cache; sequences end at the cache's size"
            );
            config.max_model_len = cache_tokens;
        }
        let blocks = Self::new_blocks(&config);
        let step_time = StepTimeModel::new(config.sharing.step_time_prior, config.sharing.learn_step_time);
        Self {
            config,
            blocks,
            waiting: VecDeque::new(),
            running: Vec::new(),
            swapped: VecDeque::new(),
            end_of_generation,
            pending: IterationStats::default(),
            preemptions: 0,
            prefix_queries: 0,
            prefix_hits: 0,
            step_time,
            loras: lora::LoraChanges::default(),
        }
    }

    /// The block pool `config` describes, residency sampling included.
    fn new_blocks(config: &SchedulerConfig) -> BlockManager {
        let mut blocks = BlockManager::with_config(BlockManagerConfig {
            num_gpu_blocks: config.num_gpu_blocks,
            num_cpu_blocks: config.num_cpu_blocks,
            block_size: config.block_size,
            enable_prefix_caching: config.enable_prefix_caching,
            prefix_hasher: config.prefix_hasher,
        });
        blocks.sample_residency(config.kv_block_metrics_sample);
        blocks
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Queues a request, or refuses it at the door. Only requests not yet admitted count
    /// against `max_waiting`: preempted ones waiting to run again are the cache's backlog,
    /// not the queue's, and must not turn new arrivals away.
    pub fn add(&mut self, request: NewRequest, now: Instant) -> Result<(), EngineError> {
        let queued = self.waiting.iter().filter(|r| !r.was_admitted()).count();
        if queued >= self.config.max_waiting {
            return Err(EngineError::Overloaded { waiting: queued });
        }
        // The prompt plus one generated token must fit the whole cache, or it never runs.
        let needed = self.blocks.blocks_for(request.prompt_token_ids.len() + 1);
        if needed > self.blocks.num_blocks() {
            return Err(EngineError::TooLong {
                needed,
                available: self.blocks.num_blocks(),
            });
        }
        if self.lora_gone(request.lora) {
            return Err(EngineError::AdapterUnloaded);
        }
        self.waiting.push_back(Request::new(request, now));
        Ok(())
    }

    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty() || !self.swapped.is_empty()
    }

    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Chooses the next batch: running requests first (decodes and prompt chunks), then
    /// swapped ones back in, then waiting ones in arrival order, while the token budget, the
    /// sequence limit and the cache allow. When blocks run out, the newest running request is
    /// preempted (swapped out, or recomputed later). Only for when no step is in flight
    /// (see [`Self::schedule_ahead`]).
    pub fn schedule(&mut self, now: Instant) -> SchedulerOutput {
        debug_assert!(
            self.running.iter().all(|r| r.in_flight.tokens() == 0),
            "schedule() with a step in flight; use schedule_ahead()"
        );
        let mut out = SchedulerOutput::default();
        let mut budget = self.new_budget();
        let mut preempted = false;
        let mut i = 0;
        while i < self.running.len() && budget.has_tokens() {
            let num_new = self.running_chunk(&self.running[i], &mut budget);
            if num_new == 0 {
                i += 1;
                continue;
            }
            let target = self.running[i].num_computed + num_new;
            let mut fits = true;
            while self.blocks.allocate_slots(&self.running[i].id, target).is_none() {
                if self.release_waiting_forks() {
                    continue;
                }
                let victim = self.running.len() - 1;
                self.preempt(victim, &mut out, now);
                preempted = true;
                if victim == i {
                    fits = false;
                    break;
                }
            }
            if !fits {
                break;
            }
            out.sequences
                .push(Self::scheduled(&self.blocks, &mut self.running[i], num_new));
            i += 1;
        }
        // Admitting work in a step that had to preempt would only thrash.
        if !preempted {
            self.swap_in_swapped(&mut out, &mut budget, now);
            // Swapped requests are older than waiting ones: they come back first (FCFS).
            if self.swapped.is_empty() {
                self.admit_waiting(&mut out, &mut budget, now);
            }
        }
        out.copy_blocks = self.blocks.take_copies();
        self.attach_lora_changes(&mut out);
        out
    }

    /// Chooses the step after the one the executor is running, while it runs (vLLM's async
    /// scheduling), so the executor starts it the moment the running step ends. A request
    /// whose running step samples a token gets a placeholder for that token
    /// ([`ScheduledSequence::last_token_pending`]); one whose pending token ends it by
    /// length is left out. If that token turns out to end it (EOS, a stop string), the
    /// look-ahead step's work for it is wasted and its output dropped. Returns `None` when
    /// the step would need a preemption or a swap-in: that step waits for the running one to
    /// come back and goes through [`Self::schedule`]. The invariants of steps in flight are
    /// written in `scheduler::in_flight`.
    pub fn schedule_ahead(&mut self, now: Instant) -> Option<SchedulerOutput> {
        if !self.swapped.is_empty() {
            return None;
        }
        // Plan the running requests first, without touching anything, to see if they fit.
        let mut budget = self.new_budget();
        let mut plan = Vec::new();
        let mut blocks_needed = 0;
        for (index, request) in self.running.iter().enumerate() {
            let num_new = self.running_chunk(request, &mut budget);
            if num_new == 0 {
                continue;
            }
            let have = self.blocks.block_table(&request.id).len();
            blocks_needed += self
                .blocks
                .blocks_for(request.num_scheduled() + num_new)
                .saturating_sub(have);
            plan.push((index, num_new));
        }
        if blocks_needed > self.blocks.num_free_blocks() {
            return None;
        }
        let mut out = SchedulerOutput::default();
        for (index, num_new) in plan {
            let request = &mut self.running[index];
            let grown = self
                .blocks
                .allocate_slots(&request.id, request.num_scheduled() + num_new);
            debug_assert!(grown.is_some(), "the plan's blocks were counted as free");
            out.sequences.push(Self::scheduled(&self.blocks, request, num_new));
        }
        self.admit_waiting(&mut out, &mut budget, now);
        out.copy_blocks = self.blocks.take_copies();
        self.attach_lora_changes(&mut out);
        Some(out)
    }

    /// Tokens a running request can run next: the rest of its prompt (or of a recompute),
    /// or its latest token, possibly one a step in flight has yet to sample. 0 when that
    /// pending token ends the request by length, or when everything is already in flight.
    pub(super) fn num_to_schedule(&self, request: &Request) -> usize {
        let pending_ends_it = request.in_flight.samples() > 0
            && (request.num_generated_with_pending() >= request.params.token_budget()
                || request.len_with_pending() >= self.config.max_model_len);
        if pending_ends_it {
            return 0;
        }
        request.len_with_pending() - request.num_scheduled()
    }

    /// Preempts a running request: swaps its blocks to the host pool when that mode is on
    /// and the pool has room, else frees them for a later recompute.
    fn preempt(&mut self, index: usize, out: &mut SchedulerOutput, now: Instant) {
        self.preemptions += 1;
        self.running[index].num_preemptions += 1;
        self.running[index].note(RequestEventKind::Preempted, now);
        if self.config.preemption_mode == PreemptionMode::Swap
            && let Some(pairs) = self.blocks.swap_out(&self.running[index].id)
        {
            out.swap_out.extend(pairs);
            let mut request = self.running.remove(index);
            let computed = request.tokens(0, request.num_computed);
            self.blocks.announce_swapped(&request.id, request.lora, &computed);
            request.note(RequestEventKind::SwappedOut, now);
            tracing::debug!(id = %request.id, "preempted (swap)");
            self.swapped.push_back(request);
            return;
        }
        self.preempt_by_recompute(index);
    }

    /// The next `num_new` tokens of `request` as a step's sequence, counted as in flight
    /// until [`Self::update_from_output`] sees them come back.
    pub(super) fn scheduled(blocks: &BlockManager, request: &mut Request, num_new: usize) -> ScheduledSequence {
        let start = request.num_scheduled();
        let end = start + num_new;
        let mut token_ids = request.tokens(start, num_new);
        // Past the known tokens lies the one the step in flight samples.
        let last_token_pending = end > request.total_len();
        if last_token_pending {
            debug_assert_eq!(end, request.total_len() + 1, "at most one step in flight");
            token_ids.push(PENDING_TOKEN);
        }
        let sample = end == request.len_with_pending();
        let params = &request.params;
        let sequence = ScheduledSequence {
            id: request.id.clone(),
            token_ids,
            last_token_pending,
            start_position: start,
            block_table: blocks.block_table(&request.id).to_vec(),
            sample,
            params: Arc::clone(params),
            seed: request.seed,
            num_generated: request.num_generated_with_pending(),
            output_token_ids: if params.uses_output_tokens() {
                request.output.clone()
            } else {
                Vec::new()
            },
            prompt_token_ids: params.uses_prompt_tokens().then(|| Arc::clone(&request.prompt)),
            lora: request.lora,
        };
        request.in_flight.send(num_new, sample);
        sequence
    }

    /// Frees a running request's blocks and puts it back at the head of the queue; its
    /// prompt and generated tokens are recomputed when it runs again.
    fn preempt_by_recompute(&mut self, index: usize) {
        let mut request = self.running.remove(index);
        debug_assert_eq!(
            request.in_flight.tokens(),
            0,
            "only requests with no step in flight are preempted"
        );
        self.blocks.free(&request.id);
        request.num_computed = 0;
        request.forked_prompt = false;
        tracing::debug!(id = %request.id, "preempted (recompute)");
        self.waiting.push_front(request);
    }

    /// Applies the executor's output for `batch`: advances every sequence, appends sampled
    /// tokens, finishes requests that hit a stop condition and frees their blocks.
    pub fn update_from_output(&mut self, batch: &SchedulerOutput, output: ModelOutput, now: Instant) -> StepResult {
        let mut result = StepResult::default();
        let mut iteration = std::mem::take(&mut self.pending);
        iteration.num_batched_tokens += batch.num_tokens() as u64;
        if let Some(model) = &self.config.step_cost {
            iteration.step_cost += model.per_step();
            for seq in &batch.sequences {
                iteration.step_cost += model.sequence(seq.token_ids.len(), seq.start_position, seq.sample);
            }
        }
        iteration.grammar_mask_seconds.extend(&output.grammar_mask_seconds);
        iteration.step_duration_s = Some(output.step_seconds);
        iteration.swapped_out = output.swapped_out;
        iteration.swapped_in = output.swapped_in;
        let shape = batch.sequences.iter().fold(StepShape::default(), |mut shape, seq| {
            shape.add(StepShape::chunk(seq.token_ids.len(), seq.start_position));
            shape
        });
        self.step_time.observe(shape, output.step_seconds);
        let by_lora = self.serves_loras();
        let step_seconds = output.step_seconds;
        let mut grammar_failures = output.grammar_failures;
        for (seq, sampled) in batch.sequences.iter().zip(output.sampled) {
            // A request aborted while its batch ran is already gone.
            let Some(index) = self.running.iter().position(|r| r.id == seq.id) else {
                continue;
            };
            let request = &mut self.running[index];
            let prompt_len = request.prompt.len();
            let start = request.num_computed;
            request.num_computed += seq.token_ids.len();
            request.in_flight.receive(seq.token_ids.len(), seq.sample);
            let prompt_computed = request.num_computed.min(prompt_len) - start.min(prompt_len);
            iteration.num_prefill_tokens_computed += prompt_computed as u64;
            if prompt_computed > 0 {
                request.note_prefill_chunk(now, step_seconds, start, prompt_computed);
            }
            // Only a step that fills a block gives the prefix cache something new to register
            // (blocks brought back by swap-in are re-registered at their next filled block).
            let bs = self.config.block_size;
            if self.config.enable_prefix_caching && request.num_computed / bs > start / bs {
                let tokens = request.tokens(0, request.num_computed);
                self.blocks
                    .cache_full_blocks_under(&request.id, request.lora, &tokens, request.num_computed);
            }
            if start < prompt_len && request.prompt_computed() {
                self.fork_into_waiting_siblings(index);
            }
            let request = &mut self.running[index];
            let Some(sampled) = sampled else { continue };
            // Every engine request counts its prompt once (METRICS.md, as vLLM counts each
            // choice). A choice that forked its prompt from a sibling computed only its last
            // token: the rest is counted as cached (`prompt_tokens_by_source`'s
            // local_cache_hit, the response's `cached_tokens`).
            if !request.prefill_counted {
                request.prefill_counted = true;
                iteration.num_prompt_tokens += prompt_len as u64;
                let cached = request.cached_prompt_tokens.unwrap_or(0).min(prompt_len);
                iteration.num_prompt_tokens_cached += cached as u64;
                iteration.prefill_kv_computed_tokens.push((prompt_len - cached) as u64);
                if by_lora {
                    iteration.lora.tokens_of(request.lora).prompt += prompt_len as u64;
                }
            }
            if let Some(at) = grammar_failures.iter().position(|(id, _)| *id == seq.id) {
                // The token was sampled under a broken mask: the request fails instead.
                let (_, message) = grammar_failures.swap_remove(at);
                let error = EngineError::Grammar(message);
                let (id, _, stats) = self.finish_running(index, FinishReason::Error, Some(error.error_type()), now);
                result.events.push((id, TokenEvent::Failed { error }));
                iteration.finished.push(stats);
                continue;
            }
            request.output.push(sampled.token);
            iteration.num_generation_tokens += 1;
            if by_lora {
                iteration.lora.tokens_of(request.lora).generation += 1;
            }
            let ts = &mut request.timestamps;
            let observed = |since| Observation::new(now.saturating_duration_since(since).as_secs_f64(), request.trace);
            match ts.last_token {
                None if by_lora => {
                    let ttft = observed(ts.arrival);
                    iteration.time_to_first_token_s.push(ttft);
                    iteration.lora.time_to_first_token_s.push((request.lora, ttft));
                }
                None => iteration.time_to_first_token_s.push(observed(ts.arrival)),
                Some(last) => iteration.inter_token_latency_s.push(observed(last)),
            }
            request.note_token(now);
            result.events.push((
                request.id.clone(),
                TokenEvent::Token {
                    id: sampled.token,
                    logprobs: sampled.logprobs,
                },
            ));
            if let Some(reason) = self.stop_reason(index, sampled.token) {
                let (id, event, stats) = self.finish_running(index, reason, None, now);
                result.events.push((id, event));
                iteration.finished.push(stats);
            }
        }
        result.iteration_stats = iteration;
        result.scheduler_stats = self.make_stats();
        result
    }

    fn stop_reason(&self, index: usize, token: u32) -> Option<FinishReason> {
        let request = &self.running[index];
        let params = &request.params;
        if (!params.ignore_eos && self.end_of_generation.contains(&token)) || params.stop_token_ids.contains(&token) {
            return Some(FinishReason::Stop);
        }
        if request.output.len() >= params.token_budget() || request.total_len() >= self.config.max_model_len {
            return Some(FinishReason::Length);
        }
        None
    }

    fn finish_running(
        &mut self,
        index: usize,
        reason: FinishReason,
        error_type: Option<&'static str>,
        now: Instant,
    ) -> (RequestId, TokenEvent, FinishedRequestStats) {
        let request = self.running.remove(index);
        self.blocks.free(&request.id);
        Self::finish(request, reason, error_type, now)
    }

    /// Ends a request wherever it is and frees its blocks. Returns its final event, or
    /// `None` when the id is unknown (already finished).
    pub fn abort(&mut self, id: &RequestId, reason: AbortReason, now: Instant) -> Option<TokenEvent> {
        let finish_reason = match reason {
            AbortReason::ClientGone => FinishReason::Abort,
            AbortReason::StopString => FinishReason::Stop,
        };
        let request = if let Some(i) = self.running.iter().position(|r| &r.id == id) {
            self.running.remove(i)
        } else if let Some(i) = self.swapped.iter().position(|r| &r.id == id) {
            self.blocks.free_swapped(id);
            self.swapped.remove(i)?
        } else {
            let i = self.waiting.iter().position(|r| &r.id == id)?;
            self.waiting.remove(i)?
        };
        self.blocks.free(&request.id);
        let mut request = request;
        if reason == AbortReason::ClientGone {
            request.note(RequestEventKind::Aborted, now);
        }
        let (_, event, stats) = Self::finish(request, finish_reason, None, now);
        self.pending.finished.push(stats);
        Some(event)
    }

    /// Fails every running request (the executor lost the batch and its cache state).
    pub fn fail_running(&mut self, error: &EngineError, now: Instant) -> StepResult {
        // The lost step may have carried the copies of waiting choices' forked prompts.
        self.release_waiting_forks();
        let mut result = StepResult::default();
        let mut iteration = std::mem::take(&mut self.pending);
        while !self.running.is_empty() {
            let (id, _, stats) = self.finish_running(0, FinishReason::Error, Some(error.error_type()), now);
            result.events.push((id, TokenEvent::Failed { error: error.clone() }));
            iteration.finished.push(stats);
        }
        result.iteration_stats = iteration;
        result.scheduler_stats = self.make_stats();
        result
    }

    /// The executor restarted with an empty cache and host pool: fails every request whose
    /// KV state lived there (running and swapped) and forgets every block, the prefix cache
    /// included, so no later lookup hits a wiped block. Waiting requests hold no blocks and
    /// stay queued (a preempted one is recomputed).
    pub fn reset_after_executor_restart(&mut self, error: &EngineError, now: Instant) -> StepResult {
        let mut failed = Vec::new();
        for request in std::mem::take(&mut self.swapped) {
            self.blocks.free_swapped(&request.id);
            let (id, _, stats) = Self::finish(request, FinishReason::Error, Some(error.error_type()), now);
            failed.push((id, stats));
        }
        let mut result = self.fail_running(error, now);
        for (id, stats) in failed {
            result.events.push((id, TokenEvent::Failed { error: error.clone() }));
            result.iteration_stats.finished.push(stats);
        }
        self.blocks.replace_after_restart(Self::new_blocks(&self.config));
        result
    }

    /// Empties the prefix cache (`POST /reset_prefix_cache`, `/flush_cache`); false, changing
    /// nothing, while a request holds blocks (running or swapped out), as vLLM refuses.
    pub fn reset_prefix_cache(&mut self) -> bool {
        self.blocks.reset_prefix_cache()
    }

    /// Blocks registered in the prefix cache (tests check a restart empties it).
    pub fn num_cached_blocks(&self) -> usize {
        self.blocks.num_cached_blocks()
    }

    /// Stats accumulated outside a step (aborts), with the current gauges.
    pub fn take_pending(&mut self) -> StepResult {
        StepResult {
            events: Vec::new(),
            iteration_stats: std::mem::take(&mut self.pending),
            scheduler_stats: self.make_stats(),
        }
    }

    /// Blocks held by requests (leak checks in tests).
    pub fn num_block_owners(&self) -> usize {
        self.blocks.num_owners()
    }
}

mod admission;
mod finish;
mod kv_events;
mod lora;
mod prompt_sharing;
mod stats;
#[cfg(test)]
mod test_driver;
#[cfg(test)]
mod tests;
mod token_load;
