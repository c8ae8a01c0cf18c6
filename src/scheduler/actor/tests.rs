//! The actor with the real `ExecutorActor` and a fake model: async scheduling keeps a
//! second step queued behind the running one.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use actix::{Actor, Context, Handler, Recipient, ResponseFuture};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

use super::{GetLoad, SchedulerActor};
use crate::engine::events::{PromptLogprobs, TokenEvent};
use crate::engine::health::EngineHealth;
use crate::engine::messages::Generate;
use crate::engine::request::NewRequest;
use crate::engine::sampling_params::SamplingParams;
use crate::engine::step::{ExecuteBatch, ExecutorError, ModelOutput, SchedulerOutput};
use crate::engine::types::{FinishReason, Operation};
use crate::executor::actor::Supervision;
use crate::executor::fake::{FakeBehaviour, FakeExecutor};
use crate::executor::{Executor, start_executor};
use crate::scheduler::policy::{PreemptionMode, Scheduler, SchedulerConfig};
use crate::stats::actor::{StatsActor, StatsActorConfig};

/// How many steps the scheduler has sent so far.
#[derive(Default)]
struct SentSteps {
    count: Mutex<usize>,
    changed: Condvar,
}

/// Between the scheduler and the executor: counts every step the moment it is sent.
struct Tap {
    executor: Recipient<ExecuteBatch>,
    sent: Arc<SentSteps>,
}

impl Actor for Tap {
    type Context = Context<Self>;
}

impl Handler<ExecuteBatch> for Tap {
    type Result = ResponseFuture<Result<ModelOutput, ExecutorError>>;

    fn handle(&mut self, msg: ExecuteBatch, _: &mut Context<Self>) -> Self::Result {
        *self.sent.count.lock().expect("lock") += 1;
        self.sent.changed.notify_all();
        let reply = self.executor.send(msg);
        Box::pin(async move { reply.await.map_err(|e| ExecutorError::Failed(e.to_string()))? })
    }
}

/// The fake model, except that step k does not finish until step k + 1 has been sent (or
/// k is the last step): it only gets through a request if every step was scheduled while
/// the one before ran.
struct NeedsNextStepQueued {
    fake: FakeExecutor,
    sent: Arc<SentSteps>,
    last_step: usize,
}

impl Executor for NeedsNextStepQueued {
    fn execute(&mut self, batch: &SchedulerOutput) -> Result<ModelOutput, ExecutorError> {
        let output = self.fake.execute(batch)?;
        let step = self.fake.steps;
        if step < self.last_step {
            let count = self.sent.count.lock().expect("lock");
            // A deadline so a broken overlap fails the test instead of hanging it.
            let (count, _) = self
                .sent
                .changed
                .wait_timeout_while(count, Duration::from_secs(20), |sent| *sent <= step)
                .expect("lock");
            if *count <= step {
                return Err(ExecutorError::Failed(format!(
                    "step {} was not sent while step {step} ran",
                    step + 1
                )));
            }
        }
        Ok(output)
    }

    fn reset(&mut self) {}
}

#[actix::test]
async fn with_async_scheduling_each_step_is_queued_while_the_one_before_runs() {
    const MAX_TOKENS: usize = 12;
    let sent = Arc::new(SentSteps::default());
    let executor = start_executor(
        NeedsNextStepQueued {
            fake: FakeExecutor::new(1000, FakeBehaviour::default()),
            sent: Arc::clone(&sent),
            // The prompt's step samples the first token; one step per token after it.
            last_step: MAX_TOKENS,
        },
        Supervision {
            health: Arc::new(EngineHealth::new()),
            max_restarts: 0,
        },
    );
    let tap = Tap {
        executor: executor.recipient(),
        sent: Arc::clone(&sent),
    }
    .start();
    let stats = StatsActor::new(None, StatsActorConfig::default()).start();
    let scheduler = Scheduler::new(
        SchedulerConfig {
            max_num_seqs: 4,
            max_num_batched_tokens: 64,
            max_model_len: 256,
            max_waiting: 8,
            num_gpu_blocks: 32,
            block_size: 4,
            num_cpu_blocks: 0,
            preemption_mode: PreemptionMode::Recompute,
            enable_prefix_caching: false,
            prefix_hasher: Default::default(),
            async_scheduling: true,
            kv_block_metrics_sample: 0.0,
            step_cost: None,
            sharing: Default::default(),
            max_loras: 1,
        },
        vec![999],
    );
    let scheduler = SchedulerActor::new(scheduler, tap.recipient(), stats).start();
    let (events, mut received) = unbounded_channel();
    scheduler
        .send(Generate {
            request: NewRequest {
                id: "r".into(),
                prompt_token_ids: vec![5, 6, 7],
                params: Arc::new(SamplingParams {
                    max_tokens: Some(MAX_TOKENS as u32),
                    temperature: 0.0,
                    ..Default::default()
                }),
                seed: None,
                operation: Operation::TextCompletion,
                arrival: Instant::now(),
                trace: None,
                lora: None,
            },
            events,
        })
        .await
        .expect("delivered")
        .expect("admitted");
    let mut tokens = Vec::new();
    let reason = loop {
        match received.recv().await.expect("the request ends with an event") {
            TokenEvent::Token { id, .. } => tokens.push(id),
            TokenEvent::Finished { reason, .. } => break reason,
            TokenEvent::Failed { error } => panic!("failed after {tokens:?}: {error}"),
            TokenEvent::PromptLogprobs(_) => panic!("no prompt logprobs were asked"),
        }
    };
    assert_eq!(reason, FinishReason::Length);
    // The fake counts up from the last token it ran: right only if every placeholder was
    // filled with the token sampled in the step before.
    assert_eq!(tokens, (8..8 + MAX_TOKENS as u32).collect::<Vec<_>>());
    assert_eq!(*sent.count.lock().expect("lock"), MAX_TOKENS, "no step past max_tokens");
}

/// The fake model that also answers every prompt chunk with (empty) prompt logprobs, as the
/// real one does for a request that asked for them.
struct WithPromptLogprobs(FakeExecutor);

impl Executor for WithPromptLogprobs {
    fn execute(&mut self, batch: &SchedulerOutput) -> Result<ModelOutput, ExecutorError> {
        let mut output = self.0.execute(batch)?;
        output.prompt_logprobs = batch
            .sequences
            .iter()
            .map(|s| {
                let chunk = PromptLogprobs {
                    first_position: s.start_position,
                    positions: Vec::new(),
                };
                (s.id.clone(), chunk)
            })
            .collect();
        Ok(output)
    }

    fn reset(&mut self) {}
}

fn generate(id: &str, prompt_len: u32, events: UnboundedSender<TokenEvent>) -> Generate {
    Generate {
        request: NewRequest {
            id: id.into(),
            prompt_token_ids: (0..prompt_len).map(|i| i % 100).collect(),
            params: Arc::new(SamplingParams {
                max_tokens: Some(2),
                temperature: 0.0,
                ..Default::default()
            }),
            seed: None,
            operation: Operation::TextCompletion,
            arrival: Instant::now(),
            trace: None,
            lora: None,
        },
        events,
    }
}

/// A client that leaves while its request is on its way to the scheduler, or once its
/// prefill has begun (noticed at a prompt-logprob delivery), is aborted: neither 200-token
/// prompt is prefilled to its end (50 steps each at 4 tokens a step), and a request queued
/// behind them runs at once.
#[actix::test]
async fn a_client_gone_on_the_way_in_or_mid_prefill_does_not_keep_its_prefill_running() {
    let sent = Arc::new(SentSteps::default());
    let executor = start_executor(
        WithPromptLogprobs(FakeExecutor::new(1000, FakeBehaviour::default())),
        Supervision {
            health: Arc::new(EngineHealth::new()),
            max_restarts: 0,
        },
    );
    let tap = Tap {
        executor: executor.recipient(),
        sent: Arc::clone(&sent),
    }
    .start();
    let stats = StatsActor::new(None, StatsActorConfig::default()).start();
    let scheduler = Scheduler::new(
        SchedulerConfig {
            max_num_seqs: 4,
            max_num_batched_tokens: 4,
            max_model_len: 512,
            max_waiting: 8,
            num_gpu_blocks: 256,
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
        },
        vec![999],
    );
    let scheduler = SchedulerActor::new(scheduler, tap.recipient(), stats).start();
    let (events, received) = unbounded_channel();
    drop(received);
    scheduler
        .send(generate("gone-on-the-way", 200, events))
        .await
        .expect("delivered")
        .expect("not refused");
    let (events, mut received) = unbounded_channel();
    scheduler
        .send(generate("gone-mid-prefill", 200, events))
        .await
        .expect("delivered")
        .expect("admitted");
    let first = received.recv().await.expect("a prompt chunk's logprobs");
    assert!(matches!(first, TokenEvent::PromptLogprobs(_)), "{first:?}");
    drop(received);
    let (events, mut received) = unbounded_channel();
    scheduler
        .send(generate("stays", 3, events))
        .await
        .expect("delivered")
        .expect("admitted");
    loop {
        match received.recv().await.expect("the request ends with an event") {
            TokenEvent::Finished { reason, .. } => {
                assert_eq!(reason, FinishReason::Length);
                break;
            }
            TokenEvent::Failed { error } => panic!("{error}"),
            _ => {}
        }
    }
    let load = scheduler.send(GetLoad).await.expect("load");
    assert_eq!((load.num_running, load.num_waiting), (0, 0), "{load:?}");
    let steps = *sent.count.lock().expect("lock");
    assert!(steps <= 20, "{steps} steps: a departed client's prefill ran on");
}
