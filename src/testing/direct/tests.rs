//! The direct driver runs the server's step loop: with async scheduling it sends steps
//! scheduled ahead (placeholders and all), and its output equals the plain loop's.

use super::*;
use crate::engine::step::StepStage;
use crate::executor::fake::{FakeBehaviour, FakeExecutor};
use crate::scheduler::{PreemptionMode, SchedulerConfig};

/// The fake model, counting the placeholders it is sent (steps scheduled ahead).
struct CountsPlaceholders {
    fake: FakeExecutor,
    placeholders: usize,
}

impl Executor for CountsPlaceholders {
    fn execute(&mut self, batch: &SchedulerOutput) -> Result<ModelOutput, ExecutorError> {
        self.fake.execute(batch)
    }

    fn reset(&mut self) {}

    fn checkpoint(&mut self, stage: StepStage, batch: &SchedulerOutput) {
        if stage == StepStage::BeforeExecute {
            self.placeholders += batch.sequences.iter().filter(|s| s.last_token_pending).count();
        }
    }
}

fn scheduler(async_scheduling: bool) -> Scheduler {
    let config = SchedulerConfig {
        max_num_seqs: 4,
        max_num_batched_tokens: 64,
        max_model_len: 256,
        max_waiting: 8,
        num_gpu_blocks: 64,
        block_size: 4,
        num_cpu_blocks: 0,
        preemption_mode: PreemptionMode::Recompute,
        enable_prefix_caching: false,
        prefix_hasher: Default::default(),
        async_scheduling,
        kv_block_metrics_sample: 0.0,
        step_cost: None,
        sharing: Default::default(),
        max_loras: 1,
    };
    let mut scheduler = Scheduler::new(config, vec![999]);
    for i in 0..3u32 {
        let prompt = vec![10 * i + 1, 10 * i + 2, 10 * i + 3];
        scheduler
            .add(greedy_request(&format!("r{i}"), prompt, 8 + i, true), Instant::now())
            .expect("admitted");
    }
    scheduler
}

#[test]
fn with_async_scheduling_the_driver_schedules_ahead_and_generates_the_same_tokens() {
    let mut runs = Vec::new();
    for async_scheduling in [false, true] {
        let mut executor = CountsPlaceholders {
            fake: FakeExecutor::new(1000, FakeBehaviour::default()),
            placeholders: 0,
        };
        let run = run_to_completion(&mut scheduler(async_scheduling), &mut executor);
        let ahead = executor.placeholders;
        assert_eq!(
            ahead > 0,
            async_scheduling,
            "placeholders sent: {ahead} (async {async_scheduling})"
        );
        for (id, tokens) in &run.tokens {
            let max_tokens = 8 + id[1..].parse::<usize>().expect("r<i>");
            assert_eq!(tokens.len(), max_tokens, "{id} (async {async_scheduling})");
        }
        runs.push(run.tokens);
    }
    assert_eq!(runs[0], runs[1], "async scheduling changes no token");
    assert_eq!(runs[0].len(), 3);
}
