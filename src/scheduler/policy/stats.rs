//! The scheduler's side of the metrics: gauges and the counts accumulated between steps.

use super::Scheduler;
use crate::scheduler::request::Request;
use crate::stats::data::SchedulerStats;

impl Scheduler {
    /// Counts a request's prefix-cache lookup once, at its first admission: a retry for lack
    /// of blocks or a readmission after a recompute preemption looks again but is not
    /// another query (the hit-rate panels would drift).
    pub(super) fn count_prefix_lookup(&mut self, request: &mut Request) {
        if request.cached_prompt_tokens.is_some() {
            return;
        }
        let cached = request.num_computed.min(request.prompt.len());
        request.cached_prompt_tokens = Some(cached);
        // A forked choice looked nothing up: its sibling's lookup counts for the body.
        if self.config.enable_prefix_caching && request.params.reads_prefix_cache() && !request.forked_prompt {
            self.prefix_queries += request.total_len() as u64;
            self.prefix_hits += request.num_computed as u64;
        }
    }

    /// Gauges now, without consuming the preemption count.
    pub fn make_stats_snapshot(&self) -> SchedulerStats {
        SchedulerStats {
            num_running: self.running.len(),
            num_waiting: self.waiting.len(),
            num_waiting_deferred: self.num_waiting_deferred(),
            num_swapped: self.swapped.len(),
            kv_cache_usage: self.blocks.usage(),
            cpu_cache_usage: self.blocks.cpu_usage(),
            tokens: self.token_load(),
            lora: self.lora_load(),
            ..SchedulerStats::default()
        }
    }

    /// Gauges now, and the preemptions and prefix-cache lookups since the last call.
    pub fn make_stats(&mut self) -> SchedulerStats {
        SchedulerStats {
            num_running: self.running.len(),
            num_waiting: self.waiting.len(),
            num_waiting_deferred: self.num_waiting_deferred(),
            num_swapped: self.swapped.len(),
            kv_cache_usage: self.blocks.usage(),
            cpu_cache_usage: self.blocks.cpu_usage(),
            prefix_cache_queries: std::mem::take(&mut self.prefix_queries),
            prefix_cache_hits: std::mem::take(&mut self.prefix_hits),
            num_preemptions: std::mem::take(&mut self.preemptions),
            kv_block_residency: self.blocks.take_residency(),
            tokens: self.token_load(),
            lora: self.lora_load(),
        }
    }
}
