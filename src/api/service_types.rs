//! Bodies of the service endpoints beside the OpenAI API: `/ready`, `/version`, `/load`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};

use crate::engine::server_health::ServerHealth;
use crate::stats::data::SchedulerStats;

/// Every word `/ready` may answer with ([`crate::engine::health::EngineState::name`]).
pub const ENGINE_STATE_NAMES: [&str; 5] = ["loading", "ready", "restarting", "draining", "dead"];

fn engine_state_name() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(ENGINE_STATE_NAMES))
        .into()
}

/// `/ready`'s body, with 200 and with 503 (and `/health`'s with 200): the server's state
/// (ready while any engine is) and each engine's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Readiness {
    #[schema(schema_with = engine_state_name)]
    pub status: String,
    /// Each engine's state, by data-parallel rank.
    #[serde(default)]
    pub engines: Vec<EngineReadiness>,
}

/// One engine's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EngineReadiness {
    /// The data-parallel rank (the `engine` label of the engine metric families).
    pub engine: usize,
    #[schema(schema_with = engine_state_name)]
    pub status: String,
}

impl Readiness {
    pub fn of(health: &ServerHealth) -> Self {
        Self {
            status: health.state().name().to_owned(),
            engines: health
                .engines()
                .iter()
                .enumerate()
                .map(|(engine, h)| EngineReadiness {
                    engine,
                    status: h.state().name().to_owned(),
                })
                .collect(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct VersionInfo {
    /// kiln's version.
    pub version: String,
}

/// The engines' load, for routers and load balancers: the total over every engine at the
/// top level (as with one engine), and each engine's in `engines`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Load {
    #[serde(flatten)]
    pub total: LoadFigures,
    /// Each engine's load and state, by data-parallel rank.
    #[serde(default)]
    pub engines: Vec<EngineLoad>,
}

/// One engine's load and state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EngineLoad {
    /// The data-parallel rank.
    pub engine: usize,
    #[schema(schema_with = engine_state_name)]
    pub status: String,
    #[serde(flatten)]
    pub load: LoadFigures,
}

/// What `/load` says of one engine, or of them all.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LoadFigures {
    /// Sequences being generated.
    pub running: usize,
    /// Sequences queued for admission.
    pub waiting: usize,
    /// Sequences swapped out to host memory.
    pub swapped: usize,
    /// Share of the KV cache in use, 0 to 1.
    pub kv_cache_usage: f64,
    /// Tokens the waiting requests still have to compute.
    pub num_tokens_waiting: u64,
    /// Of those, the ones the prefix cache would not cover.
    pub uncached_tokens_waiting: u64,
    /// Context tokens of the running batch.
    pub num_tokens_running: u64,
    /// Tokens the KV cache holds when full.
    pub max_token_capacity: u64,
}

impl From<&SchedulerStats> for LoadFigures {
    fn from(s: &SchedulerStats) -> Self {
        Self {
            running: s.num_running,
            waiting: s.num_waiting,
            swapped: s.num_swapped,
            kv_cache_usage: s.kv_cache_usage,
            num_tokens_waiting: s.tokens.waiting,
            uncached_tokens_waiting: s.tokens.uncached_waiting,
            num_tokens_running: s.tokens.running,
            max_token_capacity: s.tokens.capacity,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::health::EngineState;

    #[test]
    fn every_engine_state_has_a_documented_name() {
        let states = [
            EngineState::Loading,
            EngineState::Ready,
            EngineState::Restarting,
            EngineState::Draining,
            EngineState::Dead("why".into()),
        ];
        // A new state fails to compile here until it is listed above and in the names.
        let _exhaustive = |s: &EngineState| match s {
            EngineState::Loading
            | EngineState::Ready
            | EngineState::Restarting
            | EngineState::Draining
            | EngineState::Dead(_) => (),
        };
        for state in &states {
            assert!(ENGINE_STATE_NAMES.contains(&state.name()), "{state:?}");
        }
        assert_eq!(states.len(), ENGINE_STATE_NAMES.len());
    }
}
