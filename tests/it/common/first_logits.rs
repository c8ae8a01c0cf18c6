//! The logits of a model's first step on one greedy prompt, through the same preparation
//! the server does (weights, KV cache, scheduler), without a server around it.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use kiln::config::Config;
use kiln::engine::sampling_params::SamplingParams;
use kiln::engine::types::Operation;
use kiln::model::loader::open_model;
use kiln::scheduler::{NewRequest, Scheduler};
use kiln::server::prepare_model;

/// First-step logits of `prompt` on the model at `model`, its weights widened to f32 at load
/// when `dequantize_weights` is set.
pub fn first_logits(model: &Path, dequantize_weights: bool, prompt: &[u32]) -> Vec<f32> {
    let mut config = Config::default();
    config.model.path = model.display().to_string();
    config.model.dequantize_weights = dequantize_weights;
    config.engine.kv_cache_memory = "8MiB".into();
    // The whole prompt in one step: no step-time budget to chunk it.
    config.scheduler.max_step_ms = 0.0;
    let prepared = prepare_model(&config, open_model(model).expect("open")).expect("prepare");
    let mut runner = prepared.executor;
    let mut scheduler = Scheduler::new(prepared.scheduler, prepared.end_of_generation);
    let request = NewRequest {
        id: "r".into(),
        prompt_token_ids: prompt.to_vec(),
        params: Arc::new(SamplingParams {
            temperature: 0.0,
            ..Default::default()
        }),
        seed: None,
        operation: Operation::TextCompletion,
        arrival: Instant::now(),
        trace: None,
        lora: None,
    };
    scheduler.add(request, Instant::now()).expect("admitted");
    let batch = scheduler.schedule(Instant::now());
    runner.logits(&batch)
}
