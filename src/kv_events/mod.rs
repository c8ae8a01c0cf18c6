//! KV-cache events in vLLM's wire format (`--kv-events-config`), for KV-aware routers such
//! as llm-d: the payload encoding and the ZeroMQ publisher. What is published comes from the
//! prefix cache (`crate::kv_cache::events`), drained by the scheduler after each step.

pub mod encode;
pub mod publisher;

pub use publisher::{KvEventSender, start_publisher};
