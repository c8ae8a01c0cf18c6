//! What the scheduler's tests share: a small config, greedy requests, and drivers that run
//! steps with the fake executor the way the actors would, without actors.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use super::{PreemptionMode, Scheduler, SchedulerConfig, StepResult};
use crate::engine::events::TokenEvent;
use crate::engine::sampling_params::SamplingParams;
use crate::engine::step::SchedulerOutput;
use crate::engine::types::{FinishReason, Operation};
use crate::executor::Executor;
use crate::executor::fake::{FakeBehaviour, FakeExecutor};
use crate::executor::previous_samples::PreviousSamples;
use crate::scheduler::request::NewRequest;
use crate::scheduler::step::time::{StepShape, StepTimeCoefficients};

pub(super) const EOS: u32 = 999;

pub(super) fn config(blocks: usize) -> SchedulerConfig {
    SchedulerConfig {
        max_num_seqs: 8,
        max_num_batched_tokens: 64,
        max_model_len: 512,
        max_waiting: 1000,
        num_gpu_blocks: blocks,
        block_size: 4,
        num_cpu_blocks: 0,
        preemption_mode: PreemptionMode::Recompute,
        enable_prefix_caching: false,
        prefix_hasher: Default::default(),
        async_scheduling: false,
        kv_block_metrics_sample: 0.0,
        step_cost: None,
        sharing: Default::default(),
        max_loras: 1,
    }
}

pub(super) fn request(id: &str, prompt_len: usize, max_tokens: u32) -> NewRequest {
    NewRequest {
        id: id.to_string(),
        // Token values well below EOS so the fake (last + 1) never emits EOS by accident.
        prompt_token_ids: (0..prompt_len as u32).map(|i| i % 100).collect(),
        params: Arc::new(SamplingParams {
            max_tokens: Some(max_tokens),
            temperature: 0.0,
            ..Default::default()
        }),
        seed: None,
        operation: Operation::TextCompletion,
        arrival: Instant::now(),
        trace: None,
        lora: None,
    }
}

/// Runs steps the way `SchedulerActor` does: with async scheduling the next step is
/// scheduled while the one before is in flight, and its placeholders are filled in the way
/// the executor thread fills them.
pub(super) struct Driver {
    pub(super) fake: FakeExecutor,
    pub(super) previous: PreviousSamples,
    pub(super) in_flight: VecDeque<Arc<SchedulerOutput>>,
    /// Steps scheduled ahead, and placeholders they carried.
    pub(super) ahead_steps: usize,
    pub(super) placeholders: usize,
    /// Predicts each step's time with these coefficients (and reports it as measured).
    pub(super) predict: Option<StepTimeCoefficients>,
    /// The last step's predicted seconds (0 without `predict`).
    pub(super) last_predicted: f64,
}

impl Driver {
    pub(super) fn new() -> Self {
        Self {
            fake: FakeExecutor::new(1000, FakeBehaviour::default()),
            previous: PreviousSamples::default(),
            in_flight: VecDeque::new(),
            ahead_steps: 0,
            placeholders: 0,
            predict: None,
            last_predicted: 0.0,
        }
    }

    /// Steps "take" the time these coefficients predict for them.
    pub(super) fn predicting(mut self, coefficients: StepTimeCoefficients) -> Self {
        self.predict = Some(coefficients);
        self
    }

    /// Sends what the actor would send, then runs the oldest step in flight and applies
    /// its output; `None` when nothing was in flight.
    pub(super) fn step(&mut self, s: &mut Scheduler, t: Instant) -> Option<StepResult> {
        if self.in_flight.is_empty() && s.has_work() {
            let batch = s.schedule(t);
            if !batch.is_empty() {
                self.in_flight.push_back(Arc::new(batch));
            }
        }
        if self.in_flight.len() == 1
            && s.config().async_scheduling
            && s.has_work()
            && let Some(batch) = s.schedule_ahead(t)
            && !batch.is_empty()
        {
            self.ahead_steps += 1;
            self.placeholders += batch.sequences.iter().filter(|s| s.last_token_pending).count();
            self.in_flight.push_back(Arc::new(batch));
        }
        let batch = self.in_flight.pop_front()?;
        let resolved = self.previous.resolve(&batch).expect("every placeholder has its token");
        let mut out = self.fake.execute(&resolved).expect("runs");
        self.previous.record(&resolved, &out);
        if let Some(coefficients) = self.predict {
            let mut shape = StepShape::default();
            for seq in &batch.sequences {
                shape.add(StepShape::chunk(seq.token_ids.len(), seq.start_position));
            }
            self.last_predicted = coefficients.predict(shape);
            out.step_seconds = self.last_predicted;
        }
        Some(s.update_from_output(&batch, out, t))
    }
}

/// Runs steps until idle; returns each request's events.
pub(super) fn run(s: &mut Scheduler, fake: &mut FakeExecutor) -> HashMap<String, Vec<TokenEvent>> {
    let mut events: HashMap<String, Vec<TokenEvent>> = HashMap::new();
    let mut steps = 0;
    while s.has_work() {
        steps += 1;
        assert!(steps < 100_000, "no progress");
        let batch = s.schedule(Instant::now());
        assert!(!batch.sequences.is_empty(), "work but nothing scheduled");
        let out = fake.execute(&batch).expect("fake runs");
        for (id, e) in s.update_from_output(&batch, out, Instant::now()).events {
            events.entry(id).or_default().push(e);
        }
    }
    events
}

pub(super) fn finish_reason(events: &[TokenEvent]) -> FinishReason {
    match events.last() {
        Some(TokenEvent::Finished { reason, .. }) => *reason,
        other => panic!("last event is not Finished: {other:?}"),
    }
}
