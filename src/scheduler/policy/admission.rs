//! Filling a step's budget: each running request's next chunk, swapped requests back in, and
//! waiting requests admitted, short prompts ahead of long ones when the long-prefill limit is
//! reached (see `step_budget`).

use std::time::Instant;

use super::Scheduler;
use super::StepBudget;
use crate::engine::step::SchedulerOutput;
use crate::engine::timeline::RequestEventKind;
use crate::scheduler::request::Request;
use crate::scheduler::step::time::StepShape;

impl Scheduler {
    /// A fresh budget for the next step, with room kept for the work that goes first.
    pub(super) fn new_budget(&self) -> StepBudget {
        let sharing = self.config.sharing;
        let slots = self.config.max_num_seqs.saturating_sub(self.running.len());
        // Streams: requests past their prompts, running, swapped or preempted to recompute.
        let decoding = self.swapped.len()
            + self
                .running
                .iter()
                .chain(&self.waiting)
                .filter(|r| r.num_generated_with_pending() > 0)
                .count();
        // Short requests on their way to a first token: prompts short as a whole (the tail of
        // a long prompt costs its whole context a token), not yet all scheduled.
        let short_requests = self
            .running
            .iter()
            .filter(|r| r.num_generated_with_pending() == 0 && self.num_to_schedule(r) > 0)
            .chain(
                self.waiting
                    .iter()
                    .take(slots)
                    .filter(|r| r.num_generated_with_pending() == 0 && !self.waits_for_sibling(r)),
            )
            .filter(|r| !sharing.is_long(r.prompt.len()))
            .count();
        let mut budget = StepBudget::new(
            sharing,
            self.step_time.coefficients(),
            self.config.max_num_batched_tokens,
        )
        .cold(self.step_time.is_cold())
        .alone(self.running.len() + self.waiting.len() + self.swapped.len() == 1)
        .nothing_decoding(decoding == 0)
        .short_burst(short_requests >= decoding);
        if !sharing.is_on() {
            return budget;
        }
        for request in &self.running {
            let start = request.num_scheduled();
            match self.num_to_schedule(request) {
                0 => {}
                1 => budget.reserve_decode(start),
                remaining if !sharing.is_long(start + remaining) => {
                    budget.reserve_prompt(StepShape::chunk(remaining, start))
                }
                _ => {}
            }
        }
        for request in self.waiting.iter().take(slots) {
            if self.waits_for_sibling(request) {
                continue;
            }
            if !sharing.is_long(request.total_len()) {
                let remaining = request.total_len() - request.num_computed;
                budget.reserve_prompt(StepShape::chunk(remaining, request.num_computed));
            }
        }
        budget
    }

    /// The step-time model's prediction for `batch`, in seconds (the per-step log).
    pub fn predicted_seconds(&self, batch: &SchedulerOutput) -> f64 {
        let shape = batch.sequences.iter().fold(StepShape::default(), |mut shape, seq| {
            shape.add(StepShape::chunk(seq.token_ids.len(), seq.start_position));
            shape
        });
        self.step_time.predict(shape)
    }

    /// Tokens of a running request in this step: its decode token, or a prefill chunk the
    /// budget allows (0: it waits this step).
    pub(super) fn running_chunk(&self, request: &Request, budget: &mut StepBudget) -> usize {
        let start = request.num_scheduled();
        match self.num_to_schedule(request) {
            0 => 0,
            1 => budget.take_decode(start),
            remaining => budget.take_prefill(remaining, start),
        }
    }

    /// Admits waiting requests in arrival order while the budget, the sequence limit and
    /// the cache allow (never by preempting). A long prompt is passed over, not waited for,
    /// while the long-prefill limit is reached, so short ones behind it start.
    pub(super) fn admit_waiting(&mut self, out: &mut SchedulerOutput, budget: &mut StepBudget, now: Instant) {
        // Long prompts with tokens not computed yet, in flight included: a prompt whose last
        // chunk runs now is still prefilling.
        let mut long_prefilling = self
            .running
            .iter()
            .filter(|r| r.num_computed < r.prompt.len() && budget.is_long(r.total_len()))
            .count();
        let mut index = 0;
        while budget.has_tokens() && self.running.len() < self.config.max_num_seqs && index < self.waiting.len() {
            if self.waits_for_sibling(&self.waiting[index]) || !self.lora_fits(self.waiting[index].lora) {
                index += 1;
                continue;
            }
            self.fork_from_running_sibling(index);
            let request = &mut self.waiting[index];
            if request.num_computed == 0 && self.config.enable_prefix_caching && request.params.reads_prefix_cache() {
                let tokens = request.tokens(0, request.total_len());
                request.num_computed = self
                    .blocks
                    .allocate_cached_prefix_under(&request.id, request.lora, &tokens);
            }
            let remaining = request.total_len() - request.num_computed;
            if !budget.may_admit(request.total_len(), long_prefilling) {
                // Give back any pinned prefix blocks; the lookup is repeated when it runs. A
                // forked prompt is kept: it cannot be looked up again.
                if !request.forked_prompt {
                    self.blocks.free(&request.id);
                    request.num_computed = 0;
                }
                index += 1;
                continue;
            }
            let num_new = budget.take_prefill(remaining, request.num_computed);
            if num_new == 0
                || self
                    .blocks
                    .allocate_slots(&request.id, request.num_computed + num_new)
                    .is_none()
            {
                // Give back any pinned prefix blocks; the lookup is repeated next step.
                if !request.forked_prompt {
                    self.blocks.free(&request.id);
                    request.num_computed = 0;
                }
                break;
            }
            long_prefilling += usize::from(budget.is_long(request.total_len()));
            let mut request = self.waiting.remove(index).expect("index is in range");
            self.count_prefix_lookup(&mut request);
            request.note_scheduled(now);
            out.sequences.push(Self::scheduled(&self.blocks, &mut request, num_new));
            self.running.push(request);
        }
    }

    /// Whether a request under `lora` may join the running ones: the base model always may;
    /// an adapter when one of them runs it already or fewer than `max_loras` adapters run.
    pub(super) fn lora_fits(&self, lora: Option<u32>) -> bool {
        let Some(id) = lora else {
            return true;
        };
        let mut running: Vec<u32> = self.running.iter().filter_map(|r| r.lora).collect();
        running.sort_unstable();
        running.dedup();
        running.contains(&id) || running.len() < self.config.max_loras
    }

    /// Brings swapped requests back while their blocks, one more token each, the budget and
    /// the sequence limit fit.
    pub(super) fn swap_in_swapped(&mut self, out: &mut SchedulerOutput, budget: &mut StepBudget, now: Instant) {
        while budget.has_tokens() && self.running.len() < self.config.max_num_seqs {
            let Some(request) = self.swapped.front() else {
                break;
            };
            if !self.lora_fits(request.lora) {
                break;
            }
            let wanted = request.total_len() - request.num_computed;
            let num_new = wanted.min(budget.tokens_left());
            let needed = self.blocks.blocks_for(request.num_computed + num_new);
            if !self.blocks.can_swap_in(&request.id) || self.blocks.num_free_blocks() < needed {
                break;
            }
            let Some(pairs) = self.blocks.swap_in(&request.id) else {
                break;
            };
            // Charged as its chunk or decode; the blocks for `num_new` tokens were checked.
            let start = request.num_computed;
            let charged = if wanted == 1 {
                budget.take_decode(start)
            } else {
                budget.take_prefill(wanted, start)
            };
            let num_new = charged.min(num_new).max(1);
            out.swap_in.extend(pairs);
            let mut request = self.swapped.pop_front().expect("front exists");
            request.note(RequestEventKind::SwappedIn, now);
            let target = request.num_computed + num_new;
            // Checked above: the free blocks cover the swapped table plus the new tokens.
            let grown = self.blocks.allocate_slots(&request.id, target);
            debug_assert!(grown.is_some(), "room for a swapped-in request was checked");
            out.sequences.push(Self::scheduled(&self.blocks, &mut request, num_new));
            self.running.push(request);
        }
    }
}
