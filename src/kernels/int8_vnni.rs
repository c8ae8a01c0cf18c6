//! The int8 activation kernel on AVX-512 VNNI: `vpdpbusd` multiplies a row's four unsigned
//! weight bytes (broadcast) by 16 tokens × 4 columns of signed activation bytes and adds each
//! token's four products into its i32 lane. A register tile of 6 rows × 32 tokens keeps 12
//! integer sums (one group of columns) and 12 f32 accumulators; each group's sums are scaled
//! into the f32 ones as `int8_lanes.rs` states. The results equal the portable kernel's bit
//! for bit (the integer sums are exact and the f32 steps are the same, in the same order).

use std::arch::x86_64::*;
use std::ops::Range;

use super::int8_layout::{Int8Panel, Output, QuantizedLanes, TOKEN_LANES, WeightGroups, group_of, scale_and_inverse};
use super::packed::PackedMatrix;

/// Rows of the large tile.
const TILE_ROWS: usize = 6;

/// One panel: tokens in chunks of two vectors (one for the last chunk when one is left),
/// rows in groups of [`TILE_ROWS`], then of one.
///
/// # Safety
/// The CPU has AVX-512F, BW and VNNI; `panel` holds rows `rows` of `w` unpacked, and no one
/// else writes columns `rows` of `out`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn panel(
    panel: &Int8Panel,
    w: &PackedMatrix,
    rows: Range<usize>,
    lhs: &QuantizedLanes,
    out: &Output,
) {
    let (k, group) = (lhs.k, lhs.group);
    let groups = k / group;
    assert_eq!(
        (w.cols, group_of(w.format)),
        (k, group),
        "matrix and activations disagree"
    );
    assert!(panel.values.len() >= rows.len() * k && rows.end <= w.rows);
    assert!(lhs.bytes.len() >= k * lhs.padded && lhs.scales.len() >= groups * lhs.padded);
    assert!(rows.end <= out.row_stride && lhs.tokens == out.tokens && lhs.padded.is_multiple_of(TOKEN_LANES));
    let weight_groups = WeightGroups::of(w);
    let mut t0 = 0;
    while t0 < lhs.padded {
        let two = lhs.padded - t0 >= 2 * TOKEN_LANES;
        let mut i = 0;
        while i < rows.len() {
            let big = rows.len() - i >= TILE_ROWS;
            let at = Tile {
                values: panel.values[i * k..].as_ptr(),
                row: rows.start + i,
                t0,
            };
            // SAFETY: rows `i ..` of the panel, the chunk's tokens (inside `padded`) and
            // columns `rows.start + i ..` of the output are in bounds (asserted above).
            unsafe {
                i += match (two, big, group == 32) {
                    (true, true, true) => tile::<TILE_ROWS, 2, 32>(&at, &weight_groups, lhs, out),
                    (true, true, false) => tile::<TILE_ROWS, 2, 16>(&at, &weight_groups, lhs, out),
                    (true, false, true) => tile::<1, 2, 32>(&at, &weight_groups, lhs, out),
                    (true, false, false) => tile::<1, 2, 16>(&at, &weight_groups, lhs, out),
                    (false, true, true) => tile::<TILE_ROWS, 1, 32>(&at, &weight_groups, lhs, out),
                    (false, true, false) => tile::<TILE_ROWS, 1, 16>(&at, &weight_groups, lhs, out),
                    (false, false, true) => tile::<1, 1, 32>(&at, &weight_groups, lhs, out),
                    (false, false, false) => tile::<1, 1, 16>(&at, &weight_groups, lhs, out),
                };
            }
        }
        t0 += if two { 2 * TOKEN_LANES } else { TOKEN_LANES };
    }
}

/// Where a tile starts: its first row's unpacked values, that row's index in the matrix,
/// and its first token.
struct Tile {
    values: *const u8,
    row: usize,
    t0: usize,
}

/// `out[t, at.row + r]` for `R` rows and `V` vectors of tokens from `at.t0`, in groups of
/// `G` columns; returns `R`.
///
/// # Safety
/// The CPU has the features; `at.values` holds `R` rows of `lhs.k`, tokens
/// `at.t0 .. at.t0 + 16 V` are inside `lhs.padded`, and columns `at.row .. at.row + R` are
/// the caller's.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile<const R: usize, const V: usize, const G: usize>(
    at: &Tile,
    weight_groups: &WeightGroups<'_>,
    lhs: &QuantizedLanes,
    out: &Output,
) -> usize {
    let (k, padded) = (lhs.k, lhs.padded);
    let groups = k / G;
    // SAFETY: forwarded from the caller. (No closures: they may be compiled without this
    // function's target features.)
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); V]; R];
        let mut xp = lhs.bytes.as_ptr().add(4 * at.t0);
        let mut wp = at.values;
        for g in 0..groups {
            let mut isum = [[_mm512_setzero_si512(); V]; R];
            // A loop, not unrolled: unrolled, LLVM hoists all its loads and spills the sums.
            for _ in 0..std::hint::black_box(G / 4) {
                let mut xv = [_mm512_setzero_si512(); V];
                for (v, x) in xv.iter_mut().enumerate() {
                    *x = _mm512_loadu_si512(xp.add(64 * v).cast());
                }
                for (r, sums) in isum.iter_mut().enumerate() {
                    let wb = _mm512_set1_epi32(wp.add(r * k).cast::<i32>().read_unaligned());
                    for (s, x) in sums.iter_mut().zip(&xv) {
                        *s = _mm512_dpbusd_epi32(*s, wb, *x);
                    }
                }
                xp = xp.add(4 * padded);
                wp = wp.add(4);
            }
            let lanes_at = g * padded + at.t0;
            let mut x_scales = [_mm512_setzero_ps(); V];
            let mut x_sums = [_mm512_setzero_ps(); V];
            for v in 0..V {
                x_scales[v] = _mm512_loadu_ps(lhs.scales.as_ptr().add(lanes_at + TOKEN_LANES * v));
                x_sums[v] = _mm512_loadu_ps(lhs.sums.as_ptr().add(lanes_at + TOKEN_LANES * v));
            }
            for r in 0..R {
                let (scale, bias) = weight_groups.get(at.row + r, g, groups);
                let (scale, bias) = (_mm512_set1_ps(scale), _mm512_set1_ps(bias));
                for v in 0..V {
                    let scaled = _mm512_mul_ps(_mm512_cvtepi32_ps(isum[r][v]), x_scales[v]);
                    acc[r][v] = _mm512_fmadd_ps(scaled, scale, acc[r][v]);
                    acc[r][v] = _mm512_fmadd_ps(bias, x_sums[v], acc[r][v]);
                }
            }
        }
        let mut lanes = [0.0f32; TOKEN_LANES];
        for (r, acc) in acc.iter().enumerate() {
            for (v, a) in acc.iter().enumerate() {
                _mm512_storeu_ps(lanes.as_mut_ptr(), *a);
                for (j, &value) in lanes.iter().enumerate() {
                    let t = at.t0 + TOKEN_LANES * v + j;
                    if t < out.tokens {
                        *out.ptr.add(t * out.row_stride + at.row + r) = value;
                    }
                }
            }
        }
    }
    R
}

/// `x` (`[out.tokens, out.k]`) quantised into `out` (made by [`QuantizedLanes::zeroed`]),
/// with the same values as [`QuantizedLanes::quantize`] (the same f32 steps; the conversion
/// rounds ties to even as the portable code does).
///
/// # Safety
/// The CPU has AVX-512F and BW.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn quantize_into(x: &[f32], out: &mut QuantizedLanes) {
    let (k, group, padded) = (out.k, out.group, out.padded);
    assert_eq!(x.len(), out.tokens * k, "x must be [tokens, {k}]");
    assert!(group == 16 || group == 32);
    assert!(out.bytes.len() >= k * padded && out.scales.len() >= k / group * padded);
    let (low, high) = (_mm512_set1_epi32(-127), _mm512_set1_epi32(127));
    let mut bytes = [0u8; 32];
    for (t, row) in x.chunks_exact(k).enumerate() {
        for (g, values) in row.chunks_exact(group).enumerate() {
            // SAFETY: `values` holds `group` (16 or 32) floats; `bytes` holds 32; the stores
            // stay inside `out` (asserted above).
            unsafe {
                let mut v = [_mm512_setzero_ps(); 2];
                let mut amax = _mm512_setzero_ps();
                for (h, v) in v.iter_mut().enumerate().take(group / 16) {
                    *v = _mm512_loadu_ps(values.as_ptr().add(16 * h));
                    amax = _mm512_max_ps(amax, _mm512_abs_ps(*v));
                }
                let (scale, inverse) = scale_and_inverse(_mm512_reduce_max_ps(amax));
                let inverse = _mm512_set1_ps(inverse);
                let mut sum = 0;
                for (h, v) in v.iter().enumerate().take(group / 16) {
                    let q = _mm512_cvtps_epi32(_mm512_mul_ps(*v, inverse));
                    let q = _mm512_min_epi32(_mm512_max_epi32(q, low), high);
                    sum += _mm512_reduce_add_epi32(q);
                    _mm_storeu_si128(bytes.as_mut_ptr().add(16 * h).cast(), _mm512_cvtepi32_epi8(q));
                }
                for d in 0..group / 4 {
                    let word = bytes.as_ptr().add(4 * d).cast::<u32>().read_unaligned();
                    let at = ((g * group / 4 + d) * padded + t) * 4;
                    out.bytes.as_mut_ptr().add(at).cast::<u32>().write_unaligned(word);
                }
                out.scales[g * padded + t] = scale;
                out.sums[g * padded + t] = scale * sum as f32;
            }
        }
    }
}
