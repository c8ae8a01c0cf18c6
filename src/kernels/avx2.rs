//! The AVX2 + FMA packed matmul for small token counts (decode): widen one 32-element block
//! into four vectors, then multiply-add it against up to eight tokens.

use std::arch::x86_64::*;
use std::ops::Range;

use super::format_codes::{BYTES, FIVE_BIT, HALF_SCALED_BYTES, NIBBLES, OFFSET_BYTES, tiles};
use super::packed::{BLOCK, BlockFormat, FIVE_BIT_BYTES, PackedMatrix};
use super::tiling::{assert_blocks_exist, assert_row_kernel_bounds, for_each_tile};

/// Output rows `rows` for all tokens into `out` (`[rows.len(), tokens]`).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn rows_kernel(x: &[f32], tokens: usize, w: &PackedMatrix, rows: Range<usize>, out: &mut [f32]) {
    assert_row_kernel_bounds(x, tokens, w, &rows, out);
    for_each_tile(tokens, rows, out, |r, t0, n, o| {
        // SAFETY: the assert above bounds every row, block and token the tile reads.
        unsafe { dispatch_tile(w, r, x, t0, n, o) }
    });
}

/// Row `row` of `w` widened to f32 into `out[..w.cols]`.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn widen_row(w: &PackedMatrix, row: usize, out: &mut [f32]) {
    let bpr = w.blocks_per_row();
    assert!(out.len() >= w.cols && row < w.rows);
    assert_blocks_exist(w);
    for b in 0..bpr {
        // SAFETY: the asserts above bound the block and the destination.
        unsafe {
            let block = row * bpr + b;
            let values = match w.format {
                BlockFormat::Nibbles => block_vectors::<NIBBLES>(w, block),
                BlockFormat::Bytes => block_vectors::<BYTES>(w, block),
                BlockFormat::FiveBit => block_vectors::<FIVE_BIT>(w, block),
                BlockFormat::HalfScaledBytes => block_vectors::<HALF_SCALED_BYTES>(w, block),
                BlockFormat::OffsetBytes => block_vectors::<OFFSET_BYTES>(w, block),
            };
            let dst = out.as_mut_ptr().add(b * BLOCK);
            for (i, v) in values.into_iter().enumerate() {
                _mm256_storeu_ps(dst.add(8 * i), v);
            }
        }
    }
}

/// [`tile`] for a tile of `n` tokens.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `n` is 1 to 8 and the arguments meet [`tile`]'s bounds.
#[target_feature(enable = "avx2,fma")]
unsafe fn dispatch_tile(w: &PackedMatrix, r: usize, x: &[f32], t0: usize, n: usize, o: &mut [f32]) {
    // SAFETY: forwarded from the caller.
    unsafe { tiles!(w, r, x, t0, n, o; 1 2 3 4 5 6 7 8) }
}

/// `out[t] = x[t0 + t] · W[row]` for `t < N`, `W` in the format coded `FORMAT`.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `row` is a row of `w`, `x` holds tokens `t0 .. t0 + N` of
/// `w.cols` values each, and `out` holds at least `N` values.
#[target_feature(enable = "avx2,fma")]
unsafe fn tile<const N: usize, const FORMAT: u8>(w: &PackedMatrix, row: usize, x: &[f32], t0: usize, out: &mut [f32]) {
    let bpr = w.blocks_per_row();
    let cols = w.cols;
    // SAFETY: `rows_kernel` checked that rows, blocks and tokens are in bounds.
    unsafe {
        // Two accumulator chains per token hide the FMA latency for small tiles; from four
        // tokens up the tokens' chains are enough, and a second set would spill registers.
        let second = usize::from(N < 4);
        let mut acc = [[_mm256_setzero_ps(); 2]; N];
        let xp = x.as_ptr().add(t0 * cols);
        for b in 0..bpr {
            let block = row * bpr + b;
            let wv = block_vectors::<FORMAT>(w, block);
            for (t, acc) in acc.iter_mut().enumerate() {
                let p = xp.add(t * cols + b * BLOCK);
                acc[0] = _mm256_fmadd_ps(wv[0], _mm256_loadu_ps(p), acc[0]);
                acc[second] = _mm256_fmadd_ps(wv[1], _mm256_loadu_ps(p.add(8)), acc[second]);
                acc[0] = _mm256_fmadd_ps(wv[2], _mm256_loadu_ps(p.add(16)), acc[0]);
                acc[second] = _mm256_fmadd_ps(wv[3], _mm256_loadu_ps(p.add(24)), acc[second]);
            }
        }
        for (o, acc) in out.iter_mut().zip(&acc) {
            *o = horizontal_sum(_mm256_add_ps(acc[0], acc[1]));
        }
    }
}

/// A 4-bit block as four vectors of eight: `q * scale + min`.
///
/// # Safety
/// The CPU must support AVX2 and FMA, and `block` is a block of `w`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn nibbles(w: &PackedMatrix, block: usize) -> [__m256; 4] {
    // SAFETY: the caller bounds `block`.
    unsafe {
        let scale = _mm256_set1_ps(*w.scales.get_unchecked(block));
        let min = _mm256_set1_ps(*w.mins.get_unchecked(block));
        let q = _mm_loadu_si128(w.quants.as_ptr().add(block * (BLOCK / 2)).cast());
        let mask = _mm_set1_epi8(0x0f);
        let low = _mm_and_si128(q, mask);
        let high = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
        [
            widen_unsigned(low, scale, min),
            widen_unsigned(_mm_srli_si128(low, 8), scale, min),
            widen_unsigned(high, scale, min),
            widen_unsigned(_mm_srli_si128(high, 8), scale, min),
        ]
    }
}

/// A block in the format coded `FORMAT` as four vectors of eight.
///
/// # Safety
/// The CPU must support AVX2 and FMA, and `block` is a block of `w`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn block_vectors<const FORMAT: u8>(w: &PackedMatrix, block: usize) -> [__m256; 4] {
    // SAFETY: the caller bounds `block`. (No closures here: they may be compiled without
    // this function's target features, which makes every intrinsic in them a call.)
    unsafe {
        if FORMAT == NIBBLES {
            return nibbles(w, block);
        }
        let [a, b, c, d] = if FORMAT == FIVE_BIT {
            widen_signed_bytes(five_bit_bytes(w, block))
        } else {
            byte_vectors(w, block)
        };
        let scales = w.scales.as_ptr();
        match FORMAT {
            BYTES | FIVE_BIT => {
                let scale = _mm256_set1_ps(*scales.add(block));
                [
                    _mm256_mul_ps(a, scale),
                    _mm256_mul_ps(b, scale),
                    _mm256_mul_ps(c, scale),
                    _mm256_mul_ps(d, scale),
                ]
            }
            HALF_SCALED_BYTES => {
                let low = _mm256_set1_ps(*scales.add(2 * block));
                let high = _mm256_set1_ps(*scales.add(2 * block + 1));
                [
                    _mm256_mul_ps(a, low),
                    _mm256_mul_ps(b, low),
                    _mm256_mul_ps(c, high),
                    _mm256_mul_ps(d, high),
                ]
            }
            _ => {
                let low = _mm256_set1_ps(*scales.add(2 * block));
                let high = _mm256_set1_ps(*scales.add(2 * block + 1));
                let min = _mm256_set1_ps(*w.mins.get_unchecked(block));
                [
                    _mm256_fmadd_ps(a, low, min),
                    _mm256_fmadd_ps(b, low, min),
                    _mm256_fmadd_ps(c, high, min),
                    _mm256_fmadd_ps(d, high, min),
                ]
            }
        }
    }
}

/// A byte block's 32 signed values as four vectors of eight, unscaled.
///
/// # Safety
/// The CPU must support AVX2 and FMA, and `block` is a block of `w`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn byte_vectors(w: &PackedMatrix, block: usize) -> [__m256; 4] {
    // SAFETY: the caller bounds `block`.
    unsafe { widen_signed_bytes(_mm256_loadu_si256(w.quants.as_ptr().add(block * BLOCK).cast())) }
}

/// A five-bit block's 32 values `q - 16` as signed bytes, in element order (ggml's trick:
/// each byte of the high-bit word is spread over eight bytes, one bit tested per byte, and
/// a nibble whose high bit is clear gets the top bits `0xf0`, which makes it `q - 16`).
///
/// # Safety
/// The CPU must support AVX2 and FMA, and `block` is a block of `w`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn five_bit_bytes(w: &PackedMatrix, block: usize) -> __m256i {
    // SAFETY: the caller bounds `block`.
    unsafe {
        let q = w.quants.as_ptr().add(block * FIVE_BIT_BYTES);
        let high_bits = i32::from_le_bytes(q.cast::<[u8; 4]>().read_unaligned());
        let packed = _mm_loadu_si128(q.add(4).cast());
        let mask = _mm_set1_epi8(0x0f);
        let nibbles = _mm256_set_m128i(
            _mm_and_si128(_mm_srli_epi16(packed, 4), mask),
            _mm_and_si128(packed, mask),
        );
        // Byte `j` of the result: byte `j / 8` of the word, then all ones iff bit `j % 8`.
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(high_bits),
            _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0),
        );
        let all_but_own_bit = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
        let set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, all_but_own_bit), _mm256_set1_epi8(-1));
        _mm256_or_si256(nibbles, _mm256_andnot_si256(set, _mm256_set1_epi8(0xf0u8 as i8)))
    }
}

/// 32 signed bytes as four vectors of eight f32.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn widen_signed_bytes(q: __m256i) -> [__m256; 4] {
    let low = _mm256_castsi256_si128(q);
    let high = _mm256_extracti128_si256(q, 1);
    [
        widen_signed(low),
        widen_signed(_mm_srli_si128(low, 8)),
        widen_signed(high),
        widen_signed(_mm_srli_si128(high, 8)),
    ]
}

/// The low eight unsigned bytes of `v` as `q * scale + min`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn widen_unsigned(v: __m128i, scale: __m256, min: __m256) -> __m256 {
    _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)), scale, min)
}

/// The low eight signed bytes of `v` as f32.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn widen_signed(v: __m128i) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))
}

#[inline]
#[target_feature(enable = "avx2,fma")]
fn horizontal_sum(v: __m256) -> f32 {
    let sum = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
    let sum = _mm_add_ss(sum, _mm_shuffle_ps(sum, sum, 1));
    _mm_cvtss_f32(sum)
}
