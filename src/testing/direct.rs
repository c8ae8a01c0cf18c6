//! Drives the engine without actors or HTTP: a scheduler and an executor stepped in a loop.
//! Not a double: the benchmarks (`examples/bench_engine.rs`, `bench_scheduler.rs`) measure
//! the real engine with it (they require the `testing` feature, as every benchmark does).

use std::path::Path;

use crate::config::Config;
use crate::executor::Executor;

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

/// Drives a scheduler and an executor directly (no actors) until every request finished.
pub fn run_to_completion(scheduler: &mut crate::scheduler::Scheduler, executor: &mut impl Executor) -> EngineRun {
    use crate::engine::events::TokenEvent;
    let mut run = EngineRun::default();
    while scheduler.has_work() {
        let batch = scheduler.schedule(std::time::Instant::now());
        let output = match executor.execute(&batch) {
            Ok(output) => output,
            Err(e) => panic!("executor failed: {e}"),
        };
        let step = scheduler.update_from_output(&batch, output, std::time::Instant::now());
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
