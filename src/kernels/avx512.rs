//! The AVX-512F packed matmul for small token counts (decode): one 32-element block is two
//! 16-lane vectors (a nibble block's low and high halves widen straight from 16 bytes), and
//! is multiplied into up to eight tokens' accumulators.

use std::arch::x86_64::*;
use std::ops::Range;

use super::format_codes::{BYTES, FIVE_BIT, HALF_SCALED_BYTES, NIBBLES, OFFSET_BYTES, format_of, tiles};
use super::packed::{BLOCK, BlockFormat, FIVE_BIT_BYTES, PackedMatrix};
use super::tiling::{assert_blocks_exist, assert_row_kernel_bounds, for_each_tile};

/// Output rows `rows` for all tokens into `out` (`[rows.len(), tokens]`).
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn rows_kernel(x: &[f32], tokens: usize, w: &PackedMatrix, rows: Range<usize>, out: &mut [f32]) {
    assert_row_kernel_bounds(x, tokens, w, &rows, out);
    if tokens == 1 {
        // SAFETY: the assert above bounds every row, block and the token.
        unsafe {
            match w.format {
                BlockFormat::Nibbles => one_token_rows::<NIBBLES>(w, x, rows, out),
                BlockFormat::Bytes => one_token_rows::<BYTES>(w, x, rows, out),
                BlockFormat::FiveBit => one_token_rows::<FIVE_BIT>(w, x, rows, out),
                BlockFormat::HalfScaledBytes => one_token_rows::<HALF_SCALED_BYTES>(w, x, rows, out),
                BlockFormat::OffsetBytes => one_token_rows::<OFFSET_BYTES>(w, x, rows, out),
            }
        }
        return;
    }
    for_each_tile(tokens, rows, out, |r, t0, n, o| {
        // SAFETY: the assert above bounds every row, block and token the tile reads.
        unsafe { dispatch_tile(w, r, x, t0, n, o) }
    });
}

/// Row `row` of `w` widened to f32 into `out[..w.cols]`.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn widen_row(w: &PackedMatrix, row: usize, out: &mut [f32]) {
    assert!(out.len() >= w.cols && row < w.rows);
    assert_blocks_exist(w);
    // SAFETY: the asserts above bound the row's blocks and the destination.
    unsafe {
        match w.format {
            BlockFormat::Nibbles => widen_row_as::<NIBBLES>(w, row, out),
            BlockFormat::Bytes => widen_row_as::<BYTES>(w, row, out),
            BlockFormat::FiveBit => widen_row_as::<FIVE_BIT>(w, row, out),
            BlockFormat::HalfScaledBytes => widen_row_as::<HALF_SCALED_BYTES>(w, row, out),
            BlockFormat::OffsetBytes => widen_row_as::<OFFSET_BYTES>(w, row, out),
        }
    }
}

/// [`widen_row`] in the format coded `FORMAT`.
///
/// # Safety
/// The CPU must support AVX-512F; `row` is a row of `w` and `out` holds `w.cols` values.
#[target_feature(enable = "avx512f")]
unsafe fn widen_row_as<const FORMAT: u8>(w: &PackedMatrix, row: usize, out: &mut [f32]) {
    let bpr = w.blocks_per_row();
    for b in 0..bpr {
        // SAFETY: the caller bounds the block and the destination.
        unsafe {
            let [low, high] = block_values::<FORMAT>(w, row * bpr + b);
            let dst = out.as_mut_ptr().add(b * BLOCK);
            _mm512_storeu_ps(dst, low);
            _mm512_storeu_ps(dst.add(16), high);
        }
    }
}

/// [`tile`] for a tile of `n` tokens.
///
/// # Safety
/// The CPU must support AVX-512F; `n` is 1 to 8 and the arguments meet [`tile`]'s bounds.
#[target_feature(enable = "avx512f")]
unsafe fn dispatch_tile(w: &PackedMatrix, r: usize, x: &[f32], t0: usize, n: usize, o: &mut [f32]) {
    // SAFETY: forwarded from the caller.
    unsafe { tiles!(w, r, x, t0, n, o; 1 2 3 4 5 6 7 8) }
}

/// `out[t] = x[t0 + t] · W[row]` for `t < N`, `W` in the format coded `FORMAT`.
///
/// # Safety
/// The CPU must support AVX-512F; `row` is a row of `w`, `x` holds tokens `t0 .. t0 + N` of
/// `w.cols` values each, and `out` holds at least `N` values.
#[target_feature(enable = "avx512f")]
unsafe fn tile<const N: usize, const FORMAT: u8>(w: &PackedMatrix, row: usize, x: &[f32], t0: usize, out: &mut [f32]) {
    let bpr = w.blocks_per_row();
    let cols = w.cols;
    // SAFETY: `rows_kernel` checked that rows, blocks and tokens are in bounds.
    unsafe {
        // Two accumulator chains per token: a block's halves go to separate chains, which
        // hides the FMA latency for small tiles.
        let mut acc = [[_mm512_setzero_ps(); 2]; N];
        let xp = x.as_ptr().add(t0 * cols);
        for b in 0..bpr {
            let [low, high] = block_values::<FORMAT>(w, row * bpr + b);
            for (t, acc) in acc.iter_mut().enumerate() {
                let p = xp.add(t * cols + b * BLOCK);
                acc[0] = _mm512_fmadd_ps(low, _mm512_loadu_ps(p), acc[0]);
                acc[1] = _mm512_fmadd_ps(high, _mm512_loadu_ps(p.add(16)), acc[1]);
            }
        }
        for (o, acc) in out.iter_mut().zip(&acc) {
            *o = _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
        }
    }
}

/// Rows sharing one pass over the token's activations in [`one_token_rows`].
const ROW_GROUP: usize = 4;
/// How far ahead of the row group [`one_token_rows`] prefetches its quantised values: the
/// next group's, so their cache misses overlap this group's arithmetic (a one-token step
/// waits on memory, and the hardware prefetcher alone left the loads stalling).
const PREFETCH_GROUPS: usize = 2;

/// One token (a one-stream decode step), [`ROW_GROUP`] rows at a time: each activation vector
/// is loaded once for the group, and the group's eight independent FMA chains hide the FMA
/// latency that bounds a single row's two. Each row's sums are formed in the same order as
/// [`tile`]'s, so the results equal it bit for bit.
///
/// # Safety
/// The CPU must support AVX-512F; the caller bounds `rows`, their blocks, `x` and `out`.
#[target_feature(enable = "avx512f")]
unsafe fn one_token_rows<const FORMAT: u8>(w: &PackedMatrix, x: &[f32], rows: Range<usize>, out: &mut [f32]) {
    let bpr = w.blocks_per_row();
    let base = rows.start;
    let mut r = rows.start;
    let quant_bytes = format_of(FORMAT).quant_bytes();
    // The group's quants are `group_bytes` contiguous bytes; the prefetch stays inside `rows`.
    let group_bytes = ROW_GROUP * bpr * quant_bytes;
    let quants_end = rows.end * bpr * quant_bytes;
    // SAFETY: forwarded from the caller; prefetches never fault, and stay inside the matrix.
    unsafe {
        while r + ROW_GROUP <= rows.end {
            let mut acc = [[_mm512_setzero_ps(); 2]; ROW_GROUP];
            let ahead = (r * bpr * quant_bytes + PREFETCH_GROUPS * group_bytes).min(quants_end);
            let ahead_end = (ahead + group_bytes).min(quants_end);
            let mut line = ahead;
            for b in 0..bpr {
                if line < ahead_end {
                    _mm_prefetch::<_MM_HINT_T0>(w.quants.as_ptr().add(line).cast());
                    _mm_prefetch::<_MM_HINT_T0>(w.quants.as_ptr().add(line + 64).cast());
                    line += 128;
                }
                let p = x.as_ptr().add(b * BLOCK);
                let (x_low, x_high) = (_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16)));
                for (i, acc) in acc.iter_mut().enumerate() {
                    let [low, high] = block_values::<FORMAT>(w, (r + i) * bpr + b);
                    acc[0] = _mm512_fmadd_ps(low, x_low, acc[0]);
                    acc[1] = _mm512_fmadd_ps(high, x_high, acc[1]);
                }
            }
            for (i, acc) in acc.iter().enumerate() {
                *out.get_unchecked_mut(r - base + i) = _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
            }
            r += ROW_GROUP;
        }
        for r in r..rows.end {
            tile::<1, FORMAT>(w, r, x, 0, &mut out[r - base..][..1]);
        }
    }
}

/// A block in the format coded `FORMAT` (which must be `w.format`'s) as two vectors of
/// sixteen.
///
/// # Safety
/// The CPU must support AVX-512F, and `block` is a block of `w`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn block_values<const FORMAT: u8>(w: &PackedMatrix, block: usize) -> [__m512; 2] {
    // SAFETY: the caller bounds `block`. (No closures here: they may be compiled without
    // this function's target features, which makes every intrinsic in them a call.)
    unsafe {
        let scales = w.scales.as_ptr();
        match format_of(FORMAT) {
            BlockFormat::Nibbles => {
                // `q * scale + min`: low nibbles are elements 0..16, high nibbles 16..32. The
                // block's sixteen possible values form a table (one FMA), and each half is a
                // lane permute of it indexed by the nibble: `vpermps` reads only an index's
                // low four bits, so the low half needs no mask. Three shuffle-port operations
                // and one FMA a block, where masking, widening and converting each half took
                // nine; the values are the same FMA's, bit for bit.
                let scale = _mm512_set1_ps(*scales.add(block));
                let min = _mm512_set1_ps(*w.mins.get_unchecked(block));
                let table = _mm512_fmadd_ps(nibble_values(), scale, min);
                let bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(w.quants.as_ptr().add(block * (BLOCK / 2)).cast()));
                let low = _mm512_permutexvar_ps(bytes, table);
                let high = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table);
                [low, high]
            }
            BlockFormat::Bytes => {
                // `q * scale`, signed bytes.
                let [low, high] = byte_halves(w, block);
                let scale = _mm512_set1_ps(*scales.add(block));
                [_mm512_mul_ps(low, scale), _mm512_mul_ps(high, scale)]
            }
            BlockFormat::FiveBit => {
                // `(q - 16) * scale` (Q5_0): as for nibbles, the values are lane permutes of
                // tables, two here: `q - 16` for q below 16 and at or above it. Each half
                // permutes the below-16 table by its nibbles, then, in the lanes whose high
                // bit (a mask register straight from the block's `u32`) is set, the other.
                // Each table entry is an exact product, as gguf-py's is.
                let q = w.quants.as_ptr().add(block * FIVE_BIT_BYTES);
                let high_bits = u32::from_le_bytes(q.cast::<[u8; 4]>().read_unaligned());
                let scale = _mm512_set1_ps(*scales.add(block));
                let below = _mm512_mul_ps(_mm512_sub_ps(nibble_values(), _mm512_set1_ps(16.0)), scale);
                let above = _mm512_mul_ps(nibble_values(), scale);
                let bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(q.add(4).cast()));
                let high_nibbles = _mm512_srli_epi32(bytes, 4);
                let low =
                    _mm512_mask_permutexvar_ps(_mm512_permutexvar_ps(bytes, below), high_bits as u16, bytes, above);
                let high = _mm512_mask_permutexvar_ps(
                    _mm512_permutexvar_ps(high_nibbles, below),
                    (high_bits >> 16) as u16,
                    high_nibbles,
                    above,
                );
                [low, high]
            }
            BlockFormat::HalfScaledBytes => {
                // `q * scale[half]` (Q6_K).
                let [low, high] = byte_halves(w, block);
                [
                    _mm512_mul_ps(low, _mm512_set1_ps(*scales.add(2 * block))),
                    _mm512_mul_ps(high, _mm512_set1_ps(*scales.add(2 * block + 1))),
                ]
            }
            BlockFormat::OffsetBytes => {
                // `q * scale[half] + min` (Q5_K, mixed stacks).
                let [low, high] = byte_halves(w, block);
                let min = _mm512_set1_ps(*w.mins.get_unchecked(block));
                [
                    _mm512_fmadd_ps(low, _mm512_set1_ps(*scales.add(2 * block)), min),
                    _mm512_fmadd_ps(high, _mm512_set1_ps(*scales.add(2 * block + 1)), min),
                ]
            }
        }
    }
}

/// A byte block's 32 signed values as two vectors of sixteen, unscaled.
///
/// # Safety
/// The CPU must support AVX-512F, and `block` is a block of `w`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn byte_halves(w: &PackedMatrix, block: usize) -> [__m512; 2] {
    // SAFETY: the caller bounds `block`.
    unsafe {
        let p = w.quants.as_ptr().add(block * BLOCK);
        [
            widen_signed(_mm_loadu_si128(p.cast())),
            widen_signed(_mm_loadu_si128(p.add(16).cast())),
        ]
    }
}

/// The sixteen nibble values 0.0 to 15.0, lane `i` holding `i`.
#[inline]
#[target_feature(enable = "avx512f")]
fn nibble_values() -> __m512 {
    _mm512_setr_ps(
        0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0,
    )
}

/// Sixteen signed bytes as f32.
#[inline]
#[target_feature(enable = "avx512f")]
fn widen_signed(v: __m128i) -> __m512 {
    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v))
}
