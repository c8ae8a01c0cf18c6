//! A model whose projections come in the quantisations GGUF files ship (Q4_K, Q5_K, Q6_K,
//! Q5_0, IQ4_NL, IQ4_XS run packed; Q5_1 is widened at load) loads, and its first logits
//! equal those of the same file with every weight widened to f32 (`--dequantize-weights`).

use std::path::Path;

use crate::common::first_logits::first_logits;
use half::f16;
use kiln::kernels::GgmlType;
use kiln::model::gguf::{GgufFile, GgufWriter};
use kiln::testing::{TinyModelSpec, write_tiny_model};

/// Largest |Δlogit| allowed: the weights are the same values (Q4_K's and Q5_K's packed
/// `q * scale + min` is fused, at most one rounding apart), multiplied by the packed kernels on one side and by dense
/// f32 matmuls on the other, so only roundings and summation order differ.
const TOLERANCE: f32 = 1e-4;

/// Pseudo-random bytes for `n` blocks of `ty`, with each f16 scale (at `scales`) set so the
/// weights stay near ±0.3, as the tiny model's are.
fn random_blocks(ty: GgmlType, n: usize, scales: &[(usize, f32)], seed: u64) -> Vec<u8> {
    let bytes = ty.block_layout().1 as usize;
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut data: Vec<u8> = (0..n * bytes)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        })
        .collect();
    for block in data.chunks_exact_mut(bytes) {
        for &(at, value) in scales {
            block[at..at + 2].copy_from_slice(&f16::from_f32(value).to_le_bytes());
        }
    }
    data
}

/// The f16 scales of each type's blocks and values that keep weights small.
fn scales_of(ty: GgmlType) -> Vec<(usize, f32)> {
    match ty {
        GgmlType::Q4_K => vec![(0, 0.3 / (15.0 * 63.0)), (2, 0.15 / 63.0)],
        GgmlType::Q5_0 | GgmlType::IQ4_NL => vec![(0, 0.3 / 127.0)],
        GgmlType::IQ4_XS => vec![(0, 0.3 / (127.0 * 32.0))],
        GgmlType::Q6_K => vec![(208, 0.3 / (32.0 * 127.0))],
        GgmlType::Q5_K => vec![(0, 0.3 / (31.0 * 63.0)), (2, 0.15 / 63.0)],
        GgmlType::Q5_1 => vec![(0, 0.3 / 31.0), (2, -0.15)],
        other => panic!("no scales for {other}"),
    }
}

/// The tiny model at `src` rewritten to `dst` with the named projections (by suffix, in the
/// given layer) replaced by random blocks of the given types.
fn rewrite(src: &Path, dst: &Path, replace: &[(&str, GgmlType)]) {
    let file = GgufFile::open(src).expect("open");
    let mut w = GgufWriter::new();
    for (key, value) in file.metadata() {
        w.add_metadata(key, value.clone());
    }
    for (i, info) in file.tensors().iter().enumerate() {
        let replacement = replace.iter().find(|(name, _)| info.name == *name);
        let (ty, bytes) = match replacement {
            Some(&(_, ty)) => {
                let elements: usize = info.shape.iter().product();
                let blocks = elements / ty.block_layout().0 as usize;
                (ty, random_blocks(ty, blocks, &scales_of(ty), i as u64 + 1))
            }
            None => (info.ty, file.tensor_bytes(&info.name).expect("bytes").to_vec()),
        };
        w.add_tensor_raw(&info.name, &info.shape, ty, bytes).expect("tensor");
    }
    w.write_to(dst).expect("write");
}

#[test]
fn k_quant_and_iq4_projections_load_and_run_packed_as_they_dequantise() {
    let dir = tempfile::tempdir().expect("tempdir");
    // K-quant rows are 256-element super-blocks: a model 256 wide.
    let spec = TinyModelSpec {
        hidden: 256,
        ffn: 512,
        ..TinyModelSpec::default()
    };
    let tiny = write_tiny_model(dir.path(), spec).expect("tiny model");
    let mixed = dir.path().join("mixed.gguf");
    // Layer 1's q/k/v mixes Q4_K and Q6_K, as Q4_K_M files do: one packed stack of both.
    let mut replace = Vec::new();
    let mut set = |layer: &str, projections: &[&str], ty| {
        replace.extend(projections.iter().map(|p| (format!("{layer}.{p}.weight"), ty)));
    };
    set("blk.0", &["attn_q", "attn_k", "attn_v"], GgmlType::Q4_K);
    set("blk.1", &["attn_q", "attn_k"], GgmlType::Q4_K);
    set("blk.1", &["attn_v"], GgmlType::Q6_K);
    set("blk.0", &["attn_output"], GgmlType::IQ4_NL);
    set("blk.1", &["attn_output"], GgmlType::Q5_1);
    set("blk.0", &["ffn_gate", "ffn_up"], GgmlType::Q5_0);
    set("blk.1", &["ffn_gate", "ffn_up"], GgmlType::IQ4_XS);
    set("blk.0", &["ffn_down"], GgmlType::Q5_K);
    set("blk.1", &["ffn_down"], GgmlType::Q6_K);
    let replace: Vec<(&str, GgmlType)> = replace.iter().map(|(n, t)| (n.as_str(), *t)).collect();
    rewrite(&tiny, &mixed, &replace);

    let file = GgufFile::open(&mixed).expect("open");
    let widened: Vec<String> = file.types_widened_at_load().into_iter().collect();
    assert!(
        widened.is_empty(),
        "every type here runs packed (Q5_1 repacked): {widened:?}"
    );

    let prompt = [5, 80, 81, 90, 100, 3, 7];
    let packed = first_logits(&mixed, false, &prompt);
    let dense = first_logits(&mixed, true, &prompt);
    assert_eq!(packed.len(), dense.len());
    assert!(packed.iter().all(|v| v.is_finite()));
    let worst = packed
        .iter()
        .zip(&dense)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(worst <= TOLERANCE, "max |Δlogit| {worst}");
    let spread = dense.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    assert!(spread > 100.0 * TOLERANCE, "logits too small to compare: {spread}");
}
