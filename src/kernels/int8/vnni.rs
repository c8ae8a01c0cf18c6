//! The int8 activation kernel on AVX-512 VNNI: `vpdpbusd` multiplies a row's four weight
//! bytes (broadcast) by 16 tokens × 4 columns of activation bytes, one operand unsigned and
//! the other signed (`lanes.rs` says which), and adds each token's four products into
//! its i32 lane. A register tile of 6 rows × 32 tokens keeps 12
//! integer sums (one group of columns) and 12 f32 accumulators; each group's sums are scaled
//! into the f32 ones as `lanes.rs` states. The results equal the portable kernel's bit
//! for bit (the integer sums are exact and the f32 steps are the same, in the same order).

use std::arch::x86_64::*;
use std::ops::Range;

use super::layout::{
    Int8Panel, Output, PANEL_ROWS, QuantizedLanes, TOKEN_LANES, WeightGroups, group_of, scale_and_inverse,
    signed_weights,
};
use crate::kernels::packed::{BLOCK, BlockFormat, PackedMatrix};

/// Rows of the large tile.
const TILE_ROWS: usize = 6;

/// One panel: tokens in chunks of two vectors (one for the last chunk when one is left),
/// rows in groups of [`TILE_ROWS`], then of one. `values` holds the panel's rows: signed
/// bytes as stored, with `sums` the matrix's [`group_sums`](super::layout::group_sums),
/// or an unpacked [`Int8Panel`]'s unsigned bytes, without.
///
/// Each chunk's results go to a [`Stage`] in L1 first, then to `out` a token's row segment
/// at a time: written straight from the tiles, each value went to another output row (a
/// megabyte apart for Gemma 3's 262144-wide head), and those scattered stores, each a
/// cache miss, took half the time of the head's matmul.
///
/// # Safety
/// The CPU has AVX-512F, BW and VNNI; `values` holds rows `rows` of `w` (`rows.len()` ×
/// `w.cols` bytes), and no one else writes columns `rows` of `out`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn panel(
    values: &[u8],
    sums: Option<&[i16]>,
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
    let signed = signed_weights(w.format);
    assert_eq!(
        (signed, signed),
        (sums.is_some(), lhs.biased),
        "signed weights take biased activations and sums"
    );
    assert!(sums.is_none_or(|s| s.len() >= w.rows * groups));
    assert!(values.len() >= rows.len() * k && rows.end <= w.rows && rows.len() <= PANEL_ROWS);
    assert!(lhs.bytes.len() >= k * lhs.padded && lhs.scales.len() >= groups * lhs.padded);
    assert!(rows.end <= out.row_stride && lhs.tokens == out.tokens && lhs.padded.is_multiple_of(TOKEN_LANES));
    let weights = Weights {
        groups: WeightGroups::of(w),
        sums: sums.unwrap_or(&[]),
    };
    let mut stage = Stage([[0.0; PANEL_ROWS]; 2 * TOKEN_LANES]);
    let mut t0 = 0;
    while t0 < lhs.padded {
        let two = lhs.padded - t0 >= 2 * TOKEN_LANES;
        let mut i = 0;
        while i < rows.len() {
            let big = rows.len() - i >= TILE_ROWS;
            let at = Tile {
                values: values[i * k..].as_ptr(),
                row: rows.start + i,
                stage_row: i,
                t0,
            };
            // SAFETY: rows `i ..` of the panel, the chunk's tokens (inside `padded`) and
            // the stage's rows `i ..` are in bounds (asserted above).
            unsafe {
                i += if signed {
                    tile_sized::<true>(two, big, group, &at, &weights, lhs, &mut stage)
                } else {
                    tile_sized::<false>(two, big, group, &at, &weights, lhs, &mut stage)
                };
            }
        }
        let chunk = if two { 2 * TOKEN_LANES } else { TOKEN_LANES };
        for (t, staged) in (t0..lhs.tokens.min(t0 + chunk)).zip(&stage.0) {
            // SAFETY: `t < tokens` and columns `rows` lie inside the row (asserted above);
            // no one else writes them.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    staged.as_ptr(),
                    out.ptr.add(t * out.row_stride + rows.start),
                    rows.len(),
                )
            };
        }
        t0 += chunk;
    }
}

/// A chunk's results, `[token in the chunk][row in the panel]`, 6 KiB.
#[repr(align(64))]
struct Stage([[f32; PANEL_ROWS]; 2 * TOKEN_LANES]);

/// The tile for a chunk of two vectors of tokens or one (`two`), six rows or one (`big`),
/// and groups of 32 columns or 16; returns the rows done.
///
/// # Safety
/// As [`tile`]'s.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile_sized<const S: bool>(
    two: bool,
    big: bool,
    group: usize,
    at: &Tile,
    weights: &Weights<'_>,
    lhs: &QuantizedLanes,
    stage: &mut Stage,
) -> usize {
    // SAFETY: forwarded from the caller.
    unsafe {
        match (two, big, group == 32) {
            (true, true, true) => tile::<TILE_ROWS, 2, 32, S>(at, weights, lhs, stage),
            (true, true, false) => tile::<TILE_ROWS, 2, 16, S>(at, weights, lhs, stage),
            (true, false, true) => tile::<1, 2, 32, S>(at, weights, lhs, stage),
            (true, false, false) => tile::<1, 2, 16, S>(at, weights, lhs, stage),
            (false, true, true) => tile::<TILE_ROWS, 1, 32, S>(at, weights, lhs, stage),
            (false, true, false) => tile::<TILE_ROWS, 1, 16, S>(at, weights, lhs, stage),
            (false, false, true) => tile::<1, 1, 32, S>(at, weights, lhs, stage),
            (false, false, false) => tile::<1, 1, 16, S>(at, weights, lhs, stage),
        }
    }
}

/// A matrix's per-group scales and biases, and for signed weights each (row, group)'s sum
/// of values (empty for unpacked panels).
struct Weights<'a> {
    groups: WeightGroups<'a>,
    sums: &'a [i16],
}

/// Where a tile starts: its first row's values, that row's index in the matrix and in the
/// stage, and its first token.
struct Tile {
    values: *const u8,
    row: usize,
    stage_row: usize,
    t0: usize,
}

/// Rows `at.row ..` `+ R` for `V` vectors of tokens from `at.t0`, in groups of `G` columns,
/// of signed weights against biased activations (`S`) or of unsigned ones against signed
/// activations, into the stage's rows `at.stage_row ..`; returns `R`.
///
/// # Safety
/// The CPU has the features; `at.values` holds `R` rows of `lhs.k`, tokens
/// `at.t0 .. at.t0 + 16 V` are inside `lhs.padded`, and `at.stage_row + R <= PANEL_ROWS`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile<const R: usize, const V: usize, const G: usize, const S: bool>(
    at: &Tile,
    weights: &Weights<'_>,
    lhs: &QuantizedLanes,
    stage: &mut Stage,
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
            // Signed weights are read from the matrix: the next tile's rows (the `R · k`
            // bytes after these) are prefetched, a share each group, since the hardware
            // prefetcher alone left the kernel waiting on them (Gemma 3's head: 168 MB a
            // step). An unpacked panel is in cache already. A hint, so no bounds needed.
            if S {
                let ahead = at.values.wrapping_add(R * k + g * R * G);
                for line in (0..R * G).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line).cast());
                }
            }
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
                        *s = if S {
                            _mm512_dpbusd_epi32(*s, *x, wb)
                        } else {
                            _mm512_dpbusd_epi32(*s, wb, *x)
                        };
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
                let (scale, bias) = weights.groups.get(at.row + r, g, groups);
                let (scale, bias) = (_mm512_set1_ps(scale), _mm512_set1_ps(bias));
                // The activations' bias of 128 added `128 · Σ u` to each sum: taken away
                // exactly (|Σ u| ≤ 32 · 128, so the product fits an i32).
                let excess = if S {
                    _mm512_set1_epi32(i32::from(*weights.sums.get_unchecked((at.row + r) * groups + g)) << 7)
                } else {
                    _mm512_setzero_si512()
                };
                for v in 0..V {
                    let isum = if S {
                        _mm512_sub_epi32(isum[r][v], excess)
                    } else {
                        isum[r][v]
                    };
                    let scaled = _mm512_mul_ps(_mm512_cvtepi32_ps(isum), x_scales[v]);
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
                    *stage
                        .0
                        .get_unchecked_mut(TOKEN_LANES * v + j)
                        .get_unchecked_mut(at.stage_row + r) = value;
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
    let flip = _mm_set1_epi8(out.flip() as i8);
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
                    let q = _mm_xor_si128(_mm512_cvtepi32_epi8(q), flip);
                    _mm_storeu_si128(bytes.as_mut_ptr().add(16 * h).cast(), q);
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

/// Rows `rows` of a nibble-format `w` unpacked into `panel`, as [`Int8Panel::fill`] does,
/// a block at a time in vector registers: the low and high nibbles of 16 bytes, then Q5_0's
/// fifth bits added under a mask made of its 32 high bits.
///
/// # Safety
/// The CPU has AVX-512F, BW and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn fill(panel: &mut Int8Panel, w: &PackedMatrix, rows: Range<usize>) {
    let qb = w.format.quant_bytes();
    let (nibble, fifth) = (_mm_set1_epi8(0x0f), _mm256_set1_epi8(0x10));
    let five_bit = w.format == BlockFormat::FiveBit;
    for (q, dst) in panel.blocks(w, rows) {
        // SAFETY: `q` holds a block (16 bytes of nibbles after Q5_0's 4 of high bits) and
        // `dst` 32 bytes.
        unsafe {
            let nibbles = _mm_loadu_si128(q.as_ptr().add(qb - BLOCK / 2).cast());
            let low = _mm_and_si128(nibbles, nibble);
            let high = _mm_and_si128(_mm_srli_epi16::<4>(nibbles), nibble);
            let mut values = _mm256_set_m128i(high, low);
            if five_bit {
                let bits = q.as_ptr().cast::<u32>().read_unaligned();
                // Adding 16 to a nibble sets its fifth bit.
                values = _mm256_mask_add_epi8(values, u32::from_le(bits), values, fifth);
            }
            _mm256_storeu_si256(dst.as_mut_ptr().cast(), values);
        }
    }
}
