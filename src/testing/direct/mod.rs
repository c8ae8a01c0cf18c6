//! Drives the engine without actors or HTTP, through the server's own step loop
//! ([`StepLoop`]): the executor runs on its own thread, as in the server, so with async
//! scheduling the next step is chosen while the executor runs the one before. Not a
//! double: the benchmarks (`examples/bench_engine.rs`, `bench_scheduler.rs`) measure the
//! real engine with it (they require the `testing` feature, as every benchmark does).

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Instant;

use crate::config::Config;
use crate::engine::step::{ExecutorError, ModelOutput, SchedulerOutput};
use crate::executor::Executor;
use crate::executor::step_runner::StepRunner;
use crate::scheduler::{Scheduler, StepFailure, StepLoop, StepResult};

/// What a direct run of the engine produced.
#[derive(Debug, Default)]
pub struct EngineRun {
    /// Each request's generated tokens.
    pub tokens: std::collections::HashMap<String, Vec<u32>>,
    pub preemptions: u64,
    /// The most requests swapped out at once.
    pub max_swapped: usize,
    pub prefix_cache_queries: u64,
    pub prefix_cache_hits: u64,
}

/// The scheduler's side of a direct run: the step loop, and the executor thread's channels.
pub struct DirectDriver<'a> {
    scheduler: &'a mut Scheduler,
    steps: StepLoop,
    /// Steps sent to the executor thread, oldest first (its answers come in this order).
    sent: VecDeque<Arc<SchedulerOutput>>,
    to_executor: Sender<Arc<SchedulerOutput>>,
    from_executor: Receiver<Result<ModelOutput, ExecutorError>>,
}

impl DirectDriver<'_> {
    pub fn scheduler(&mut self) -> &mut Scheduler {
        self.scheduler
    }

    /// Whether the engine has requests left.
    pub fn has_work(&self) -> bool {
        self.scheduler.has_work()
    }

    /// Steps sent to the executor and not applied yet (a step scheduled ahead can still
    /// be running when its requests have finished).
    pub fn in_flight(&self) -> usize {
        self.sent.len()
    }

    /// Sends the executor what the step loop says (with async scheduling, the step after
    /// the running one too), then waits for the oldest step in flight and applies it.
    /// `Ok(None)`: nothing was in flight. A failed step fails its requests, as in the
    /// server, and its error is returned.
    pub fn step(&mut self) -> Result<Option<StepResult>, ExecutorError> {
        for batch in self.steps.step(self.scheduler, Instant::now()) {
            self.sent.push_back(Arc::clone(&batch));
            self.to_executor
                .send(batch)
                .expect("the executor thread runs while the driver does");
        }
        let Some(batch) = self.sent.pop_front() else {
            return Ok(None);
        };
        let outcome = self
            .from_executor
            .recv()
            .expect("the executor thread answers every step");
        let error = outcome.as_ref().err().cloned();
        let returned = self.steps.returned(
            self.scheduler,
            &batch,
            outcome.map_err(StepFailure::Executor),
            Instant::now(),
        );
        match error {
            Some(error) => Err(error),
            None => Ok(Some(returned.result)),
        }
    }
}

/// Runs `body` with a driver over `scheduler`, `executor` running on its own thread until
/// `body` returns.
pub fn drive<E: Executor, R>(
    scheduler: &mut Scheduler,
    executor: &mut E,
    body: impl FnOnce(&mut DirectDriver<'_>) -> R,
) -> R {
    let (to_executor, executor_inbox) = channel::<Arc<SchedulerOutput>>();
    let (executor_outbox, from_executor) = channel();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let mut runner = StepRunner::default();
            let mut last_end: Option<Instant> = None;
            for batch in executor_inbox {
                let idle = last_end.map(|end| end.elapsed());
                let outcome = runner.run(executor, &batch, idle);
                last_end = Some(Instant::now());
                if executor_outbox.send(outcome).is_err() {
                    break;
                }
            }
        });
        let mut driver = DirectDriver {
            scheduler,
            steps: StepLoop::default(),
            sent: VecDeque::new(),
            to_executor,
            from_executor,
        };
        body(&mut driver)
        // The driver (and its sender) drops here: the executor thread ends.
    })
}

/// Drives a scheduler and an executor directly (no actors) until every request finished;
/// panics if the executor fails or the engine stops with requests it cannot schedule.
pub fn run_to_completion<E: Executor>(scheduler: &mut Scheduler, executor: &mut E) -> EngineRun {
    use crate::engine::events::TokenEvent;
    drive(scheduler, executor, |driver| {
        let mut run = EngineRun::default();
        // Steps still in flight are applied too, as the server applies them.
        while driver.has_work() || driver.in_flight() > 0 {
            let step = match driver.step() {
                Ok(Some(step)) => step,
                Ok(None) => panic!("requests are left but the scheduler chose no step"),
                Err(e) => panic!("executor failed: {e}"),
            };
            run.preemptions += step.scheduler_stats.num_preemptions;
            run.max_swapped = run.max_swapped.max(step.scheduler_stats.num_swapped);
            run.prefix_cache_queries += step.scheduler_stats.prefix_cache_queries;
            run.prefix_cache_hits += step.scheduler_stats.prefix_cache_hits;
            for (id, event) in step.events {
                if let TokenEvent::Token { id: token, .. } = event {
                    run.tokens.entry(id).or_default().push(token);
                }
            }
        }
        run
    })
}
/// A greedy (temperature 0) request for direct engine runs.
pub fn greedy_request(id: &str, prompt: Vec<u32>, max_tokens: u32, ignore_eos: bool) -> crate::scheduler::NewRequest {
    crate::scheduler::NewRequest {
        id: id.to_string(),
        prompt_token_ids: prompt,
        params: std::sync::Arc::new(crate::engine::sampling_params::SamplingParams {
            temperature: 0.0,
            max_tokens: Some(max_tokens),
            ignore_eos,
            ..Default::default()
        }),
        seed: None,
        operation: crate::engine::types::Operation::TextCompletion,
        arrival: std::time::Instant::now(),
        trace: None,
        lora: None,
    }
}

/// A scheduler and the real executor for the model at `path` (no actors), with a 256 MiB KV
/// cache and a 0.5 GiB swap pool unless `tweak` says otherwise.
pub fn direct_engine(
    path: &Path,
    tweak: impl FnOnce(&mut Config),
) -> anyhow::Result<(crate::scheduler::Scheduler, crate::executor::model_runner::ModelRunner)> {
    let mut config = Config::default();
    config.model.path = path.display().to_string();
    config.engine.kv_cache_memory = "256MiB".into();
    config.engine.swap_space_gib = 0.5;
    tweak(&mut config);
    let prepared = crate::server::prepare_model(&config, crate::model::loader::open_model(path)?)?;
    Ok((
        crate::scheduler::Scheduler::new(prepared.scheduler, prepared.end_of_generation),
        prepared.executor,
    ))
}

#[cfg(test)]
mod tests;
