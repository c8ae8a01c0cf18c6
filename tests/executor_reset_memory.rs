//! A restarted executor drops its old KV cache before allocating the new one, so a restart
//! never needs the memory of two caches. Its own test binary, because it counts every heap
//! allocation through a global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use kiln::config::Config;
use kiln::executor::Executor;
use kiln::model::loader::open_model;
use kiln::server::prepare_model;
use kiln::testing::{TinyModelSpec, write_tiny_model};

/// The system allocator, counting live bytes and their high-water mark.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
            PEAK.fetch_max(live, Ordering::SeqCst);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
            PEAK.fetch_max(live, Ordering::SeqCst);
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let live = LIVE.fetch_add(new_size - layout.size(), Ordering::SeqCst) + new_size - layout.size();
                PEAK.fetch_max(live, Ordering::SeqCst);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::SeqCst);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn a_reset_never_holds_two_caches_at_once() {
    const CACHE_BYTES: usize = 64 << 20;
    let dir = tempfile::tempdir().expect("tempdir");
    let model = write_tiny_model(dir.path(), TinyModelSpec::default()).expect("tiny model");
    let mut config = Config::default();
    config.engine.kv_cache_memory = "64MiB".into();
    config.engine.swap_space_gib = 0.0;
    let mut runner = prepare_model(&config, open_model(&model).expect("open"))
        .expect("prepare")
        .executor;

    let before = LIVE.load(Ordering::SeqCst);
    PEAK.store(before, Ordering::SeqCst);
    runner.reset();
    let (after, peak) = (LIVE.load(Ordering::SeqCst), PEAK.load(Ordering::SeqCst));
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    assert!(
        before >= CACHE_BYTES,
        "the cache is allocated up front: {:.1} MiB live",
        mib(before)
    );
    // Two caches at once would peak at `before + CACHE_BYTES` or more; building one layer's
    // tensor briefly takes a second copy of it (1/4 of this two-layer cache), so the bound is
    // half a cache.
    assert!(
        peak < before + CACHE_BYTES / 2,
        "a reset peaked at {:.1} MiB with {:.1} MiB live before it",
        mib(peak),
        mib(before)
    );
    assert!(
        after.abs_diff(before) < CACHE_BYTES / 8,
        "the new cache replaces the old: {:.1} MiB before, {:.1} MiB after",
        mib(before),
        mib(after)
    );
}
