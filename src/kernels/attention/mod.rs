//! Causal grouped-query attention that reads K/V rows straight out of the paged cache.
//!
//! burn's path gathers every sequence's context into new tensors and runs a dozen ops per
//! sequence per layer; at 32 decoding sequences that is ~10k small ops per step. Here one
//! parallel pass over the step's query tokens does it, with no copies of the context. Spans
//! with many new tokens (prefill) go through [`attend_span_flash`] instead.

pub(super) mod flash;
pub mod kv_elem;
pub(super) mod piece;
pub(super) mod split;
pub(super) mod types;

pub use kv_elem::KvElem;
pub use types::{HeadShape, SequenceSpan};

#[cfg(test)]
use super::dispatch::KernelPath;
use flash::{FLASH_MIN_QUERIES, attend_span_flash};
#[cfg(test)]
use piece::attend_piece_on;
use split::{Unit, attend_units};

/// Attention for every query row of `spans`. Panics on shapes that do not fit together.
///
/// # Shapes
/// - q: `[tokens, num_heads * head_dim]` (RoPE applied)
/// - k_cache, v_cache: `[slots, num_kv_heads * head_dim]`
/// - output: `[tokens, num_heads * head_dim]` (rows not covered by a span stay zero)
pub fn paged_attention<T: KvElem>(
    q: &[f32],
    k_cache: &[T],
    v_cache: &[T],
    spans: &[SequenceSpan],
    shape: HeadShape,
) -> Vec<f32> {
    shape.check();
    let q_width = shape.num_heads * shape.head_dim;
    let kv_width = shape.num_kv_heads * shape.head_dim;
    assert!(q.len().is_multiple_of(q_width), "q must be [tokens, {q_width}]");
    assert!(
        k_cache.len() == v_cache.len() && k_cache.len().is_multiple_of(kv_width),
        "k_cache and v_cache must both be [slots, {kv_width}]"
    );
    let tokens = q.len() / q_width;
    for span in spans {
        span.check(tokens, k_cache.len() / kv_width);
    }
    let (tiled, per_row): (Vec<_>, Vec<_>) = spans
        .iter()
        .enumerate()
        .partition(|(_, span)| span.len >= FLASH_MIN_QUERIES);
    // Per query row: the sequence it belongs to and how many context positions it sees.
    let mut rows: Vec<Option<(usize, usize)>> = vec![None; tokens];
    for (s, span) in per_row {
        let context = span.slots.len();
        for i in 0..span.len {
            rows[span.first_row + i] = Some((s, context - span.len + i + 1));
        }
    }
    let mut out = vec![0.0f32; tokens * q_width];
    let units: Vec<Unit> = rows
        .iter()
        .enumerate()
        .filter_map(|(row, r)| r.map(|(s, visible)| (row, &spans[s].slots[..visible])))
        .flat_map(|(row, slots)| (0..shape.num_kv_heads).map(move |kv_head| Unit { row, kv_head, slots }))
        .collect();
    attend_units(q, k_cache, v_cache, &units, shape, &mut out);
    for (_, span) in tiled {
        let rows = span.first_row * q_width..(span.first_row + span.len) * q_width;
        attend_span_flash(&q[rows.clone()], k_cache, v_cache, span, shape, &mut out[rows]);
    }
    out
}

/// One query token (all heads) over the context rows at `slots`, on `path`, which this CPU
/// must run: what the tests compare across paths.
///
/// # Shapes
/// - q, out: `[num_heads * head_dim]`
#[cfg(test)]
fn attend_on(
    path: KernelPath,
    q: &[f32],
    slots: &[i64],
    k_cache: &[f32],
    v_cache: &[f32],
    shape: HeadShape,
    out: &mut [f32],
) {
    let group_width = shape.num_heads / shape.num_kv_heads * shape.head_dim;
    for (kv_head, out) in out.chunks_exact_mut(group_width).enumerate() {
        attend_group_on(path, q, slots, k_cache, v_cache, shape, kv_head, out);
    }
}

/// The query heads of KV head `kv_head` (one query token) over the context rows at `slots`,
/// compiled for `path`'s instruction set (the same code, vectorised wider), which this CPU
/// must run. `out` starts zeroed.
///
/// # Shapes
/// - q: `[num_heads * head_dim]`, out: `[num_heads / num_kv_heads * head_dim]`
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
fn attend_group_on(
    path: KernelPath,
    q: &[f32],
    slots: &[i64],
    k_cache: &[f32],
    v_cache: &[f32],
    shape: HeadShape,
    kv_head: usize,
    out: &mut [f32],
) {
    let mut stats = vec![0.0; 2 * (shape.num_heads / shape.num_kv_heads)];
    attend_piece_on(path, q, slots, k_cache, v_cache, shape, kv_head, out, &mut stats);
    for (head, stat) in out.chunks_exact_mut(shape.head_dim).zip(stats.chunks_exact(2)) {
        let inv = 1.0 / stat[1];
        head.iter_mut().for_each(|o| *o *= inv);
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Deterministic values in about [-1.2, 1.2], different for each seed.
    pub(in crate::kernels) fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 31 + seed * 17) % 97) as f32 - 48.0) / 40.0)
            .collect()
    }

    /// Straightforward causal attention over contiguous K/V in f64.
    fn reference(q: &[f32], k: &[f32], v: &[f32], len: usize, context: usize, shape: HeadShape) -> Vec<f64> {
        let (hd, group) = (shape.head_dim, shape.num_heads / shape.num_kv_heads);
        let kvw = shape.num_kv_heads * hd;
        let mut out = vec![0.0; len * shape.num_heads * hd];
        for i in 0..len {
            let visible = context - len + i + 1;
            for h in 0..shape.num_heads {
                let kvh = h / group;
                let qh = &q[(i * shape.num_heads + h) * hd..][..hd];
                let scores: Vec<f64> = (0..visible)
                    .map(|j| {
                        let kj = &k[j * kvw + kvh * hd..][..hd];
                        qh.iter()
                            .zip(kj)
                            .map(|(a, b)| f64::from(*a) * f64::from(*b))
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let total: f64 = exps.iter().sum();
                for (j, e) in exps.iter().enumerate() {
                    for d in 0..hd {
                        out[(i * shape.num_heads + h) * hd + d] += e / total * f64::from(v[j * kvw + kvh * hd + d]);
                    }
                }
            }
        }
        out
    }

    /// Runs `paged_attention` on sequences given as `(context, new tokens)`, their K/V in
    /// scattered slots (the first one's reversed), against the f64 reference.
    fn check_against_reference(contexts: &[(usize, usize)], shape: HeadShape, tolerance: f64) {
        let kvw = shape.num_kv_heads * shape.head_dim;
        let qw = shape.num_heads * shape.head_dim;
        let n = contexts.len() as i64;
        let slot_lists: Vec<Vec<i64>> = contexts
            .iter()
            .enumerate()
            .map(|(s, &(context, _))| {
                let slots = (0..context as i64).map(|j| j * n + s as i64);
                if s == 0 { slots.rev().collect() } else { slots.collect() }
            })
            .collect();
        let num_slots = contexts.iter().map(|c| c.0).max().unwrap_or(0) * contexts.len();
        let mut k_cache = vec![0.0; num_slots * kvw];
        let mut v_cache = vec![0.0; num_slots * kvw];
        let (mut q, mut expected, mut spans, mut first_row) = (Vec::new(), Vec::new(), Vec::new(), 0);
        for (s, &(context, len)) in contexts.iter().enumerate() {
            let k = values(context * kvw, 1 + s);
            let v = values(context * kvw, 3 + s);
            for (j, &slot) in slot_lists[s].iter().enumerate() {
                let slot = slot as usize;
                k_cache[slot * kvw..(slot + 1) * kvw].copy_from_slice(&k[j * kvw..(j + 1) * kvw]);
                v_cache[slot * kvw..(slot + 1) * kvw].copy_from_slice(&v[j * kvw..(j + 1) * kvw]);
            }
            let qs = values(len * qw, 5 + s);
            expected.extend(reference(&qs, &k, &v, len, context, shape));
            q.extend(qs);
            spans.push(SequenceSpan {
                first_row,
                len,
                slots: &slot_lists[s],
            });
            first_row += len;
        }
        let got = paged_attention(&q, &k_cache, &v_cache, &spans, shape);
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert!((f64::from(*g) - e).abs() < tolerance, "element {i}: {g} vs {e}");
        }
    }

    #[test]
    fn scattered_slots_give_the_contiguous_result_for_prefill_and_decode() {
        // A 5-token chunk at the end of a 9-token context, and one decode token after 6
        // cached ones. f32 sums of at most 9 terms of magnitude ≤ 1.2: 1e-5 is a few ulps.
        let shape = HeadShape {
            num_heads: 6,
            num_kv_heads: 2,
            head_dim: 12,
        };
        check_against_reference(&[(9, 5), (7, 1)], shape, 1e-5);
    }

    #[test]
    fn long_spans_take_the_tiled_path_and_match_the_reference() {
        // 70 new tokens after 11 cached ones (three tiles, the last partial), a span just at
        // the tiled threshold, and a decode token, in one step. Sums of up to 81 terms of
        // magnitude ≤ 1.2 in f32, in the GEMM's order: 1e-4.
        let shape = HeadShape {
            num_heads: 6,
            num_kv_heads: 2,
            head_dim: 16,
        };
        let threshold = super::FLASH_MIN_QUERIES;
        check_against_reference(&[(81, 70), (threshold + 3, threshold), (30, 1)], shape, 1e-4);
    }

    /// Two query tokens of one sequence over a three-slot cache, with `shape`.
    fn run_with(shape: HeadShape, span_len: usize, slots: &[i64]) {
        let q = values(2 * shape.num_heads * shape.head_dim, 1);
        let kv = values(3 * shape.num_kv_heads * shape.head_dim, 2);
        let span = SequenceSpan {
            first_row: 0,
            len: span_len,
            slots,
        };
        paged_attention(&q, &kv, &kv, &[span], shape);
    }

    const SHAPE: HeadShape = HeadShape {
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: 8,
    };

    #[test]
    fn every_kernel_path_this_cpu_runs_matches_the_portable_attention() {
        let shape = HeadShape {
            num_heads: 9,
            num_kv_heads: 3,
            head_dim: 64,
        };
        let kvw = shape.num_kv_heads * shape.head_dim;
        let context = 300;
        let k_cache = values(context * kvw, 7);
        let v_cache = values(context * kvw, 8);
        let q = values(shape.num_heads * shape.head_dim, 9);
        let slots: Vec<i64> = (0..context as i64).rev().collect();
        let mut portable = vec![0.0; q.len()];
        attend_on(
            KernelPath::Portable,
            &q,
            &slots,
            &k_cache,
            &v_cache,
            shape,
            &mut portable,
        );
        let (ran, skipped): (Vec<_>, Vec<_>) = KernelPath::ALL.into_iter().partition(|p| p.available());
        println!(
            "attention paths run: {:?}; not on this CPU: {:?}",
            ran.iter().map(|p| p.name()).collect::<Vec<_>>(),
            skipped.iter().map(|p| p.name()).collect::<Vec<_>>()
        );
        // Outputs are weighted means of values ≤ 1.2; only the summation order differs, over
        // 64-term dots and 300-term softmax sums: 1e-5 is a few ulps of the sums.
        for path in ran {
            let mut got = vec![0.0; q.len()];
            attend_on(path, &q, &slots, &k_cache, &v_cache, shape, &mut got);
            for (i, (g, p)) in got.iter().zip(&portable).enumerate() {
                assert!((g - p).abs() < 1e-5, "{path:?} [{i}]: {g} vs {p}");
            }
        }
    }

    /// A 16-bit cache gives what the f32 kernels give on the same values widened (decode and
    /// the tiled prefill path, every split), and stays within the rounding's bound of the
    /// f32 cache.
    #[test]
    fn sixteen_bit_caches_read_as_their_widened_values() {
        use half::{bf16, f16};
        let shape = HeadShape {
            num_heads: 6,
            num_kv_heads: 2,
            head_dim: 64,
        };
        let kvw = shape.num_kv_heads * shape.head_dim;
        let qw = shape.num_heads * shape.head_dim;
        let context = 400;
        let (k, v) = (values(context * kvw, 11), values(context * kvw, 12));
        let slots: Vec<i64> = (0..context as i64).rev().collect();
        // 40 new tokens (tiled) and one decode token over the whole context, in one step.
        let q = values(41 * qw, 13);
        let spans = [
            SequenceSpan {
                first_row: 0,
                len: 40,
                slots: &slots[..300],
            },
            SequenceSpan {
                first_row: 40,
                len: 1,
                slots: &slots,
            },
        ];
        let exact = paged_attention(&q, &k, &v, &spans, shape);
        fn check<T: KvElem>(
            stored: (Vec<T>, Vec<T>),
            q: &[f32],
            spans: &[SequenceSpan],
            shape: HeadShape,
            exact: &[f32],
            bound: f32,
        ) {
            let mut wide = (vec![0.0; stored.0.len()], vec![0.0; stored.1.len()]);
            T::widen_into(&stored.0, &mut wide.0);
            T::widen_into(&stored.1, &mut wide.1);
            let got = paged_attention(q, &stored.0, &stored.1, spans, shape);
            let same = paged_attention(q, &wide.0, &wide.1, spans, shape);
            for (i, ((g, s), e)) in got.iter().zip(&same).zip(exact).enumerate() {
                assert!((g - s).abs() < 1e-5, "[{i}] {g} vs {s} on the widened values");
                assert!((g - e).abs() < bound, "[{i}] {g} vs {e} from the f32 cache");
            }
        }
        let to = |f: fn(f32) -> f16| (k.iter().map(|&x| f(x)).collect(), v.iter().map(|&x| f(x)).collect());
        // Values below 1.2 rounded to 11 bits (f16) or 8 (bf16): relative errors of 2^-11 and
        // 2^-8 in each K and V, a few times that in the outputs (weighted means below 1.2).
        check(to(f16::from_f32), &q, &spans, shape, &exact, 2e-3);
        let brains = (
            k.iter().map(|&x| bf16::from_f32(x)).collect(),
            v.iter().map(|&x| bf16::from_f32(x)).collect(),
        );
        check::<bf16>(brains, &q, &spans, shape, &exact, 2e-2);
    }

    #[test]
    fn a_well_formed_call_runs() {
        run_with(SHAPE, 2, &[0, 1, 2]);
    }

    #[test]
    #[should_panic(expected = "cannot be grouped")]
    fn heads_that_do_not_group_panic() {
        run_with(HeadShape { num_heads: 3, ..SHAPE }, 2, &[0, 1, 2]);
    }

    #[test]
    #[should_panic(expected = "context slots")]
    fn a_span_longer_than_its_context_panics() {
        run_with(SHAPE, 2, &[0]);
    }

    #[test]
    #[should_panic(expected = "outside the cache")]
    fn a_slot_past_the_cache_panics() {
        run_with(SHAPE, 2, &[0, 1, 3]);
    }

    #[test]
    #[should_panic(expected = "outside the step")]
    fn a_span_past_the_step_panics() {
        run_with(SHAPE, 3, &[0, 1, 2]);
    }
}
