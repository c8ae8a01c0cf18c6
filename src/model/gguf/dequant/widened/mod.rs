//! Dequantisation of the ggml block types kiln widens to f32 at load (Q5_0, Q5_1, the
//! K-quants, IQ4_NL, IQ4_XS), written as gguf-py's `gguf.quants` reference computes them,
//! operation for operation in f32, so the results are bit-identical.
//!
//! K-quant super-blocks hold 256 elements in sub-blocks of 16 or 32, each with its own scale.

use half::f16;

use crate::kernels::{GgmlType, IQ4_VALUES, k4_scale_min};

/// Elements per K-quant super-block (ggml's `QK_K`).
const QK_K: usize = 256;

fn half(bytes: &[u8]) -> f32 {
    f16::from_le_bytes([bytes[0], bytes[1]]).to_f32()
}

/// Appends the f32 values of whole blocks of `ty`; `false` when `ty` is not one of this file's.
pub(super) fn dequantize_more(ty: GgmlType, data: &[u8], out: &mut Vec<f32>) -> bool {
    let (_, block_bytes) = ty.block_layout();
    let blocks = data.chunks_exact(block_bytes as usize);
    match ty {
        GgmlType::Q5_0 => blocks.for_each(|b| q5(b, false, out)),
        GgmlType::Q5_1 => blocks.for_each(|b| q5(b, true, out)),
        GgmlType::Q2_K => blocks.for_each(|b| q2_k(b, out)),
        GgmlType::Q3_K => blocks.for_each(|b| q3_k(b, out)),
        GgmlType::Q4_K => blocks.for_each(|b| q4_k(b, out)),
        GgmlType::Q5_K => blocks.for_each(|b| q5_k(b, out)),
        GgmlType::Q6_K => blocks.for_each(|b| q6_k(b, out)),
        GgmlType::IQ4_NL => blocks.for_each(|b| iq4_nl(b, out)),
        GgmlType::IQ4_XS => blocks.for_each(|b| iq4_xs(b, out)),
        _ => return false,
    }
    true
}

/// Q5_0: `f16 d`, `u32 qh` (bit j: element j's fifth bit), `u8 qs[16]` (nibbles as Q4_0);
/// `x = d * (q - 16)`. Q5_1 adds `f16 m` after `d` and is `x = d * q + m`.
fn q5(block: &[u8], with_min: bool, out: &mut Vec<f32>) {
    let d = half(block);
    let (m, rest) = if with_min {
        (half(&block[2..]), &block[4..])
    } else {
        (0.0, &block[2..])
    };
    let qh = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
    let qs = &rest[4..20];
    for j in 0..32 {
        let low = (qs[j % 16] >> (4 * (j / 16))) & 0x0f;
        let q = low | ((((qh >> j) & 1) as u8) << 4);
        out.push(if with_min {
            d * f32::from(q) + m
        } else {
            d * f32::from(q as i8 - 16)
        });
    }
}

/// Q2_K: `u8 scales[16]` (low nibble scale, high nibble min, per 16 elements), `u8 qs[64]`
/// (2-bit), `f16 d`, `f16 dmin`; `x = d * sc * q - dmin * m`.
fn q2_k(block: &[u8], out: &mut Vec<f32>) {
    let (scales, qs) = (&block[..16], &block[16..80]);
    let (d, dmin) = (half(&block[80..]), half(&block[82..]));
    for i in 0..QK_K {
        let (h, shift, l) = (i / 128, (i / 32) % 4, i % 32);
        let q = (qs[h * 32 + l] >> (2 * shift)) & 3;
        let sc = scales[i / 16];
        let dl = d * f32::from(sc & 0x0f);
        let ml = dmin * f32::from(sc >> 4);
        out.push(dl * f32::from(q) - ml);
    }
}

/// Q3_K: `u8 hmask[32]` (the high bit, inverted), `u8 qs[64]` (low 2 bits), `u8 scales[12]`
/// (sixteen 6-bit scales, offset 32), `f16 d`; `x = d * sc * q`.
fn q3_k(block: &[u8], out: &mut Vec<f32>) {
    let (hmask, qs, packed) = (&block[..32], &block[32..96], &block[96..108]);
    let d = half(&block[108..]);
    let scale = |i: usize| {
        let low = (packed[i % 8] >> (4 * (i / 8))) & 0x0f;
        let high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
        f32::from((low | (high << 4)) as i8 - 32)
    };
    for i in 0..QK_K {
        let (h, shift, l) = (i / 128, (i / 32) % 4, i % 32);
        let low = ((qs[h * 32 + l] >> (2 * shift)) & 3) as i8;
        let high = (((hmask[l] >> (i / 32)) & 1) ^ 1) as i8;
        let q = f32::from(low - (high << 2));
        out.push(d * scale(i / 16) * q);
    }
}

/// Q4_K's and Q5_K's `(scale, min)` of sub-block `j`, as f32.
fn scale_min_k4(packed: &[u8], j: usize) -> (f32, f32) {
    let (sc, min) = k4_scale_min(packed, j);
    (f32::from(sc), f32::from(min))
}

/// Q4_K: `f16 d`, `f16 dmin`, `u8 scales[12]`, `u8 qs[128]` (32-byte rows: low nibbles are
/// one sub-block of 32, high nibbles the next); `x = d * sc * q - dmin * m`.
fn q4_k(block: &[u8], out: &mut Vec<f32>) {
    let (d, dmin) = (half(block), half(&block[2..]));
    let (packed, qs) = (&block[4..16], &block[16..144]);
    for j in 0..8 {
        let (sc, m) = scale_min_k4(packed, j);
        let (dl, ml) = (d * sc, dmin * m);
        let row = &qs[(j / 2) * 32..(j / 2) * 32 + 32];
        out.extend(row.iter().map(|&q| dl * f32::from((q >> (4 * (j % 2))) & 0x0f) - ml));
    }
}

/// Q5_K: Q4_K plus `u8 qh[32]` before `qs` (bit j of byte l: element l of sub-block j's
/// fifth bit).
fn q5_k(block: &[u8], out: &mut Vec<f32>) {
    let (d, dmin) = (half(block), half(&block[2..]));
    let (packed, qh, qs) = (&block[4..16], &block[16..48], &block[48..176]);
    for j in 0..8 {
        let (sc, m) = scale_min_k4(packed, j);
        let (dl, ml) = (d * sc, dmin * m);
        for l in 0..32 {
            let low = (qs[(j / 2) * 32 + l] >> (4 * (j % 2))) & 0x0f;
            let q = low | (((qh[l] >> j) & 1) << 4);
            out.push(dl * f32::from(q) - ml);
        }
    }
}

/// Q6_K: `u8 ql[128]` (low 4 bits), `u8 qh[64]` (high 2 bits), `i8 scales[16]`, `f16 d`;
/// `x = d * sc * (q - 32)`, per 16 elements.
fn q6_k(block: &[u8], out: &mut Vec<f32>) {
    let (ql, qh, scales) = (&block[..128], &block[128..192], &block[192..208]);
    let d = half(&block[208..]);
    for i in 0..QK_K {
        let (h, rest) = (i / 128, i % 128);
        let low = (ql[h * 64 + rest % 64] >> (4 * (rest / 64))) & 0x0f;
        let high = (qh[h * 32 + rest % 32] >> (2 * (rest / 32))) & 3;
        let q = f32::from((low | (high << 4)) as i8 - 32);
        out.push(d * f32::from(scales[i / 16] as i8) * q);
    }
}

/// IQ4_NL: `f16 d`, `u8 qs[16]` (nibbles as Q4_0, indices into the non-linear grid).
fn iq4_nl(block: &[u8], out: &mut Vec<f32>) {
    let d = half(block);
    let qs = &block[2..18];
    for j in 0..32 {
        let q = (qs[j % 16] >> (4 * (j / 16))) & 0x0f;
        out.push(d * f32::from(IQ4_VALUES[q as usize]));
    }
}

/// IQ4_XS: `f16 d`, `u16 scales_h`, `u8 scales_l[4]` (eight 6-bit scales, offset 32), `u8
/// qs[128]` (per 32 elements, nibbles as IQ4_NL).
fn iq4_xs(block: &[u8], out: &mut Vec<f32>) {
    let d = half(block);
    let scales_h = u16::from_le_bytes([block[2], block[3]]);
    let (scales_l, qs) = (&block[4..8], &block[8..136]);
    for ib in 0..8 {
        let low = (scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f;
        let high = ((scales_h >> (2 * ib)) & 3) as u8;
        let dl = d * f32::from((low | (high << 4)) as i8 - 32);
        for k in 0..32 {
            let q = (qs[ib * 16 + k % 16] >> (4 * (k / 16))) & 0x0f;
            out.push(dl * f32::from(IQ4_VALUES[q as usize]));
        }
    }
}

#[cfg(test)]
mod tests;
