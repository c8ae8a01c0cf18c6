//! Where the process's memory goes, in bytes per component (`kiln_memory_bytes`): the
//! executor sets what it holds (weights and KV cache once, the host swap pool as it fills),
//! the kernels count their scratch as it grows, and the gauge reads them at each scrape.

use std::sync::atomic::{AtomicU64, Ordering};

/// One part of the footprint (the gauge's `component` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryComponent {
    Weights,
    KvCache,
    HostSwapPool,
}

impl MemoryComponent {
    pub const ALL: [MemoryComponent; 3] = [Self::Weights, Self::KvCache, Self::HostSwapPool];

    pub fn name(self) -> &'static str {
        match self {
            Self::Weights => "weights",
            Self::KvCache => "kv_cache",
            Self::HostSwapPool => "host_swap",
        }
    }
}

/// Bytes per component, shared between the executor that owns the memory and the gauge.
#[derive(Debug, Default)]
pub struct MemoryFootprint {
    bytes: [AtomicU64; 3],
}

impl MemoryFootprint {
    pub fn set(&self, component: MemoryComponent, bytes: u64) {
        self.bytes[component as usize].store(bytes, Ordering::Relaxed);
    }

    pub fn get(&self, component: MemoryComponent) -> u64 {
        self.bytes[component as usize].load(Ordering::Relaxed)
    }
}
