//! The opt-in 8-bit activation mode (`--cpu-activations int8`) of the many-token matmul:
//! what llama.cpp does. The activations are quantised once a call, per token and per group
//! of `G` columns (symmetric, `x ≈ q · scale`, `q` in -127..=127), and each panel of weight
//! rows is unpacked once into unsigned bytes `u` with a scale and a bias per group
//! (`w = u · scale + bias`: Q4 nibbles as they are with their min, Q5_0's 5 bits with
//! `-16 · scale`, signed bytes plus 128 with `min - 128 · scale`), so one integer
//! micro-kernel serves every packed format:
//!
//! `y[t, r] = Σ_g scale_w[r, g] · scale_x[t, g] · Σ_{c∈g} u[r, c] · q[t, c] + bias[r, g] · scale_x[t, g] · Σ_{c∈g} q[t, c]`
//!
//! The integer sums are exact; only the activations' rounding (at most `amax / 254` per
//! element, `amax` its group's largest magnitude) departs from the f32 mode. `G` is 32, or 16
//! for the formats with a scale per half block (Q6_K, Q5_K, mixed stacks).
//!
//! Layout for the AVX-512 VNNI kernel (`vnni.rs`): the activations are signed bytes in
//! `[cols / 4][padded tokens][4]`, so one 64-byte load is 16 tokens × 4 columns, and each
//! row's four unsigned weight bytes are broadcast (`vpdpbusd` multiplies unsigned by signed
//! bytes). The portable kernel below is the reference and the fallback.

use std::ops::Range;

use rayon::prelude::*;

use super::layout::{
    Int8Panel, Output, PANEL_ROWS, QuantizedLanes, WeightGroups, group_of, group_sums, signed_weights,
};
use crate::kernels::dispatch::{KernelPath, int8_vnni_on};
use crate::kernels::packed::PackedMatrix;

thread_local! {
    /// Each worker's unpacked panel, kept between calls.
    static PANEL: std::cell::RefCell<Int8Panel> = std::cell::RefCell::new(Int8Panel::default());
}

/// `x · Wᵀ` as `[tokens, w.rows]` with the activations quantised to 8 bits: the AVX-512 VNNI
/// kernel when `path` is AVX-512 and the CPU has VNNI, else the portable integer kernel.
///
/// # Shapes
/// - x: `[tokens, w.cols]`
/// - output: `[tokens, w.rows]`
pub fn matmul_int8(path: KernelPath, x: &[f32], tokens: usize, w: &PackedMatrix) -> Vec<f32> {
    assert_eq!(x.len(), tokens * w.cols, "x must be [tokens, {}]", w.cols);
    let vnni = int8_vnni_on(path);
    let (group, signed) = (group_of(w.format), signed_weights(w.format));
    let lanes = if vnni {
        let mut lanes = QuantizedLanes::zeroed(tokens, w.cols, group, signed);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512F/BW (checked above).
        unsafe {
            super::vnni::quantize_into(x, &mut lanes)
        };
        lanes
    } else {
        QuantizedLanes::quantize(x, tokens, w.cols, group, signed)
    };
    let sums = (vnni && signed).then(|| group_sums(w, group));
    let mut y = vec![0.0f32; tokens * w.rows];
    let out = Output {
        ptr: y.as_mut_ptr(),
        tokens,
        row_stride: w.rows,
    };
    let k = w.cols;
    (0..w.rows.div_ceil(PANEL_ROWS)).into_par_iter().for_each(|p| {
        let rows = p * PANEL_ROWS..((p + 1) * PANEL_ROWS).min(w.rows);
        let run = |values: &[u8]| {
            if vnni {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the CPU has AVX-512F/BW/VNNI (checked above); `values` holds
                // `rows.len()` rows of `k`, and this panel alone writes columns `rows`.
                unsafe {
                    super::vnni::panel(values, sums, w, rows.clone(), &lanes, &out)
                }
            } else {
                portable_panel(values, w, rows.clone(), &lanes, &out);
            }
        };
        if signed {
            run(&w.quants[rows.start * k..rows.end * k]);
        } else {
            PANEL.with_borrow_mut(|panel| {
                if vnni {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: the CPU has AVX-512F/BW/VL (checked above).
                    unsafe {
                        super::vnni::fill(panel, w, rows.clone())
                    }
                } else {
                    panel.fill(w, rows.clone());
                }
                run(&panel.values);
            })
        }
    });
    y
}

/// The portable integer kernel: the same sums as the VNNI one, one (row, token) at a time.
/// `values` holds the panel's rows: signed bytes as stored, or unpacked unsigned ones.
pub(super) fn portable_panel(values: &[u8], w: &PackedMatrix, rows: Range<usize>, lhs: &QuantizedLanes, out: &Output) {
    let (k, group) = (lhs.k, lhs.group);
    assert_eq!(
        (w.cols, group_of(w.format)),
        (k, group),
        "matrix and activations disagree"
    );
    assert!(rows.end <= out.row_stride && lhs.tokens == out.tokens);
    let groups = k / group;
    let weight_groups = WeightGroups::of(w);
    let signed = signed_weights(w.format);
    let weight = |v: u8| if signed { i32::from(v as i8) } else { i32::from(v) };
    for (i, r) in rows.enumerate() {
        let values = &values[i * k..(i + 1) * k];
        for t in 0..lhs.tokens {
            let mut y = 0.0f32;
            for g in 0..groups {
                let isum: i32 = (g * group..(g + 1) * group)
                    .map(|c| weight(values[c]) * lhs.q(t, c))
                    .sum();
                let at = g * lhs.padded + t;
                let (scale, bias) = weight_groups.get(r, g, groups);
                y = (isum as f32 * lhs.scales[at]).mul_add(scale, y);
                y = bias.mul_add(lhs.sums[at], y);
            }
            // SAFETY: `t < tokens` and `r < row_stride` (asserted); this panel alone writes
            // column `r`, and the buffer outlives the caller's parallel loop.
            unsafe { *out.ptr.add(t * out.row_stride + r) = y };
        }
    }
}
