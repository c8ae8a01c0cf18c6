//! `y = x · Wᵀ` with `W` in packed blocks and `x`, `y` in f32, on all cores.
//!
//! Activations stay f32 by default (llama.cpp quantises them to 8 bits; we keep the reference
//! parity exact up to summation order; `--cpu-activations int8` opts the many-token regime
//! into 8-bit activations, `int8/lanes.rs`). Two regimes:
//! - few tokens (decode): each block is widened in registers once per tile of up to
//!   [`TOKEN_TILE`] tokens, so the step is bound by reading the packed bytes;
//! - many tokens (prefill, large batches): panels of rows are widened into an f32 scratch and
//!   multiplied with the tokens in the vector lanes (`token_lanes.rs`; the portable path runs
//!   the `gemm` crate's micro-kernels instead), so the step is bound by FMAs.

use std::ops::Range;

use rayon::prelude::*;

use super::aligned::{Aligned, aligned};
use super::dispatch::{Activations, KernelPath, activations, active};
use super::packed::{BLOCK, PackedMatrix};
use super::strided_gemm::{View, gemm_into};
use super::tiling::ROW_PANEL;
use super::token_lanes::matmul_token_lanes;
pub(super) use super::widen::widen_row_on;
use crate::kernels::int8::lanes::matmul_int8;

/// From this many tokens on, widening a panel once and running a tuned f32 GEMM beats the
/// register-tile kernel (measured with `bench_engine`: see docs/08-performance.md).
pub const GEMM_MIN_TOKENS: usize = 16;
/// From this many tokens on, `--cpu-activations int8` runs the int8 kernel. Its cost barely
/// moves between 2 and 16 tokens (one pass over the weights fills 16 token lanes), while the
/// f32 tile kernel's grows with each token: on Gemma 3's shapes one matrix is level at 4
/// tokens and twice as fast at 8 (`bench_matmul_shapes`), and `bench_engine`'s Gemma 3 decode
/// was 8-22 % slower at 4 streams and 16-20 % faster at 6 (docs/08).
pub const INT8_MIN_TOKENS: usize = 6;
/// Rows widened at a time in the GEMM regime: 32 × 1536 f32 is 192 KiB, inside L2.
const GEMM_PANEL: usize = 32;

/// Multiplies `x` (`[tokens, w.cols]`, row-major) by the transpose of `w`.
///
/// # Shapes
/// - x: `[tokens, cols]`, w: `[rows, cols]`
/// - output: `[tokens, rows]`
pub fn matmul_packed(x: &[f32], tokens: usize, w: &PackedMatrix) -> Vec<f32> {
    assert_eq!(x.len(), tokens * w.cols, "x must be [tokens, {}]", w.cols);
    if tokens == 0 || w.rows == 0 {
        return Vec::new();
    }
    if tokens >= INT8_MIN_TOKENS && activations() == Activations::Int8 {
        return matmul_int8(active(), x, tokens, w);
    }
    if tokens >= GEMM_MIN_TOKENS {
        return matmul_token_lanes(active(), x, tokens, w).unwrap_or_else(|| gemm_panels(x, tokens, w));
    }
    // Work in row panels, enough of them to keep every thread busy.
    let panels_per_thread = 4;
    let per_chunk = w.rows.div_ceil(rayon::current_num_threads() * panels_per_thread);
    let chunk_rows = per_chunk.div_ceil(ROW_PANEL).max(1) * ROW_PANEL;
    // Only the tiles of several tokens gained from aligned activations; one token's kernel
    // reads them once per group of rows, and the copy bought nothing there.
    let x_aligned = if tokens > 1 { aligned(x) } else { Aligned::Borrowed(x) };
    let x = x_aligned.as_slice();
    // Computed transposed (`[rows, tokens]`) so each chunk owns a contiguous slice.
    let mut transposed = vec![0.0f32; w.rows * tokens];
    transposed
        .par_chunks_mut(chunk_rows * tokens)
        .enumerate()
        .for_each(|(chunk, out)| {
            let start = chunk * chunk_rows;
            let rows = start..(start + chunk_rows).min(w.rows);
            rows_kernel(x, tokens, w, rows, out);
        });
    if tokens == 1 {
        return transposed;
    }
    let mut y = vec![0.0f32; tokens * w.rows];
    for (r, column) in transposed.chunks_exact(tokens).enumerate() {
        for (t, &v) in column.iter().enumerate() {
            y[t * w.rows + r] = v;
        }
    }
    y
}

/// The many-token regime: each panel of [`GEMM_PANEL`] rows is widened to f32 and multiplied
/// by `gemm`; panels run in parallel and write disjoint columns of the output.
fn gemm_panels(x: &[f32], tokens: usize, w: &PackedMatrix) -> Vec<f32> {
    let mut y = vec![0.0f32; tokens * w.rows];
    let out = SharedOutput(y.as_mut_ptr());
    let (k, n_total) = (w.cols, w.rows);
    (0..w.rows.div_ceil(GEMM_PANEL)).into_par_iter().for_each(|p| {
        PANEL_SCRATCH.with_borrow_mut(|panel| {
            super::scratch::resize_counted(panel, GEMM_PANEL * k, 0.0);
            let rows = p * GEMM_PANEL..((p + 1) * GEMM_PANEL).min(n_total);
            let n = rows.len();
            for (i, r) in rows.clone().enumerate() {
                widen_row(w, r, &mut panel[i * k..(i + 1) * k]);
            }
            let out = &out;
            // SAFETY: `x` is `[tokens, k]` (asserted by the caller) and `panel` holds `n` rows of
            // `k`; the destination is columns `rows` of `y` (`[tokens, n_total]`), which no
            // other panel writes, and `y` outlives the parallel loop.
            unsafe {
                gemm_into(
                    [tokens, n, k],
                    View::rows(out.0.add(rows.start), n_total),
                    View::rows(x.as_ptr(), k),
                    View::transposed(panel.as_ptr(), k),
                    1.0,
                );
            }
        })
    });
    y
}

thread_local! {
    /// Each worker's widened panel, kept between calls: a fresh 192 KiB buffer per call
    /// would be fresh zeroed pages from the kernel, 120 times a step.
    static PANEL_SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The output pointer shared by panels that write disjoint columns.
struct SharedOutput(*mut f32);
// SAFETY: panels write disjoint elements, and the buffer outlives the parallel loop.
unsafe impl Sync for SharedOutput {}

/// Row `r` of `w` widened to f32 into `out` (`[w.cols]`), on the active kernel path.
fn widen_row(w: &PackedMatrix, r: usize, out: &mut [f32]) {
    widen_row_on(active(), w, r, out)
}

/// Output rows `rows` for all tokens into `out` (`[rows.len(), tokens]`), on the active path.
fn rows_kernel(x: &[f32], tokens: usize, w: &PackedMatrix, rows: Range<usize>, out: &mut [f32]) {
    rows_kernel_on(active(), x, tokens, w, rows, out)
}

/// [`rows_kernel`] on `path`, which this CPU must run.
pub fn rows_kernel_on(
    path: KernelPath,
    x: &[f32],
    tokens: usize,
    w: &PackedMatrix,
    rows: Range<usize>,
    out: &mut [f32],
) {
    assert!(path.available(), "this CPU cannot run the {} kernels", path.name());
    match path {
        // SAFETY: the CPU supports the features each function is compiled for (asserted).
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx512 => unsafe { super::avx512::rows_kernel(x, tokens, w, rows, out) },
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx2 => unsafe { super::avx2::rows_kernel(x, tokens, w, rows, out) },
        _ => portable_rows_kernel(x, tokens, w, rows, out),
    }
}

/// The reference kernel for CPUs without AVX2 and for testing the fast ones.
pub fn portable_rows_kernel(x: &[f32], tokens: usize, w: &PackedMatrix, rows: Range<usize>, out: &mut [f32]) {
    let bpr = w.blocks_per_row();
    for (i, r) in rows.enumerate() {
        for t in 0..tokens {
            let xr = &x[t * w.cols..(t + 1) * w.cols];
            let mut acc = 0.0f32;
            for b in 0..bpr {
                let values = w.block_values(r * bpr + b);
                acc += values
                    .iter()
                    .zip(&xr[b * BLOCK..(b + 1) * BLOCK])
                    .map(|(w, x)| w * x)
                    .sum::<f32>();
            }
            out[i * tokens + t] = acc;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::GgmlType;
    use crate::kernels::test_blocks::{pseudo_random, small_scale_blocks};
    use crate::model::gguf::quantize;

    /// `x · Wᵀ` in f64 over the widened weights.
    fn reference(x: &[f32], tokens: usize, w: &PackedMatrix) -> Vec<f64> {
        let dense = w.dequantize();
        let mut y = vec![0.0; tokens * w.rows];
        for t in 0..tokens {
            for r in 0..w.rows {
                y[t * w.rows + r] = (0..w.cols)
                    .map(|c| f64::from(x[t * w.cols + c]) * f64::from(dense[r * w.cols + c]))
                    .sum();
            }
        }
        y
    }

    /// f32 sums of 160 products of magnitude ≤ 1 (so |y| ≤ 160): 1e-4 absolute is ~40 ulps
    /// of the largest sums, far below any real indexing or widening error (≥ 1e-2 here).
    const TOLERANCE: f64 = 1e-4;

    #[test]
    fn every_format_and_token_count_matches_the_widened_reference() {
        let (rows, cols) = (37, 160);
        for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0] {
            let bytes = quantize(ty, &pseudo_random(rows * cols, 1)).expect("quantise");
            let w = PackedMatrix::from_ggml(ty, &bytes, rows, cols).expect("packable");
            for tokens in [1, 2, 7, 8, 9, GEMM_MIN_TOKENS - 1, GEMM_MIN_TOKENS, 17, 33] {
                let x = pseudo_random(tokens * cols, tokens as u64);
                let want = reference(&x, tokens, &w);
                let got = matmul_packed(&x, tokens, &w);
                let mut portable = vec![0.0; rows * tokens];
                portable_rows_kernel(&x, tokens, &w, 0..rows, &mut portable);
                for t in 0..tokens {
                    for r in 0..rows {
                        let expected = want[t * rows + r];
                        let fast = f64::from(got[t * rows + r]);
                        let slow = f64::from(portable[r * tokens + t]);
                        assert!(
                            (fast - expected).abs() < TOLERANCE,
                            "{ty} t{t} r{r}: {fast} vs {expected}"
                        );
                        assert!(
                            (slow - expected).abs() < TOLERANCE,
                            "{ty} t{t} r{r}: {slow} vs {expected}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn every_kernel_path_this_cpu_runs_matches_the_portable_kernel() {
        let (rows, cols) = (37, 256);
        let (ran, skipped): (Vec<_>, Vec<_>) = KernelPath::ALL.into_iter().partition(|p| p.available());
        println!(
            "kernel paths run: {:?}; not on this CPU: {:?}",
            ran.iter().map(|p| p.name()).collect::<Vec<_>>(),
            skipped.iter().map(|p| p.name()).collect::<Vec<_>>()
        );
        for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0] {
            let bytes = quantize(ty, &pseudo_random(rows * cols, 3)).expect("quantise");
            let w = PackedMatrix::from_ggml(ty, &bytes, rows, cols).expect("packable");
            for tokens in 1..=GEMM_MIN_TOKENS {
                let x = pseudo_random(tokens * cols, 100 + tokens as u64);
                let mut portable = vec![0.0; rows * tokens];
                portable_rows_kernel(&x, tokens, &w, 0..rows, &mut portable);
                for &path in &ran {
                    let mut got = vec![0.0; rows * tokens];
                    rows_kernel_on(path, &x, tokens, &w, 0..rows, &mut got);
                    for (i, (g, p)) in got.iter().zip(&portable).enumerate() {
                        assert!(
                            (g - p).abs() < TOLERANCE as f32,
                            "{ty} {path:?} t{tokens} i{i}: {g} vs {p}"
                        );
                    }
                }
            }
            let mut portable_row = vec![0.0; cols];
            widen_row_on(KernelPath::Portable, &w, 5, &mut portable_row);
            for &path in &ran {
                let mut row = vec![0.0; cols];
                widen_row_on(path, &w, 5, &mut row);
                assert_eq!(row, portable_row, "{ty} {path:?}: widening is exact");
            }
        }
    }

    /// The repacked formats (Q4_K and Q5_K with mins, Q6_K with a scale per half, Q5_0 and
    /// IQ4_XS as bytes) on random blocks: every kernel path this CPU runs, at decode and GEMM
    /// token counts, against the f64 sum over the widened weights. The tolerance is 1e-5 of
    /// the sum of |products|: f32 summation-order error over 512 columns is below 512 ulps of
    /// that sum (3e-5 worst case, ~1e-6 in practice), and an indexing or scale error moves a
    /// result by a whole product (~1e-2 of the sum here).
    #[test]
    fn repacked_formats_match_the_widened_reference_on_every_path() {
        let (rows, cols) = (37, 512);
        let ran: Vec<_> = KernelPath::ALL.into_iter().filter(|p| p.available()).collect();
        println!(
            "kernel paths run: {:?}",
            ran.iter().map(|p| p.name()).collect::<Vec<_>>()
        );
        let pack = |ty: GgmlType, rows: usize| {
            let bytes = small_scale_blocks(ty, rows * cols / ty.block_layout().0 as usize, 7);
            PackedMatrix::from_ggml(ty, &bytes, rows, cols).expect("packable")
        };
        let mut matrices: Vec<(String, PackedMatrix)> = [
            GgmlType::Q4_K,
            GgmlType::Q5_K,
            GgmlType::Q6_K,
            GgmlType::Q5_0,
            GgmlType::IQ4_XS,
        ]
        .into_iter()
        .map(|ty| (ty.to_string(), pack(ty, rows)))
        .collect();
        // A mixed stack (OffsetBytes with a scale per half and a min).
        let mixed = PackedMatrix::stack(&[pack(GgmlType::Q4_K, 20), pack(GgmlType::Q6_K, rows - 20)]);
        matrices.push(("Q4_K+Q6_K".into(), mixed.expect("same width")));
        // A Q5_0 q/k with a Q8_0 v (Bytes).
        let mixed = PackedMatrix::stack(&[pack(GgmlType::Q5_0, 30), pack(GgmlType::Q8_0, rows - 30)]);
        matrices.push(("Q5_0+Q8_0".into(), mixed.expect("same width")));
        for (ty, w) in matrices {
            let dense = w.dequantize();
            for tokens in [1, 2, 5, 8, 9, GEMM_MIN_TOKENS, 33] {
                let x = pseudo_random(tokens * cols, 200 + tokens as u64);
                let want = reference(&x, tokens, &w);
                let magnitude = |t: usize, r: usize| -> f64 {
                    (0..cols)
                        .map(|c| f64::from((x[t * cols + c] * dense[r * cols + c]).abs()))
                        .sum()
                };
                let check = |label: &str, t: usize, r: usize, got: f32| {
                    let (expected, bound) = (want[t * rows + r], 1e-5 * magnitude(t, r) + 1e-12);
                    let error = (f64::from(got) - expected).abs();
                    assert!(error <= bound, "{ty} {label} t{t} r{r}: {got} vs {expected} (±{bound})");
                };
                let got = matmul_packed(&x, tokens, &w);
                for t in 0..tokens {
                    for r in 0..rows {
                        check("matmul_packed", t, r, got[t * rows + r]);
                    }
                }
                for &path in &ran {
                    let mut out = vec![0.0; rows * tokens];
                    rows_kernel_on(path, &x, tokens, &w, 0..rows, &mut out);
                    for t in 0..tokens {
                        for r in 0..rows {
                            check(path.name(), t, r, out[r * tokens + t]);
                        }
                    }
                }
            }
            for &path in &ran {
                let mut row = vec![0.0; cols];
                widen_row_on(path, &w, 5, &mut row);
                assert_eq!(row, dense[5 * cols..6 * cols], "{ty} {path:?}: widening is exact");
            }
        }
    }

    /// Q5_0 blocks of random bytes with scales of any finite magnitude, widened on every
    /// path this CPU runs: each value equals gguf-py's dequantisation (`dequantize`, checked
    /// against it elsewhere) bit for bit, the sign of a zero included.
    #[test]
    fn five_bit_blocks_widen_to_ggml_values_bit_for_bit_on_every_path() {
        use crate::kernels::test_blocks::random_blocks;
        use crate::model::gguf::dequantize;
        let (rows, cols) = (9, 256);
        let bytes = random_blocks(GgmlType::Q5_0, rows * cols / BLOCK, 11);
        let want = dequantize(GgmlType::Q5_0, &bytes, rows * cols).expect("dequantise");
        let w = PackedMatrix::from_ggml(GgmlType::Q5_0, &bytes, rows, cols).expect("packable");
        assert_eq!(w.format, crate::kernels::BlockFormat::FiveBit);
        for path in KernelPath::ALL.into_iter().filter(|p| p.available()) {
            for r in 0..rows {
                let mut row = vec![0.0; cols];
                widen_row_on(path, &w, r, &mut row);
                for (c, (got, want)) in row.iter().zip(&want[r * cols..]).enumerate() {
                    assert_eq!(got.to_bits(), want.to_bits(), "{path:?} r{r} c{c}: {got} vs {want}");
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "x must be")]
    fn activations_of_the_wrong_width_panic() {
        let bytes = quantize(GgmlType::Q8_0, &pseudo_random(4 * 64, 1)).expect("quantise");
        let w = PackedMatrix::from_ggml(GgmlType::Q8_0, &bytes, 4, 64).expect("packable");
        // Two tokens claimed, one token's worth of activations given.
        matmul_packed(&pseudo_random(64, 2), 2, &w);
    }
}
