//! The paged KV cache: block bookkeeping (pure) and the device tensors (executor-owned).

pub mod block_manager;
pub mod device_cache;
