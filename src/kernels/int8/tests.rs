//! Tests of the int8 activation kernels (`lanes.rs`, `vnni.rs`).

use super::lanes::matmul_int8;
use super::layout::{Int8Panel, QuantizedLanes, group_of, signed_weights};
use crate::kernels::GgmlType;
use crate::kernels::dispatch::{KernelPath, int8_vnni_available};
use crate::kernels::packed::PackedMatrix;
use crate::kernels::test_blocks::{pseudo_random, small_scale_blocks};

const ROWS: usize = 61;
const COLS: usize = 512;
const TOKENS: [usize; 8] = [1, 16, 17, 31, 32, 33, 48, 70];

fn pack(ty: GgmlType, rows: usize) -> PackedMatrix {
    let bytes = small_scale_blocks(ty, rows * COLS / ty.block_layout().0 as usize, 13);
    PackedMatrix::from_ggml(ty, &bytes, rows, COLS).expect("packable")
}

/// Every packed format, and the two mixed stacks a model builds.
fn matrices() -> Vec<(String, PackedMatrix)> {
    let mut out: Vec<(String, PackedMatrix)> = [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_XS,
    ]
    .into_iter()
    .map(|ty| (ty.to_string(), pack(ty, ROWS)))
    .collect();
    let stack = |a: GgmlType, b: GgmlType, split: usize| {
        PackedMatrix::stack(&[pack(a, split), pack(b, ROWS - split)]).expect("same width")
    };
    out.push(("Q4_K+Q6_K".into(), stack(GgmlType::Q4_K, GgmlType::Q6_K, 20)));
    out.push(("Q5_0+Q8_0".into(), stack(GgmlType::Q5_0, GgmlType::Q8_0, 30)));
    out
}

/// The int8 paths this CPU runs: portable always, AVX-512 VNNI where present.
fn paths() -> Vec<KernelPath> {
    let mut paths = vec![KernelPath::Portable];
    if int8_vnni_available() {
        paths.push(KernelPath::Avx512);
    }
    println!("int8 paths run: {paths:?}");
    paths
}

/// Every format on every int8 path, at token counts around the tile and vector widths,
/// against the f64 product of the dequantised weights and the dequantised int8 activations.
/// That product is what the kernel computes exactly up to f32 rounding (the integer sums are
/// exact; about four f32 roundings a group follow), so the tolerance is 1e-5 of the sum of
/// |products|; a wrong index, scale or offset moves a result by a whole product (about 1e-2
/// of that sum here). The VNNI kernel also equals the portable one exactly (same f32 steps).
#[test]
fn every_format_on_every_int8_path_matches_the_dequantised_int8_product() {
    let paths = paths();
    for (name, w) in matrices() {
        let dense = w.dequantize();
        for tokens in TOKENS {
            let x = pseudo_random(tokens * COLS, 500 + tokens as u64);
            let xq =
                QuantizedLanes::quantize(&x, tokens, COLS, group_of(w.format), signed_weights(w.format)).dequantize();
            let portable = matmul_int8(KernelPath::Portable, &x, tokens, &w);
            for &path in &paths {
                let got = matmul_int8(path, &x, tokens, &w);
                for t in 0..tokens {
                    for r in 0..ROWS {
                        let (want, magnitude) = (0..COLS).fold((0.0f64, 0.0f64), |(s, m), c| {
                            let p = f64::from(xq[t * COLS + c]) * f64::from(dense[r * COLS + c]);
                            (s + p, m + p.abs())
                        });
                        let (got, bound) = (got[t * ROWS + r], 1e-5 * magnitude + 1e-12);
                        assert!(
                            (f64::from(got) - want).abs() <= bound,
                            "{name} {path:?} t{t}/{tokens} r{r}: {got} vs {want} (±{bound})"
                        );
                        assert_eq!(got, portable[t * ROWS + r], "{name} {path:?} t{t}/{tokens} r{r}");
                    }
                }
            }
        }
    }
}

/// Against the f32-activation product: each activation moves by at most half its group's
/// step, `amax / 254`, so `|y_int8 - y_f32| <= Σ_c |w[r, c]| · amax(t, group of c) / 254`
/// (plus the f32 rounding of both, 1e-5 of the sum of |products|). Activations here span
/// four orders of magnitude across groups, which a per-row scale would not survive.
#[test]
fn int8_results_stay_within_the_quantisation_bound_of_the_f32_product() {
    for (name, w) in matrices() {
        let dense = w.dequantize();
        let group = group_of(w.format);
        for tokens in [16, 33] {
            let x: Vec<f32> = pseudo_random(tokens * COLS, 900 + tokens as u64)
                .iter()
                .enumerate()
                .map(|(i, v)| v * 10f32.powi(((i / group) % 5) as i32 - 2))
                .collect();
            for path in paths() {
                let got = matmul_int8(path, &x, tokens, &w);
                for t in 0..tokens {
                    let row = &x[t * COLS..(t + 1) * COLS];
                    let amax: Vec<f64> = row
                        .chunks_exact(group)
                        .map(|g| g.iter().fold(0.0f64, |m, v| m.max(f64::from(v.abs()))))
                        .collect();
                    for r in 0..ROWS {
                        let (mut exact, mut bound, mut magnitude) = (0.0f64, 0.0f64, 0.0f64);
                        for (c, &v) in row.iter().enumerate() {
                            let weight = f64::from(dense[r * COLS + c]);
                            exact += f64::from(v) * weight;
                            magnitude += (f64::from(v) * weight).abs();
                            bound += weight.abs() * amax[c / group] / 254.0;
                        }
                        let bound = bound * 1.0001 + 1e-5 * magnitude + 1e-12;
                        let error = (f64::from(got[t * ROWS + r]) - exact).abs();
                        assert!(
                            error <= bound,
                            "{name} {path:?} t{t} r{r}: off by {error} (bound {bound})"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn quantising_keeps_each_groups_largest_value_and_zero_groups() {
    let mut x = pseudo_random(2 * 64, 7);
    x[..32].fill(0.0); // token 0's first group
    x[64 + 40] = -3.0; // token 1's second group's largest magnitude
    let q = QuantizedLanes::quantize(&x, 2, 64, 32, false);
    assert_eq!((q.padded, q.scales[0], q.sums[0]), (16, 0.0, 0.0));
    assert!((0..32).all(|c| q.q(0, c) == 0));
    assert_eq!(q.q(1, 40), -127);
    assert_eq!(q.scales[q.padded + 1], 3.0 / 127.0);
    let back = q.dequantize();
    for (i, (v, b)) in x.iter().zip(&back).enumerate() {
        let step = q.scales[(i % 64 / 32) * q.padded + i / 64];
        assert!((v - b).abs() <= step / 2.0 * 1.0001, "element {i}: {v} vs {b}");
    }
    // Padding tokens are zero (q = 0, scale 0).
    assert_eq!(q.q(5, 3), 0);
    assert_eq!(q.scales[5], 0.0);
    // Biased, the same values are stored plus 128 (zero as 0x80, padding included).
    let biased = QuantizedLanes::quantize(&x, 2, 64, 32, true);
    assert!(biased.bytes.iter().zip(&q.bytes).all(|(b, u)| *b == u ^ 0x80));
    assert_eq!((biased.q(1, 40), biased.q(5, 3), biased.bytes[5 * 4]), (-127, 0, 0x80));
    assert_eq!((&biased.scales, &biased.sums), (&q.scales, &q.sums));
}

/// The AVX-512 quantiser gives the portable one's bytes, scales and sums exactly (ties
/// included: values at exact halves of a step are in the input).
#[test]
fn the_vector_quantiser_equals_the_portable_one() {
    if !int8_vnni_available() {
        println!("no AVX-512 VNNI: only the portable quantiser runs here");
        return;
    }
    for (group, tokens, biased) in [
        (32, 1, false),
        (32, 33, false),
        (16, 17, false),
        (32, 33, true),
        (16, 17, true),
    ] {
        let mut x = pseudo_random(tokens * COLS, 77 + tokens as u64);
        // A group whose values fall on ties: amax 127, so each q is the value itself.
        for (j, v) in x[..group].iter_mut().enumerate() {
            *v = j as f32 - 0.5 * (j % 2) as f32 - 10.0;
        }
        x[0] = 127.0;
        let want = QuantizedLanes::quantize(&x, tokens, COLS, group, biased);
        let mut got = QuantizedLanes::zeroed(tokens, COLS, group, biased);
        // SAFETY: the CPU has AVX-512 VNNI (checked above), which implies F and BW here.
        unsafe { super::vnni::quantize_into(&x, &mut got) };
        assert_eq!(got.bytes, want.bytes, "group {group}, {tokens} tokens, biased {biased}");
        assert_eq!(
            got.scales, want.scales,
            "group {group}, {tokens} tokens, biased {biased}"
        );
        assert_eq!(got.sums, want.sums, "group {group}, {tokens} tokens, biased {biased}");
    }
}

/// The AVX-512 panel unpacking gives the portable one's bytes, for every nibble format and
/// a panel that starts and ends inside the matrix.
#[test]
fn the_vector_panel_unpacking_equals_the_portable_one() {
    if !int8_vnni_available() {
        println!("no AVX-512 VNNI: only the portable unpacking runs here");
        return;
    }
    for (name, w) in matrices().into_iter().filter(|(_, w)| !signed_weights(w.format)) {
        let (mut want, mut got) = (Int8Panel::default(), Int8Panel::default());
        want.fill(&w, 5..53);
        // SAFETY: the CPU has AVX-512 VNNI (checked above), which comes with F, BW and VL.
        unsafe { super::vnni::fill(&mut got, &w, 5..53) };
        assert_eq!(got.values, want.values, "{name}");
    }
}

/// `matmul_packed` under int8 runs the int8 kernel from [`INT8_MIN_TOKENS`] tokens on (and
/// f32 below); under f32 never.
#[test]
fn matmul_packed_runs_int8_from_its_token_threshold_only_when_asked() {
    use crate::kernels::dispatch::{Activations, active, with_activations};
    use crate::kernels::matmul::{INT8_MIN_TOKENS, matmul_packed};
    let w = pack(GgmlType::Q8_0, ROWS);
    for tokens in [2, INT8_MIN_TOKENS - 1, INT8_MIN_TOKENS, 8, 33] {
        let x = pseudo_random(tokens * COLS, 40 + tokens as u64);
        let int8 = matmul_int8(active(), &x, tokens, &w);
        let f32_mode = with_activations(Activations::F32, || matmul_packed(&x, tokens, &w));
        let int8_mode = with_activations(Activations::Int8, || matmul_packed(&x, tokens, &w));
        assert_ne!(f32_mode, int8, "{tokens} tokens: f32 mode ran int8");
        if tokens >= INT8_MIN_TOKENS {
            assert_eq!(int8_mode, int8, "{tokens} tokens: int8 mode did not run int8");
        } else {
            assert_eq!(int8_mode, f32_mode, "{tokens} tokens: int8 below its threshold");
        }
    }
}
