//! kiln: an OpenAI-compatible LLM inference server whose engine reports its own telemetry.
//!
//! Four actors (see `DESIGN.md`): the HTTP api, the [`scheduler`], the [`executor`] on its
//! own thread, and the [`stats`] collector, exchanging messages.

pub mod api;
pub mod config;
pub mod engine;
pub mod executor;
pub mod grammar;
pub mod kernels;
pub mod kv_cache;
pub mod kv_events;
pub mod lifecycle;
pub mod model;
pub mod otlp;
pub mod scheduler;
pub mod server;
pub mod stats;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod tokenizer;
pub mod traces;
