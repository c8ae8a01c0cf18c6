//! Load in tokens, as the Gateway API Inference Extension's model-server protocol asks:
//! routers weigh a replica by the tokens it must still compute, not by its request count.

use super::Scheduler;
use crate::scheduler::request::Request;
use crate::stats::data::TokenLoad;

impl Scheduler {
    /// The token load now; swapped requests count in neither queue (their KV is kept).
    pub fn token_load(&self) -> TokenLoad {
        let mut load = TokenLoad {
            capacity: (self.config.num_gpu_blocks * self.config.block_size) as u64,
            running: self.running.iter().map(|r| r.total_len() as u64).sum(),
            ..TokenLoad::default()
        };
        for request in &self.waiting {
            let to_compute = request.total_len().saturating_sub(request.num_computed);
            let cached = self.prefix_hit_if_admitted(request).min(to_compute);
            load.waiting += to_compute as u64;
            load.uncached_waiting += (to_compute - cached) as u64;
        }
        load
    }

    /// Tokens of `prompt` (under adapter `lora`) this engine's prefix cache holds now, in
    /// whole blocks: what a data-parallel server compares across its engines.
    pub fn cached_prefix_tokens(&self, prompt: &[u32], lora: Option<u32>) -> usize {
        if !self.config.enable_prefix_caching {
            return 0;
        }
        let block_size = self.config.block_size;
        let hashes = self.config.prefix_hasher.hash_all(prompt, block_size, lora);
        self.blocks.cached_prefix_blocks(&hashes) * block_size
    }

    /// The tokens a prefix lookup for `request` would reuse now, under the lookup's own rule
    /// (whole blocks of the prompt, at least one token left to compute).
    fn prefix_hit_if_admitted(&self, request: &Request) -> usize {
        if !self.config.enable_prefix_caching || !request.params.reads_prefix_cache() || request.num_computed > 0 {
            return 0;
        }
        let block_size = self.config.block_size;
        let hashes = request.prompt_block_hashes(block_size, &self.config.prefix_hasher);
        let max_blocks = (request.total_len().saturating_sub(1) / block_size).min(hashes.len());
        self.blocks.cached_prefix_blocks(&hashes[..max_blocks]) * block_size
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::super::test_driver::{EOS, config, request};
    use crate::executor::Executor;
    use crate::executor::fake::{FakeBehaviour, FakeExecutor};
    use crate::scheduler::{Scheduler, SchedulerConfig};
    use crate::stats::data::TokenLoad;

    fn run(s: &mut Scheduler) {
        let mut fake = FakeExecutor::new(1000, FakeBehaviour::default());
        while s.has_work() {
            let batch = s.schedule(Instant::now());
            let out = fake.execute(&batch).expect("fake runs");
            s.update_from_output(&batch, out, Instant::now());
        }
    }

    #[test]
    fn queued_prompts_are_waiting_tokens_and_the_running_batch_its_context() {
        let one_seq = SchedulerConfig {
            max_num_seqs: 1,
            ..config(64)
        };
        let mut s = Scheduler::new(one_seq, vec![EOS]);
        assert_eq!(
            s.token_load(),
            TokenLoad {
                capacity: 64 * 4,
                ..TokenLoad::default()
            }
        );
        for (id, len) in [("a", 10), ("b", 7), ("c", 5)] {
            s.add(request(id, len, 3), Instant::now()).expect("admitted");
        }
        let load = s.token_load();
        assert_eq!((load.waiting, load.uncached_waiting, load.running), (22, 22, 0));
        let mut fake = FakeExecutor::new(1000, FakeBehaviour::default());
        let batch = s.schedule(Instant::now());
        let out = fake.execute(&batch).expect("fake runs");
        let step = s.update_from_output(&batch, out, Instant::now());
        let load = step.scheduler_stats.tokens;
        assert_eq!(
            (load.waiting, load.running),
            (12, 11),
            "a ran its prompt and sampled one"
        );
        run(&mut s);
        assert_eq!(s.token_load().waiting + s.token_load().running, 0, "idle");
    }

    #[test]
    fn the_prefix_cache_covers_whole_blocks_of_a_waiting_prompt() {
        let caching = SchedulerConfig {
            enable_prefix_caching: true,
            prefix_hasher: Default::default(),
            max_num_seqs: 1,
            ..config(64)
        };
        let mut s = Scheduler::new(caching, vec![EOS]);
        s.add(request("warm", 10, 1), Instant::now()).expect("admitted");
        run(&mut s);
        // 10 tokens of 4-token blocks: 2 full blocks cached. Every prompt from the same
        // tokens reuses both (8 tokens) while it keeps one token to compute.
        s.add(request("longer", 30, 1), Instant::now()).expect("admitted");
        s.add(request("same", 10, 1), Instant::now()).expect("admitted");
        s.add(request("prefix", 9, 1), Instant::now()).expect("admitted");
        let mut other = request("other", 6, 1);
        other.prompt_token_ids.iter_mut().for_each(|t| *t += 300);
        s.add(other, Instant::now()).expect("admitted");
        let load = s.token_load();
        assert_eq!(load.waiting, 30 + 10 + 9 + 6);
        assert_eq!(load.uncached_waiting, 22 + 2 + 1 + 6);
    }
}
