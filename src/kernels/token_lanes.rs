//! The many-token packed matmul (batched decode at 16 or more streams, prefill) with the
//! tokens in the vector lanes: the activations are transposed once a call (`[cols, tokens]`),
//! each panel of weight rows is widened to f32 once, and a register tile of rows × 32 tokens
//! (AVX-512) or rows × 16 tokens (AVX2) multiplies each broadcast weight into the token lanes.
//!
//! The `gemm` crate ran this product before and re-packed both operands for every 32-row
//! panel: at 32 tokens its packing took about 60 % of its micro-kernel's time
//! (docs/08-performance.md). Here nothing is packed but the one transpose; each (row, token)
//! sum runs over the columns in order, in f32. The portable path keeps the `gemm` crate.

use std::ops::Range;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use rayon::prelude::*;

use super::dispatch::KernelPath;
use super::packed::PackedMatrix;
use super::widen::widen_row_on;

/// Rows widened at a time: one unit of parallel work (48 × 2048 f32 is 384 KiB, in L2).
const PANEL_ROWS: usize = 48;

/// `x · Wᵀ` as `[tokens, w.rows]` on `path`'s token-lane kernel; `None` on the portable
/// path, which has none (the caller runs the `gemm` crate instead).
///
/// # Shapes
/// - x: `[tokens, w.cols]`
/// - output: `[tokens, w.rows]`
pub(super) fn matmul_token_lanes(path: KernelPath, x: &[f32], tokens: usize, w: &PackedMatrix) -> Option<Vec<f32>> {
    let lanes = match path {
        KernelPath::Avx512 => 16,
        KernelPath::Avx2 => 8,
        KernelPath::Portable => return None,
    };
    assert!(path.available(), "this CPU cannot run the {} kernels", path.name());
    assert_eq!(x.len(), tokens * w.cols, "x must be [tokens, {}]", w.cols);
    let k = w.cols;
    let padded = tokens.next_multiple_of(lanes);
    let xt = transposed(x, tokens, k, padded);
    let mut y = vec![0.0f32; tokens * w.rows];
    let out = Output {
        ptr: y.as_mut_ptr(),
        tokens,
        row_stride: w.rows,
    };
    (0..w.rows.div_ceil(PANEL_ROWS)).into_par_iter().for_each(|p| {
        PANEL.with_borrow_mut(|panel| {
            super::scratch::resize_counted(panel, PANEL_ROWS * k, 0.0);
            let rows = p * PANEL_ROWS..((p + 1) * PANEL_ROWS).min(w.rows);
            for (i, r) in rows.clone().enumerate() {
                widen_row_on(path, w, r, &mut panel[i * k..(i + 1) * k]);
            }
            let lhs = Lanes { xt: &xt, k, padded };
            // SAFETY: the CPU runs `path` (asserted above); `panel` holds `rows.len()` rows of
            // `k`, `xt` is `[k, padded]`, and this panel alone writes columns `rows` of `y`,
            // which outlives the parallel loop.
            unsafe { run_panel(path, &panel[..rows.len() * k], rows, &lhs, &out) }
        })
    });
    Some(y)
}

thread_local! {
    /// Each worker's widened panel, kept between calls (fresh pages cost a fault each).
    static PANEL: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Columns of `x` one transpose task moves: its reads are one cache line of each token's row,
/// its writes as many sequential streams, all in L1.
const TRANSPOSE_COLS: usize = 16;
/// Elements below which a transpose task is not worth a thread.
const TRANSPOSE_MIN_TASK: usize = 1 << 15;

/// `x` (`[tokens, k]`) as `[k, padded]`, the tokens past `tokens` zero. In blocks of
/// [`TRANSPOSE_COLS`] columns, in parallel: an element-by-element transpose wrote every value
/// to another cache line, on one thread, and took 13 % of a 512-token prefill.
fn transposed(x: &[f32], tokens: usize, k: usize, padded: usize) -> Vec<f32> {
    let mut xt = vec![0.0f32; k * padded];
    let block = TRANSPOSE_COLS * padded;
    let min_blocks = TRANSPOSE_MIN_TASK.div_ceil(TRANSPOSE_COLS * tokens.max(1));
    xt.par_chunks_mut(block)
        .with_min_len(min_blocks)
        .enumerate()
        .for_each(|(b, out)| {
            let (c0, cols) = (b * TRANSPOSE_COLS, out.len() / padded);
            for (t, row) in x.chunks_exact(k).take(tokens).enumerate() {
                for (c, &v) in row[c0..c0 + cols].iter().enumerate() {
                    out[c * padded + t] = v;
                }
            }
        });
    xt
}

/// The transposed activations.
struct Lanes<'a> {
    xt: &'a [f32],
    k: usize,
    padded: usize,
}

/// The `[tokens, row_stride]` output, shared by panels that write disjoint columns.
struct Output {
    ptr: *mut f32,
    tokens: usize,
    row_stride: usize,
}
// SAFETY: panels write disjoint elements, and the buffer outlives the parallel loop.
unsafe impl Sync for Output {}

/// One panel on `path`.
///
/// # Safety
/// As [`matmul_token_lanes`] sets up: the CPU runs `path`, `panel` is `rows.len()` rows of
/// `lhs.k`, and no one else writes columns `rows` of `out`.
#[allow(unused_variables)]
unsafe fn run_panel(path: KernelPath, panel: &[f32], rows: Range<usize>, lhs: &Lanes<'_>, out: &Output) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match path {
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx512 => avx512_panel(panel, rows, lhs, out),
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx2 => avx2_panel(panel, rows, lhs, out),
            _ => unreachable!("the portable path has no token-lane kernel"),
        }
    }
}

/// Generates a panel walker and its register tile for one instruction set.
macro_rules! token_lane_kernel {
    (
        $feature:literal, $panel_fn:ident, $tile_fn:ident, $vec:ty, $lanes:literal,
        $zero:ident, $load:ident, $store:ident, $splat:ident, $fma:ident, $big_rows:literal
    ) => {
        /// Walks a panel in tiles: tokens in chunks of two vectors (one for the last chunk
        /// when one is left), rows in groups of the tile's height, then of one.
        ///
        /// # Safety
        /// The CPU has the features; the bounds are [`run_panel`]'s.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $feature)]
        unsafe fn $panel_fn(panel: &[f32], rows: Range<usize>, lhs: &Lanes<'_>, out: &Output) {
            let k = lhs.k;
            assert!(panel.len() >= rows.len() * k && lhs.xt.len() >= k * lhs.padded);
            assert!(rows.end <= out.row_stride);
            let mut t0 = 0;
            while t0 < lhs.padded {
                let two = lhs.padded - t0 >= 2 * $lanes;
                let mut i = 0;
                while i < rows.len() {
                    let left = rows.len() - i;
                    let w = panel[i * k..].as_ptr();
                    let r = rows.start + i;
                    // SAFETY: rows `i ..` of the panel, the chunk's tokens (inside `padded`)
                    // and columns `r ..` of the output are in bounds (asserted above).
                    unsafe {
                        i += match (two, left >= $big_rows) {
                            (true, true) => $tile_fn::<$big_rows, 2>(w, lhs, t0, out, r),
                            (true, false) => $tile_fn::<1, 2>(w, lhs, t0, out, r),
                            (false, true) => $tile_fn::<$big_rows, 1>(w, lhs, t0, out, r),
                            (false, false) => $tile_fn::<1, 1>(w, lhs, t0, out, r),
                        };
                    }
                }
                t0 += if two { 2 * $lanes } else { $lanes };
            }
        }

        /// `out[t, r0 + r] = Σ_c w[r, c] · xt[c, t]` for `R` rows and `V` vectors of tokens
        /// from `t0`; returns `R`. Each sum runs over the columns in order.
        ///
        /// # Safety
        /// The CPU has the features; `w` holds `R` rows of `lhs.k`, tokens `t0 .. t0 + V ·
        /// lanes` are inside `lhs.padded`, and columns `r0 .. r0 + R` are the caller's.
        #[cfg(target_arch = "x86_64")]
        #[inline]
        #[target_feature(enable = $feature)]
        unsafe fn $tile_fn<const R: usize, const V: usize>(
            w: *const f32,
            lhs: &Lanes<'_>,
            t0: usize,
            out: &Output,
            r0: usize,
        ) -> usize {
            let k = lhs.k;
            // SAFETY: forwarded from the caller. (No closures: they may be compiled without
            // this function's target features.)
            unsafe {
                let mut acc = [[$zero(); V]; R];
                let mut xp = lhs.xt.as_ptr().add(t0);
                for c in 0..k {
                    let mut xv = [$zero(); V];
                    for (v, x) in xv.iter_mut().enumerate() {
                        *x = $load(xp.add($lanes * v));
                    }
                    for (r, acc) in acc.iter_mut().enumerate() {
                        let wv = $splat(*w.add(r * k + c));
                        for (a, x) in acc.iter_mut().zip(&xv) {
                            *a = $fma(wv, *x, *a);
                        }
                    }
                    xp = xp.add(lhs.padded);
                }
                let mut lanes = [0.0f32; $lanes];
                for (r, acc) in acc.iter().enumerate() {
                    for (v, a) in acc.iter().enumerate() {
                        $store(lanes.as_mut_ptr(), *a);
                        for (j, &value) in lanes.iter().enumerate() {
                            let t = t0 + $lanes * v + j;
                            if t < out.tokens {
                                *out.ptr.add(t * out.row_stride + r0 + r) = value;
                            }
                        }
                    }
                }
            }
            R
        }
    };
}

// Twelve rows × two vectors: 24 accumulators, two token vectors and a broadcast in 32
// registers; AVX2's 16 registers take six rows.
token_lane_kernel!(
    "avx512f",
    avx512_panel,
    avx512_tile,
    __m512,
    16,
    _mm512_setzero_ps,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_set1_ps,
    _mm512_fmadd_ps,
    12
);
token_lane_kernel!(
    "avx2,fma",
    avx2_panel,
    avx2_tile,
    __m256,
    8,
    _mm256_setzero_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_set1_ps,
    _mm256_fmadd_ps,
    6
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::GgmlType;
    use crate::kernels::test_blocks::{pseudo_random, small_scale_blocks};

    /// Every format on every token-lane path this CPU runs, at token counts around the tile
    /// and vector widths, against the f64 sum over the widened weights. Rows (61) leave
    /// remainders of the twelve- and six-row tiles and of the 48-row panel. Tolerance: 1e-5 of
    /// the sum of |products|; an in-order f32 sum over 512 columns errs by under 512 ulps of
    /// that sum (3e-5 worst case, about 1e-6 in practice), while a wrong index or scale moves
    /// a result by a whole product (about 1e-2 of the sum here).
    #[test]
    fn every_format_on_every_token_lane_path_matches_the_widened_reference() {
        let (rows, cols) = (61, 512);
        let paths: Vec<_> = [KernelPath::Avx512, KernelPath::Avx2]
            .into_iter()
            .filter(|p| p.available())
            .collect();
        println!(
            "token-lane paths run: {:?}",
            paths.iter().map(|p| p.name()).collect::<Vec<_>>()
        );
        assert!(matmul_token_lanes(KernelPath::Portable, &[0.0; 512], 1, &pack(GgmlType::Q8_0, 1, cols)).is_none());
        for ty in [
            GgmlType::Q4_1,
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::Q5_K,
            GgmlType::Q6_K,
            GgmlType::Q5_0,
        ] {
            let w = pack(ty, rows, cols);
            let dense = w.dequantize();
            for tokens in [1, 8, 16, 17, 31, 32, 33, 48, 70] {
                let x = pseudo_random(tokens * cols, 300 + tokens as u64);
                for &path in &paths {
                    let got = matmul_token_lanes(path, &x, tokens, &w).expect("a token-lane path");
                    for t in 0..tokens {
                        for r in 0..rows {
                            let (want, magnitude) = (0..cols).fold((0.0f64, 0.0f64), |(s, m), c| {
                                let p = f64::from(x[t * cols + c]) * f64::from(dense[r * cols + c]);
                                (s + p, m + p.abs())
                            });
                            let (got, bound) = (got[t * rows + r], 1e-5 * magnitude + 1e-12);
                            assert!(
                                (f64::from(got) - want).abs() <= bound,
                                "{ty} {path:?} t{t}/{tokens} r{r}: {got} vs {want} (±{bound})"
                            );
                        }
                    }
                }
            }
        }
    }

    /// The blocked transpose against the definition, with column counts that leave a partial
    /// block and tokens that leave padding, on one task and on many.
    #[test]
    fn transposed_moves_every_value_and_zeroes_the_padding() {
        for (tokens, k) in [(1usize, 16usize), (5, 40), (17, 33), (512, 72), (700, 1000)] {
            let padded = tokens.next_multiple_of(16);
            let x = pseudo_random(tokens * k, (tokens * k) as u64);
            let xt = transposed(&x, tokens, k, padded);
            assert_eq!(xt.len(), k * padded);
            for c in 0..k {
                for t in 0..padded {
                    let want = if t < tokens { x[t * k + c] } else { 0.0 };
                    assert_eq!(xt[c * padded + t], want, "{tokens} x {k}: column {c}, token {t}");
                }
            }
        }
    }

    fn pack(ty: GgmlType, rows: usize, cols: usize) -> PackedMatrix {
        let bytes = small_scale_blocks(ty, rows * cols / ty.block_layout().0 as usize, 9);
        PackedMatrix::from_ggml(ty, &bytes, rows, cols).expect("packable")
    }
}
