//! The HTTP api: thin actix-web handlers over the engine's messages.

pub mod chat;
pub mod completions;
pub mod detokenizer;
pub mod errors;
pub mod generation;
pub mod load_header;
pub mod openai_types;
pub mod prompt;
pub mod routes;
pub mod sse;
pub mod stop_strings;
pub mod validation;

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use actix::Addr;

use errors::ApiError;
use generation::{ChoiceRequest, ChoiceStream};
pub use routes::routes;

use crate::engine::sampling_params::SamplingParams;
use crate::engine::types::Operation;
use crate::scheduler::actor::SchedulerActor;
use crate::server::ServedModel;
use crate::stats::actor::StatsActor;
use crate::stats::exporter::Telemetry;

/// Shared, read-only state of every handler.
pub struct AppState {
    pub model: ServedModel,
    pub scheduler: Addr<SchedulerActor>,
    pub stats: Addr<StatsActor>,
    pub registry: prometheus::Registry,
    /// Add per-request `metrics` to responses.
    pub per_request_metrics: bool,
    /// Keeps the meter provider (and its exporters) alive as long as the server.
    pub _telemetry: Arc<Telemetry>,
}

impl AppState {
    /// A request may name the served model or none; anything else is 404.
    pub fn check_model(&self, requested: Option<&str>) -> Result<(), ApiError> {
        match requested {
            None => Ok(()),
            Some(name) if name == self.model.name => Ok(()),
            Some(name) => Err(ApiError::ModelNotFound(name.to_string())),
        }
    }

    /// Submits `n` choices per prompt; if one is refused, the ones already submitted are
    /// dropped, which aborts them.
    pub async fn submit_all(
        &self,
        id: &str,
        prompts: Vec<Vec<u32>>,
        params: SamplingParams,
        operation: Operation,
        arrival: Instant,
        prompt_param: &'static str,
    ) -> Result<Vec<ChoiceStream>, ApiError> {
        let n = params.n.max(1);
        let mut choices = Vec::with_capacity(prompts.len() * n as usize);
        for (p, prompt) in prompts.into_iter().enumerate() {
            let mut base = params.clone();
            prompt::fit_to_context(prompt.len(), &mut base, self.model.max_model_len, prompt_param)?;
            for c in 0..n {
                let index = p as u32 * n + c;
                let mut params = base.clone();
                // Seeded choices stay reproducible yet differ from each other.
                params.seed = base.seed.map(|s| s.wrapping_add(u64::from(c)));
                let request = ChoiceRequest {
                    id: format!("{id}-{index}"),
                    index,
                    prompt: prompt.clone(),
                    params,
                    operation,
                    arrival,
                };
                choices.push(ChoiceStream::submit(&self.scheduler, &self.model.tokenizer, request).await?);
            }
        }
        Ok(choices)
    }
}

/// Seconds since the Unix epoch, for `created` fields.
pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
