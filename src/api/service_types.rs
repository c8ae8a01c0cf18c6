//! Bodies of the service endpoints beside the OpenAI API: `/ready`, `/version`, `/load`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};

use crate::engine::health::EngineState;

/// Every word `/ready` may answer with ([`EngineState::name`]).
pub const ENGINE_STATE_NAMES: [&str; 5] = ["loading", "ready", "restarting", "draining", "dead"];

fn engine_state_name() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(ENGINE_STATE_NAMES))
        .into()
}

/// `/ready`'s body, with 200 and with 503.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Readiness {
    #[schema(schema_with = engine_state_name)]
    pub status: String,
}

impl Readiness {
    pub fn of(state: &EngineState) -> Self {
        Self {
            status: state.name().to_owned(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct VersionInfo {
    /// kiln's version.
    pub version: String,
}

/// The engine's load, for routers and load balancers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Load {
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

#[cfg(test)]
mod tests {
    use super::*;

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
