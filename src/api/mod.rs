//! The HTTP api: thin actix-web handlers over the engine's messages.

pub mod access_log;
pub mod adapter_catalog;
pub mod auth;
pub mod body_deadline;
pub mod chat;
pub mod choice_output;
pub mod choice_parts;
pub mod completions;
pub mod cors;
pub mod detokenizer;
pub mod engine_choice;
pub mod engine_handle;
pub mod errors;
pub mod fan_out;
pub mod generation;
pub mod json_body;
pub mod load_header;
pub mod lora_admin;
pub mod openai_types;
pub mod openapi;
pub mod output_pool;
pub mod pipeline;
pub mod prompt;
pub mod prompt_echo;
pub mod request_log;
pub mod responses;
pub mod routes;
pub mod service_types;
pub mod sse;
pub mod stall_watch;
pub mod stop_strings;
pub mod strict_schema;
pub mod tokenize;
pub mod tokenizer_info;
pub mod tool_calls;
pub mod validation;
pub mod worker_contract;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use actix::Addr;
use tokenizers::Tokenizer;

pub use routes::routes;

use crate::config::LimitsConfig;
use crate::grammar::GrammarCompiler;
use crate::model::chat_template::ChatTemplate;
use crate::stats::actor::StatsActor;
use crate::stats::exporter::Telemetry;

/// What the api needs to know about the served model.
#[derive(Clone)]
pub struct ServedModel {
    pub name: String,
    pub tokenizer: Arc<Tokenizer>,
    pub chat_template: Arc<ChatTemplate>,
    pub max_model_len: usize,
    /// One past the tokenizer's largest id: prompt token ids must be below it.
    pub token_id_bound: usize,
    /// Unix seconds, for `/v1/models`.
    pub created: u64,
    /// Compiles output constraints over this model's vocabulary; `None` when the vocabulary
    /// cannot be mapped to bytes (constrained requests then get 400).
    pub grammars: Option<Arc<GrammarCompiler>>,
    /// Reads `tool_choice: auto` calls; `None` unless `--enable-auto-tool-choice`.
    pub tool_parser: Option<tool_calls::ToolCallParser>,
    /// What `GET /tokenizer_info` answers (see [`tokenizer_info`]).
    pub tokenizer_config: Arc<serde_json::Value>,
    /// LoRA adapters requests may name in `model` instead of `name` (changed at run time by
    /// `/v1/load_lora_adapter` and `/v1/unload_lora_adapter`).
    pub adapters: Arc<adapter_catalog::AdapterCatalog>,
}

/// A LoRA adapter served beside the base model.
#[derive(Debug, Clone)]
pub struct ServedAdapter {
    pub name: String,
    /// Its id in engine requests.
    pub id: u32,
    /// Its folder (`root` in `/v1/models`).
    pub path: String,
}

/// Shared, read-only state of every handler.
pub struct AppState {
    pub model: ServedModel,
    /// Submits, aborts and reads the load of engine requests.
    pub engine: engine_handle::EngineHandle,
    pub stats: Addr<StatsActor>,
    pub registry: prometheus::Registry,
    /// The latency exemplars `/metrics` writes in OpenMetrics.
    pub exemplars: Arc<crate::stats::histogram_store::HistogramStore>,
    /// Add per-request `metrics` to responses.
    pub per_request_metrics: bool,
    /// What one request may ask for.
    pub limits: LimitsConfig,
    /// A streaming client that takes no ready chunk for this long is gone.
    pub stream_stall_timeout: Duration,
    /// Samples and exports request spans; `None` when no traces endpoint is configured.
    pub tracer: Option<Arc<crate::traces::Tracer>>,
    /// Keeps the meter provider (and its exporters) alive as long as the server.
    pub _telemetry: Arc<Telemetry>,
}

/// Seconds since the Unix epoch, for `created` fields.
pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
