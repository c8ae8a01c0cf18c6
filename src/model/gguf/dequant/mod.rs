//! Block (de)quantisation for the ggml types kiln supports, bit-exact with ggml's reference
//! (`ggml-quants.c`). Quantisation lives here too so the block layouts are written down once.
//!
//! Layouts (32 elements per block):
//! - Q8_0: `f16 d`, `i8 q[32]`; `x = q * d`.
//! - Q4_0: `f16 d`, `u8 qs[16]`; element `j` is the low nibble of `qs[j]`, element `j + 16` the
//!   high nibble; `x = (q - 8) * d`.
//! - Q4_1: `f16 d`, `f16 m`, `u8 qs[16]` (nibbles as Q4_0); `x = q * d + m`.
//!
//! The other types llama.cpp's presets write (Q5_0, Q5_1, Q2_K..Q6_K, IQ4_NL, IQ4_XS) are
//! dequantised in `dequant/widened/`.

pub(super) mod widened;

use crate::kernels::GgmlType;
use half::{bf16, f16};
use widened::dequantize_more;

/// Why a byte buffer could not be turned into f32s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DequantError {
    #[error("type {0} is not supported")]
    Unsupported(GgmlType),
    #[error("{ty}: {elements} elements need {expected} bytes, got {got}")]
    SizeMismatch {
        ty: GgmlType,
        elements: usize,
        expected: usize,
        got: usize,
    },
    #[error("{ty}: {elements} elements are not a whole number of {block}-element blocks")]
    NotWholeBlocks {
        ty: GgmlType,
        elements: usize,
        block: usize,
    },
}

const QK: usize = 32;

/// Bytes needed for `elements` values of `ty`, if `elements` is a whole number of blocks.
pub(crate) fn byte_size(ty: GgmlType, elements: u64) -> Option<u64> {
    let (block, bytes) = ty.block_layout();
    if !elements.is_multiple_of(block) {
        return None;
    }
    (elements / block).checked_mul(bytes)
}

/// Dequantises `elements` values of type `ty` from `data` (which must be exactly their size).
pub fn dequantize(ty: GgmlType, data: &[u8], elements: usize) -> Result<Vec<f32>, DequantError> {
    let expected = byte_size(ty, elements as u64).map(|b| b as usize);
    if expected != Some(data.len()) {
        return Err(DequantError::SizeMismatch {
            ty,
            elements,
            expected: expected.unwrap_or(0),
            got: data.len(),
        });
    }
    let mut out = Vec::with_capacity(elements);
    match ty {
        GgmlType::F32 => out.extend(
            data.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        ),
        GgmlType::F16 => out.extend(data.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())),
        GgmlType::BF16 => out.extend(data.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())),
        GgmlType::Q8_0 => {
            for block in data.chunks_exact(34) {
                let d = f16::from_le_bytes([block[0], block[1]]).to_f32();
                out.extend(block[2..].iter().map(|&q| f32::from(q as i8) * d));
            }
        }
        GgmlType::Q4_0 => {
            for block in data.chunks_exact(18) {
                let d = f16::from_le_bytes([block[0], block[1]]).to_f32();
                let qs = &block[2..];
                out.extend(qs.iter().map(|&q| (f32::from(q & 0x0f) - 8.0) * d));
                out.extend(qs.iter().map(|&q| (f32::from(q >> 4) - 8.0) * d));
            }
        }
        GgmlType::Q4_1 => {
            for block in data.chunks_exact(20) {
                let d = f16::from_le_bytes([block[0], block[1]]).to_f32();
                let m = f16::from_le_bytes([block[2], block[3]]).to_f32();
                let qs = &block[4..];
                out.extend(qs.iter().map(|&q| f32::from(q & 0x0f) * d + m));
                out.extend(qs.iter().map(|&q| f32::from(q >> 4) * d + m));
            }
        }
        other => {
            if !dequantize_more(other, data, &mut out) {
                return Err(DequantError::Unsupported(other));
            }
        }
    }
    Ok(out)
}

/// Quantises f32 values to `ty` (ggml's reference `quantize_row_*_ref` rounding). For block
/// types `data.len()` must be a multiple of 32.
pub fn quantize(ty: GgmlType, data: &[f32]) -> Result<Vec<u8>, DequantError> {
    let mismatch = || DequantError::NotWholeBlocks {
        ty,
        elements: data.len(),
        block: QK,
    };
    let blocks = || data.chunks_exact(QK);
    let mut out = Vec::new();
    match ty {
        GgmlType::F32 => out.extend(data.iter().flat_map(|v| v.to_le_bytes())),
        GgmlType::F16 => out.extend(data.iter().flat_map(|v| f16::from_f32(*v).to_le_bytes())),
        GgmlType::BF16 => out.extend(data.iter().flat_map(|v| bf16::from_f32(*v).to_le_bytes())),
        GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q4_1 if !data.len().is_multiple_of(QK) => {
            return Err(mismatch());
        }
        GgmlType::Q8_0 => blocks().for_each(|b| quantize_q8_0(b, &mut out)),
        GgmlType::Q4_0 => blocks().for_each(|b| quantize_q4_0(b, &mut out)),
        GgmlType::Q4_1 => blocks().for_each(|b| quantize_q4_1(b, &mut out)),
        other => return Err(DequantError::Unsupported(other)),
    }
    Ok(out)
}

fn quantize_q8_0(x: &[f32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend(f16::from_f32(d).to_le_bytes());
    out.extend(x.iter().map(|v| (v * id).round() as i8 as u8));
}

fn quantize_q4_0(x: &[f32], out: &mut Vec<u8>) {
    // The signed value of largest magnitude maps to -8 exactly, as in ggml.
    let max = x.iter().fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend(f16::from_f32(d).to_le_bytes());
    let q = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
    out.extend((0..QK / 2).map(|j| q(x[j]) | (q(x[j + QK / 2]) << 4)));
}

fn quantize_q4_1(x: &[f32], out: &mut Vec<u8>) {
    let min = x.iter().copied().fold(f32::INFINITY, f32::min);
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend(f16::from_f32(d).to_le_bytes());
    out.extend(f16::from_f32(min).to_le_bytes());
    let q = |v: f32| (((v - min) * id + 0.5) as i8).min(15) as u8;
    out.extend((0..QK / 2).map(|j| q(x[j]) | (q(x[j + QK / 2]) << 4)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_0_nibble_order_matches_ggml() {
        // d = 1.0, qs[j] = low nibble j%16, high nibble 15 - j%16.
        let mut block = f16::from_f32(1.0).to_le_bytes().to_vec();
        block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let v = dequantize(GgmlType::Q4_0, &block, 32).expect("dequantize");
        for j in 0..16 {
            assert_eq!(v[j], j as f32 - 8.0);
            assert_eq!(v[j + 16], (15 - j) as f32 - 8.0);
        }
    }

    #[test]
    fn q4_1_uses_min() {
        let mut block = f16::from_f32(0.5).to_le_bytes().to_vec();
        block.extend(f16::from_f32(-2.0).to_le_bytes());
        block.extend(std::iter::repeat_n(0x31u8, 16));
        let v = dequantize(GgmlType::Q4_1, &block, 32).expect("dequantize");
        assert_eq!(v[0], 1.0 * 0.5 - 2.0);
        assert_eq!(v[16], 3.0 * 0.5 - 2.0);
    }

    #[test]
    fn zero_blocks_quantise_to_zero() {
        for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1] {
            let bytes = quantize(ty, &[0.0; 64]).expect("quantize");
            let back = dequantize(ty, &bytes, 64).expect("dequantize");
            assert!(back.iter().all(|v| *v == 0.0), "{ty}");
        }
    }

    #[test]
    fn size_and_type_errors() {
        assert!(matches!(
            dequantize(GgmlType::Q8_0, &[0; 33], 32),
            Err(DequantError::SizeMismatch { .. })
        ));
        assert_eq!(
            dequantize(GgmlType::IQ2_XXS, &[0; 66], 256),
            Err(DequantError::Unsupported(GgmlType::IQ2_XXS))
        );
        assert!(quantize(GgmlType::Q4_0, &[0.0; 31]).is_err());
    }
}
