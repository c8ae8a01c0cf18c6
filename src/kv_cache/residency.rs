//! KV-block residency (vLLM's `--kv-cache-metrics`): for a sample of device blocks, how
//! long a block lives from allocation to eviction, how long it sat unused before it was
//! evicted, and the gaps between its reuses by prefix-cache hits. Sampling is by count
//! (one allocation in `every`), so the cost stays bounded and tests are deterministic.

use std::collections::HashMap;
use std::time::Instant;

/// Residency observations, in seconds, since the last `take`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResidencyObservations {
    pub lifetime_s: Vec<f64>,
    pub idle_before_evict_s: Vec<f64>,
    pub reuse_gap_s: Vec<f64>,
}

/// When a sampled block was allocated and last used.
#[derive(Debug, Clone, Copy)]
struct Sampled {
    allocated: Instant,
    last_access: Instant,
}

#[derive(Debug)]
pub struct BlockResidency {
    /// Sample one allocation in this many.
    every: u64,
    allocations: u64,
    sampled: HashMap<u32, Sampled>,
    observed: ResidencyObservations,
}

impl BlockResidency {
    /// Samples a `fraction` (0..=1) of allocations; `None` when it samples nothing.
    pub fn new(fraction: f64) -> Option<Self> {
        if fraction.is_nan() || fraction <= 0.0 {
            return None;
        }
        let every = (1.0 / fraction.min(1.0)).round().max(1.0) as u64;
        Some(Self {
            every,
            allocations: 0,
            sampled: HashMap::new(),
            observed: ResidencyObservations::default(),
        })
    }

    /// `block` was handed to a request (from the free list or by evicting what it cached).
    pub fn allocated(&mut self, block: u32, now: Instant) {
        self.sampled.remove(&block);
        self.allocations += 1;
        if self.allocations.is_multiple_of(self.every) {
            let sample = Sampled {
                allocated: now,
                last_access: now,
            };
            self.sampled.insert(block, sample);
        }
    }

    /// A prefix-cache hit reused `block`.
    pub fn reused(&mut self, block: u32, now: Instant) {
        if let Some(s) = self.sampled.get_mut(&block) {
            self.observed
                .reuse_gap_s
                .push(now.saturating_duration_since(s.last_access).as_secs_f64());
            s.last_access = now;
        }
    }

    /// The last holder of `block` let it go (it stays cached, or goes back to the free list).
    pub fn released(&mut self, block: u32, now: Instant) {
        if let Some(s) = self.sampled.get_mut(&block) {
            s.last_access = now;
        }
    }

    /// The cached contents of `block` were evicted to make room.
    pub fn evicted(&mut self, block: u32, now: Instant) {
        if let Some(s) = self.sampled.remove(&block) {
            let o = &mut self.observed;
            o.lifetime_s
                .push(now.saturating_duration_since(s.allocated).as_secs_f64());
            o.idle_before_evict_s
                .push(now.saturating_duration_since(s.last_access).as_secs_f64());
        }
    }

    /// Forgets every sample (the cache was cleared).
    pub fn clear(&mut self) {
        self.sampled.clear();
    }

    /// The observations since the last call.
    pub fn take(&mut self) -> ResidencyObservations {
        std::mem::take(&mut self.observed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn lifetime_idle_and_reuse_gaps_of_a_sampled_block() {
        let mut r = BlockResidency::new(1.0).unwrap();
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        r.allocated(3, at(0));
        r.released(3, at(100));
        r.reused(3, at(400));
        r.released(3, at(500));
        r.evicted(3, at(1500));
        let o = r.take();
        assert_eq!(o.reuse_gap_s, vec![0.3]);
        assert_eq!(o.lifetime_s, vec![1.5]);
        assert_eq!(o.idle_before_evict_s, vec![1.0]);
        assert_eq!(r.take(), ResidencyObservations::default());
        // Evicted once: a second eviction of the same block id (reallocated unsampled) adds nothing.
        r.evicted(3, at(2000));
        assert!(r.take().lifetime_s.is_empty());
    }

    #[test]
    fn samples_one_allocation_in_every_and_nothing_at_zero() {
        assert!(BlockResidency::new(0.0).is_none());
        assert!(BlockResidency::new(f64::NAN).is_none());
        let mut r = BlockResidency::new(0.25).unwrap();
        let now = Instant::now();
        for block in 0..8 {
            r.allocated(block, now);
        }
        for block in 0..8 {
            r.evicted(block, now);
        }
        assert_eq!(r.take().lifetime_s.len(), 2);
    }
}
