//! The kernels' per-thread scratch buffers, counted as they grow: each worker keeps its
//! buffers between calls, so their sum is memory the process holds for good
//! (`kiln_memory_bytes{component="scratch"}`).

use std::sync::atomic::{AtomicU64, Ordering};

static SCRATCH_BYTES: AtomicU64 = AtomicU64::new(0);

/// `v.resize(len, value)`, adding any growth of its allocation to the count.
#[inline]
pub fn resize_counted<T: Clone>(v: &mut Vec<T>, len: usize, value: T) {
    let before = v.capacity();
    v.resize(len, value);
    let grown = v.capacity().saturating_sub(before);
    if grown > 0 {
        SCRATCH_BYTES.fetch_add((grown * size_of::<T>()) as u64, Ordering::Relaxed);
    }
}

/// Bytes every worker's scratch buffers hold (they are kept until the thread ends).
pub fn scratch_bytes() -> u64 {
    SCRATCH_BYTES.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_is_counted_and_reuse_is_not() {
        let before = scratch_bytes();
        let mut v: Vec<f32> = Vec::new();
        resize_counted(&mut v, 1000, 0.0);
        let grown = scratch_bytes() - before;
        // Other tests' kernels may grow their scratch meanwhile: at least ours is counted.
        assert!(grown >= 4000, "{grown}");
        let at = scratch_bytes();
        resize_counted(&mut v, 10, 0.0);
        resize_counted(&mut v, 1000, 0.0);
        assert_eq!(v.capacity() * 4, 4 * v.capacity());
        assert!(scratch_bytes() - at < 4000, "reusing the buffer adds nothing of ours");
    }
}
