//! Decode attention split over the context ("flash decoding"). One unit of work per (query
//! row, KV head) leaves a lone decoding sequence with three units for the model's three KV
//! heads: on two cores one of them idles a third of the time, and long contexts make that
//! the larger part of a step. So when units are few and contexts long, each unit's keys are
//! cut into pieces that run in parallel; every piece keeps its own softmax max and sum, and
//! the pieces are rescaled to a common max and added, which gives the softmax over the whole
//! context up to rounding.

use std::ops::Range;

use rayon::prelude::*;

use super::kv_elem::KvElem;
use super::piece::attend_piece_on;
use super::types::HeadShape;
use crate::kernels::dispatch::active;
use crate::kernels::exp::exp;

/// Fewest keys in a piece: below this, cutting costs more (a second pass, the rescaling)
/// than the idle core it saves.
const MIN_PIECE_KEYS: usize = 128;
/// Pieces a worker thread should have, so pieces of uneven cost still even out.
const PIECES_PER_THREAD: usize = 2;

/// One query row's share of one KV head, and the context it sees.
pub(super) struct Unit<'a> {
    pub row: usize,
    pub kv_head: usize,
    /// Cache slots of the visible context.
    pub slots: &'a [i64],
}

/// Attention of every unit into `out` (`[tokens, num_heads * head_dim]`, zeroed), its
/// context split when there are fewer units than the workers need.
pub(super) fn attend_units<T: KvElem>(
    q: &[f32],
    k_cache: &[T],
    v_cache: &[T],
    units: &[Unit],
    shape: HeadShape,
    out: &mut [f32],
) {
    let longest = units.iter().map(|u| u.slots.len()).max().unwrap_or(0);
    let pieces = pieces_per_unit(units.len(), longest, rayon::current_num_threads());
    attend_units_in_pieces(q, k_cache, v_cache, units, shape, pieces, out);
}

/// How many pieces each unit's context is cut into: one while the units alone give every
/// worker [`PIECES_PER_THREAD`], never pieces under [`MIN_PIECE_KEYS`].
fn pieces_per_unit(units: usize, longest: usize, threads: usize) -> usize {
    let wanted = (threads * PIECES_PER_THREAD).div_ceil(units.max(1));
    wanted.min(longest / MIN_PIECE_KEYS).max(1)
}

/// `n` keys in at most `pieces` contiguous, near-equal, non-empty ranges.
fn piece_ranges(n: usize, pieces: usize) -> impl Iterator<Item = Range<usize>> {
    let pieces = pieces.min(n).max(1);
    (0..pieces).map(move |p| p * n / pieces..(p + 1) * n / pieces)
}

/// [`attend_units`] with the number of pieces chosen by the caller (tests compare splits).
fn attend_units_in_pieces<T: KvElem>(
    q: &[f32],
    k_cache: &[T],
    v_cache: &[T],
    units: &[Unit],
    shape: HeadShape,
    pieces: usize,
    out: &mut [f32],
) {
    let q_width = shape.num_heads * shape.head_dim;
    let group = shape.num_heads / shape.num_kv_heads;
    let group_width = group * shape.head_dim;
    // Each piece: its unnormalised output, then (max, sum) for each of the group's heads.
    let piece_width = group_width + 2 * group;
    let work: Vec<(usize, Range<usize>)> = units
        .iter()
        .enumerate()
        .flat_map(|(i, u)| piece_ranges(u.slots.len(), pieces).map(move |r| (i, r)))
        .collect();
    let mut partial = vec![0.0f32; work.len() * piece_width];
    let path = active();
    partial
        .par_chunks_mut(piece_width)
        .zip(&work)
        .for_each(|(buf, (i, range))| {
            let unit = &units[*i];
            let (o, stats) = buf.split_at_mut(group_width);
            let q = &q[unit.row * q_width..][..q_width];
            let slots = &unit.slots[range.clone()];
            attend_piece_on(path, q, slots, k_cache, v_cache, shape, unit.kv_head, o, stats);
        });
    // Pieces are in unit order: each unit's run of them is put back together.
    let mut first = 0;
    for (i, unit) in units.iter().enumerate() {
        let count = work[first..].iter().take_while(|(j, _)| *j == i).count();
        let parts = &partial[first * piece_width..(first + count) * piece_width];
        let dst = &mut out[unit.row * q_width + unit.kv_head * group_width..][..group_width];
        combine(parts, piece_width, shape.head_dim, dst);
        first += count;
    }
}

/// `dst = Σ e^(m_p - M) · o_p / Σ e^(m_p - M) · l_p` for each head, over the pieces `parts`
/// (each `piece_width` long: outputs, then `(m_p, l_p)` per head), `M` the largest `m_p`.
fn combine(parts: &[f32], piece_width: usize, head_dim: usize, dst: &mut [f32]) {
    let group_width = dst.len();
    for (g, head) in dst.chunks_exact_mut(head_dim).enumerate() {
        let stat = |p: &[f32]| (p[group_width + 2 * g], p[group_width + 2 * g + 1]);
        let max = parts
            .chunks_exact(piece_width)
            .map(|p| stat(p).0)
            .fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0;
        head.fill(0.0);
        for p in parts.chunks_exact(piece_width) {
            let (m, l) = stat(p);
            // exp(0) is exactly 1: a unit in one piece is only divided by its sum.
            let w = exp(m - max);
            sum += w * l;
            for (d, o) in head.iter_mut().zip(&p[g * head_dim..][..head_dim]) {
                *d += w * o;
            }
        }
        let inv = 1.0 / sum;
        head.iter_mut().for_each(|d| *d *= inv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::attention::tests::values;

    #[test]
    fn a_split_context_matches_the_whole() {
        let shape = HeadShape {
            num_heads: 6,
            num_kv_heads: 2,
            head_dim: 16,
        };
        let (q_width, kv_width) = (shape.num_heads * shape.head_dim, shape.num_kv_heads * shape.head_dim);
        let cache_rows = 700;
        let (k, v) = (values(cache_rows * kv_width, 1), values(cache_rows * kv_width, 2));
        let q = values(2 * q_width, 3);
        // Two rows seeing 613 and 5 keys, in scrambled slots.
        let slots: Vec<i64> = (0..613).map(|i| (i * 263 % cache_rows) as i64).collect();
        let units: Vec<Unit> = [(0, &slots[..]), (1, &slots[..5])]
            .into_iter()
            .flat_map(|(row, s)| (0..shape.num_kv_heads).map(move |kv_head| Unit { row, kv_head, slots: s }))
            .collect();
        let mut whole = vec![0.0; 2 * q_width];
        attend_units_in_pieces(&q, &k, &v, &units, shape, 1, &mut whole);
        for pieces in [2, 3, 7, 1000] {
            let mut split = vec![0.0; 2 * q_width];
            attend_units_in_pieces(&q, &k, &v, &units, shape, pieces, &mut split);
            for (i, (a, b)) in whole.iter().zip(&split).enumerate() {
                // Outputs are averages of values below 1.5: a few ulps of rescaling.
                assert!((a - b).abs() < 1e-5, "{pieces} pieces, element {i}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn splits_only_when_units_are_few_and_contexts_long() {
        assert_eq!(pieces_per_unit(3, 2048, 2), 2);
        assert_eq!(pieces_per_unit(3, 200, 2), 1);
        assert_eq!(pieces_per_unit(96, 4096, 2), 1);
        assert_eq!(pieces_per_unit(1, 4096, 16), 32);
        assert_eq!(pieces_per_unit(1, 1000, 16), 7);
        let ranges: Vec<_> = piece_ranges(10, 3).collect();
        assert_eq!(ranges, vec![0..3, 3..6, 6..10]);
        assert_eq!(piece_ranges(2, 5).count(), 2);
    }
}
