//! Lossless repacking of ggml types whose 32-element sub-blocks fit the packed formats, so
//! they run on the Q4_1 and Q8_0 kernels instead of being widened to f32:
//! - Q4_K: each 32-element sub-block is `x = (d * sc) * q - (dmin * m)` with 4-bit `q`:
//!   [`BlockFormat::Nibbles`](super::BlockFormat::Nibbles) with an f32 scale and min;
//! - IQ4_NL and IQ4_XS (grid values are signed bytes):
//!   [`BlockFormat::Bytes`](super::BlockFormat::Bytes) with an f32 scale;
//! - Q6_K: `x = (d * sc) * (q - 32)` with int6 `q` and an 8-bit `sc` per 16 elements:
//!   [`BlockFormat::HalfScaledBytes`](super::BlockFormat::HalfScaledBytes), `d * sc` per half;
//! - Q5_K: Q4_K with 5-bit `q`: [`BlockFormat::OffsetBytes`](super::BlockFormat::OffsetBytes)
//!   (its per-half scales both `d * sc`); Q5_1 (`x = d * q + m`, 5-bit `q`) likewise;
//! - Q3_K: `x = (d * sc) * q` with `q` in -4..4 and a 6-bit `sc` per 16 elements:
//!   [`BlockFormat::HalfScaledBytes`](super::BlockFormat::HalfScaledBytes), as Q6_K.
//!
//! Every scale is `d * sc` with an f16 `d` and an integer `sc` of at most 8 bits, so it is
//! exact in f32, as is its product with a `q` of at most 6 bits: the packed values equal
//! gguf-py's bit for bit (Q4_K/Q5_K: its `q * scale - dmin * m` rounds once, like an FMA).

use half::f16;

use super::GgmlType;

/// Elements per packed block (the packed formats' `BLOCK`).
const BLOCK: usize = 32;

/// Where repacked blocks go: a packed matrix's per-block scales and mins and its quants.
pub(super) struct Blocks<'a> {
    pub scales: &'a mut Vec<f32>,
    pub mins: &'a mut Vec<f32>,
    pub quants: &'a mut Vec<u8>,
}

/// IQ4_NL's and IQ4_XS's non-linear 4-bit grid.
pub const IQ4_VALUES: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

fn half(bytes: &[u8]) -> f32 {
    f16::from_le_bytes([bytes[0], bytes[1]]).to_f32()
}

/// Q4_K's and Q5_K's eight 6-bit `(scale, min)` pairs packed in 12 bytes: pair `j`.
pub fn k4_scale_min(packed: &[u8], j: usize) -> (u8, u8) {
    let (d, m, md) = (&packed[..4], &packed[4..8], &packed[8..12]);
    if j < 4 {
        (d[j] & 0x3f, m[j] & 0x3f)
    } else {
        let k = j - 4;
        (
            (md[k] & 0x0f) | ((d[k] >> 2) & 0x30),
            (md[k] >> 4) | ((m[k] >> 2) & 0x30),
        )
    }
}

/// Appends one ggml block of `ty` to `m` as 32-element packed blocks; `false` for a type
/// this file does not repack.
pub(super) fn push_repacked(ty: GgmlType, block: &[u8], m: &mut Blocks<'_>) -> bool {
    match ty {
        GgmlType::Q4_K => q4_k(block, m),
        GgmlType::IQ4_NL => {
            m.scales.push(half(block));
            push_grid(&block[2..18], m);
        }
        GgmlType::IQ4_XS => iq4_xs(block, m),
        GgmlType::Q5_K => q5_k(block, m),
        GgmlType::Q6_K => q6_k(block, m),
        GgmlType::Q5_1 => q5_1(block, m),
        GgmlType::Q3_K => q3_k(block, m),
        _ => return false,
    }
    true
}

fn q4_k(block: &[u8], m: &mut Blocks<'_>) {
    let (d, dmin) = (half(block), half(&block[2..]));
    let (packed, qs) = (&block[4..16], &block[16..144]);
    for j in 0..8 {
        let (sc, min) = k4_scale_min(packed, j);
        m.scales.push(d * f32::from(sc));
        m.mins.push(-(dmin * f32::from(min)));
        let row = &qs[(j / 2) * 32..][..32];
        let nibble = |l: usize| (row[l] >> (4 * (j % 2))) & 0x0f;
        m.quants
            .extend((0..BLOCK / 2).map(|k| nibble(k) | (nibble(k + BLOCK / 2) << 4)));
    }
}

/// 16 bytes of IQ4 nibbles (element `j` low nibble of byte `j`, `j + 16` the high one) as
/// 32 signed grid values.
fn push_grid(qs: &[u8], m: &mut Blocks<'_>) {
    m.quants
        .extend((0..BLOCK).map(|j| IQ4_VALUES[usize::from((qs[j % 16] >> (4 * (j / 16))) & 0x0f)] as u8));
}

fn iq4_xs(block: &[u8], m: &mut Blocks<'_>) {
    let d = half(block);
    let scales_h = u16::from_le_bytes([block[2], block[3]]);
    let (scales_l, qs) = (&block[4..8], &block[8..136]);
    for ib in 0..8 {
        let low = (scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f;
        let high = ((scales_h >> (2 * ib)) & 3) as u8;
        m.scales.push(d * f32::from((low | (high << 4)) as i8 - 32));
        push_grid(&qs[ib * 16..][..16], m);
    }
}

fn q5_k(block: &[u8], m: &mut Blocks<'_>) {
    let (d, dmin) = (half(block), half(&block[2..]));
    let (packed, qh, qs) = (&block[4..16], &block[16..48], &block[48..176]);
    for j in 0..8 {
        let (sc, min) = k4_scale_min(packed, j);
        let scale = d * f32::from(sc);
        m.scales.extend([scale, scale]); // one per half, as OffsetBytes holds them
        m.mins.push(-(dmin * f32::from(min)));
        let low = &qs[(j / 2) * 32..][..32];
        m.quants
            .extend((0..BLOCK).map(|l| ((low[l] >> (4 * (j % 2))) & 0x0f) | (((qh[l] >> j) & 1) << 4)));
    }
}

/// Q6_K's 256 values in ggml's order: two halves of 128, each from 64 bytes of low nibbles,
/// 32 bytes of high bit pairs and 8 scales.
fn q6_k(block: &[u8], m: &mut Blocks<'_>) {
    let (ql, qh, scales) = (&block[..128], &block[128..192], &block[192..208]);
    let d = half(&block[208..]);
    let mut q = [0i8; 256];
    for n in 0..2 {
        let (ql, qh, q) = (&ql[64 * n..], &qh[32 * n..], &mut q[128 * n..]);
        for l in 0..32 {
            let high = |shift: u32| ((qh[l] >> shift) & 3) << 4;
            q[l] = ((ql[l] & 0x0f) | high(0)) as i8 - 32;
            q[l + 32] = ((ql[l + 32] & 0x0f) | high(2)) as i8 - 32;
            q[l + 64] = ((ql[l] >> 4) | high(4)) as i8 - 32;
            q[l + 96] = ((ql[l + 32] >> 4) | high(6)) as i8 - 32;
        }
    }
    m.scales.extend(scales.iter().map(|&sc| d * f32::from(sc as i8)));
    m.quants.extend(q.iter().map(|&v| v as u8));
}

/// Q5_1: `f16 d`, `f16 m`, `u32 qh` (bit j: element j's fifth bit), 16 bytes of nibbles.
fn q5_1(block: &[u8], m: &mut Blocks<'_>) {
    let (d, min) = (half(block), half(&block[2..]));
    let qh = u32::from_le_bytes([block[4], block[5], block[6], block[7]]);
    let qs = &block[8..24];
    m.scales.extend([d, d]);
    m.mins.push(min);
    m.quants
        .extend((0..BLOCK).map(|j| ((qs[j % 16] >> (4 * (j / 16))) & 0x0f) | ((((qh >> j) & 1) as u8) << 4)));
}

/// Q3_K: `u8 hmask[32]` (the high bit, inverted), `u8 qs[64]` (low 2 bits), sixteen 6-bit
/// scales (offset 32) in 12 bytes, `f16 d`; element `i` as gguf-py orders it.
fn q3_k(block: &[u8], m: &mut Blocks<'_>) {
    let (hmask, qs, packed) = (&block[..32], &block[32..96], &block[96..108]);
    let d = half(&block[108..]);
    m.scales.extend((0..16).map(|i| {
        let low = (packed[i % 8] >> (4 * (i / 8))) & 0x0f;
        let high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
        d * f32::from((low | (high << 4)) as i8 - 32)
    }));
    m.quants.extend((0..256).map(|i| {
        let (h, shift, l) = (i / 128, (i / 32) % 4, i % 32);
        let low = ((qs[h * 32 + l] >> (2 * shift)) & 3) as i8;
        let high = (((hmask[l] >> (i / 32)) & 1) ^ 1) as i8;
        (low - (high << 2)) as u8
    }));
}
