//! The paged KV cache: block bookkeeping (pure) and the device tensors (executor-owned).

pub mod backend_ops;
pub mod block;
pub mod capacity;
pub mod device_cache;
pub mod events;
pub mod residency;
pub mod slot_runs;
mod stored;
pub mod swapped;
