//! One piece of attention over a run of keys, on the best kernel path: the group of query
//! heads that share a KV head, left unnormalised so pieces of a split context can be merged.

use super::kv_elem::{KvElem, MAX_HEAD_DIM};
use super::types::HeadShape;
use crate::kernels::dispatch::KernelPath;
use crate::kernels::exp::exp;

/// [`attend_group_on`] left unnormalised, with each head's `(max, sum)` in `stats`
/// (`[group * 2]`): one piece of a context split over several workers.
#[allow(clippy::too_many_arguments)]
pub(super) fn attend_piece_on<T: KvElem>(
    path: KernelPath,
    q: &[f32],
    slots: &[i64],
    k_cache: &[T],
    v_cache: &[T],
    shape: HeadShape,
    kv_head: usize,
    out: &mut [f32],
    stats: &mut [f32],
) {
    assert!(path.available(), "this CPU cannot run the {} kernels", path.name());
    assert!(!slots.is_empty(), "a piece of attention covers at least one key");
    assert!(
        shape.head_dim <= MAX_HEAD_DIM,
        "head dim {} over {MAX_HEAD_DIM}",
        shape.head_dim
    );
    let args = GroupArgs {
        q,
        slots,
        k_cache,
        v_cache,
        shape,
        kv_head,
    };
    // The scratch is borrowed out here, not inside: a closure handed to the thread-local's
    // `with` is a function of its own, compiled for the baseline CPU, which is how the whole
    // attention body once ran as SSE code on AVX-512 machines.
    SCORES.with_borrow_mut(|scores| match path {
        // SAFETY: the CPU supports the features each function is compiled for (asserted).
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx512 => unsafe { attend_group_avx512(&args, scores, out, stats) },
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx2 => unsafe { attend_group_avx2(&args, scores, out, stats) },
        _ => attend_group(&args, scores, out, stats),
    })
}

/// The inputs of one KV head's share of a query token.
struct GroupArgs<'a, T> {
    q: &'a [f32],
    slots: &'a [i64],
    k_cache: &'a [T],
    v_cache: &'a [T],
    shape: HeadShape,
    kv_head: usize,
}

/// [`attend_group`] compiled for AVX-512.
///
/// # Safety
/// The CPU must support AVX-512F (the caller checks the active kernel path).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn attend_group_avx512<T: KvElem>(
    args: &GroupArgs<'_, T>,
    scores: &mut Vec<f32>,
    out: &mut [f32],
    stats: &mut [f32],
) {
    attend_group(args, scores, out, stats)
}

/// [`attend_group`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2 and FMA (the caller checks the active kernel path).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_group_avx2<T: KvElem>(
    args: &GroupArgs<'_, T>,
    scores: &mut Vec<f32>,
    out: &mut [f32],
    stats: &mut [f32],
) {
    attend_group(args, scores, out, stats)
}

thread_local! {
    /// Each worker's attention scores, kept between calls (one allocation per query and KV
    /// head otherwise).
    static SCORES: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The body every path compiles: inlined into each caller so it takes the caller's
/// instruction set. `scores` is the caller's scratch. Adds `Σ exp(s - max) · v` to `out` and
/// writes each head's `(max, Σ exp(s - max))` to `stats`: normalising is left to the caller,
/// so a context split in pieces can be put back together exactly.
///
/// # Shapes
/// - out: `[group * head_dim]`, stats: `[group * 2]`
#[inline(always)]
fn attend_group<T: KvElem>(args: &GroupArgs<'_, T>, scores: &mut Vec<f32>, out: &mut [f32], stats: &mut [f32]) {
    let GroupArgs {
        q,
        slots,
        k_cache,
        v_cache,
        shape,
        kv_head,
    } = *args;
    let HeadShape {
        num_heads,
        num_kv_heads,
        head_dim,
    } = shape;
    let group = num_heads / num_kv_heads;
    let kv_width = num_kv_heads * head_dim;
    let scale = (head_dim as f32).powf(-0.5);
    let n = slots.len();
    // A 16-bit row is widened here, one row at a time, inside the loop.
    let mut row_buf = [0.0f32; MAX_HEAD_DIM];
    {
        scores.clear();
        crate::kernels::scratch::resize_counted(scores, group * n, 0.0);
        // Scores of the group's heads, key by key so each K row is read once.
        let row_of = |slot: i64| slot as usize * kv_width + kv_head * head_dim;
        for (j, &slot) in slots.iter().enumerate() {
            if let Some(&ahead) = slots.get(j + PREFETCH_KEYS_AHEAD) {
                prefetch_row(&k_cache[row_of(ahead)..][..head_dim]);
            }
            let key = T::widened(&k_cache[row_of(slot)..][..head_dim], &mut row_buf);
            for g in 0..group {
                let head = kv_head * group + g;
                scores[g * n + j] = dot(&q[head * head_dim..][..head_dim], key) * scale;
            }
        }
        for g in 0..group {
            let (max, sum) = exp_shifted_in_place(&mut scores[g * n..(g + 1) * n]);
            stats[2 * g] = max;
            stats[2 * g + 1] = sum;
        }
        for (j, &slot) in slots.iter().enumerate() {
            if let Some(&ahead) = slots.get(j + PREFETCH_KEYS_AHEAD) {
                prefetch_row(&v_cache[row_of(ahead)..][..head_dim]);
            }
            let value = T::widened(&v_cache[row_of(slot)..][..head_dim], &mut row_buf);
            for g in 0..group {
                let p = scores[g * n + j];
                for (o, v) in out[g * head_dim..][..head_dim].iter_mut().zip(value) {
                    *o += p * v;
                }
            }
        }
    }
}

/// How far ahead the K and V loops ask for rows. A head's slice of a cache row is a quarter
/// to a third of the row, so the hardware's stride prefetch, which stops at every 4 KiB page,
/// leaves a long context's reads waiting on memory.
const PREFETCH_KEYS_AHEAD: usize = 8;

/// Asks for `row`'s cache lines ahead of use (a hint; nothing on other architectures).
#[inline(always)]
fn prefetch_row<T>(row: &[T]) {
    #[cfg(target_arch = "x86_64")]
    for line in row.chunks(64 / size_of::<T>()) {
        // SAFETY: a prefetch is a hint that never faults; the pointer is in bounds anyway.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line.as_ptr().cast::<i8>());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = row;
}

/// Dot product in sixteen independent lanes, which the compiler vectorises (a single f32
/// accumulator would pin the order of the additions and stay scalar).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 16];
    let (a16, b16) = (a.chunks_exact(16), b.chunks_exact(16));
    let tail: f32 = a16.remainder().iter().zip(b16.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in a16.zip(b16) {
        for i in 0..16 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// `s ← exp(s - max)` over `scores`; returns `(max, Σ exp(s - max))`.
#[inline(always)]
fn exp_shifted_in_place(scores: &mut [f32]) -> (f32, f32) {
    // Max and sum in sixteen lanes and the exponentials in a loop of their own: a single
    // running total fixes the order of the additions, which keeps a loop scalar.
    let mut lanes = [f32::NEG_INFINITY; 16];
    for chunk in scores.chunks(16) {
        for (lane, &s) in lanes.iter_mut().zip(chunk) {
            *lane = lane.max(s);
        }
    }
    let max = lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for s in scores.iter_mut() {
        *s = exp(*s - max);
    }
    let mut lanes = [0.0f32; 16];
    for chunk in scores.chunks(16) {
        for (lane, &s) in lanes.iter_mut().zip(chunk) {
            *lane += s;
        }
    }
    (max, lanes.iter().sum())
}
