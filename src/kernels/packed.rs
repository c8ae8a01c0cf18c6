//! Weight matrices kept in ggml's 32-element blocks instead of being widened to f32.
//!
//! Single-stream decode reads every weight once per token, so its speed is set by bytes per
//! weight: Q4_1 is 5 bits against f32's 32. Scales are widened to f32 once at load and stored
//! apart from the quantised values so the kernels load them without conversion.

use half::f16;

use super::GgmlType;
use super::repack;

/// Elements per quantisation block (all supported ggml types).
pub const BLOCK: usize = 32;

/// How the quantised values of a block are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockFormat {
    /// 16 bytes of 4-bit values (element `j` the low nibble of byte `j`, element `j + 16` the
    /// high nibble); `x = q * scale + min`. Q4_1 as is; Q4_0 with `min = -8 * scale`, which
    /// gives bit-identical values to ggml's `(q - 8) * scale`.
    Nibbles,
    /// 32 signed bytes; `x = q * scale` (Q8_0).
    Bytes,
    /// 32 signed bytes whose halves (elements 0..16 and 16..32) have a scale each:
    /// `x = q * scale[half]` (Q6_K, whose int6 values have a scale per 16).
    HalfScaledBytes,
    /// 32 signed bytes; `x = q * scale + min` (Q5_K's 5-bit values with a scale and min per 32).
    OffsetBytes,
}

impl BlockFormat {
    /// Bytes of quantised values per block.
    pub const fn quant_bytes(self) -> usize {
        match self {
            BlockFormat::Nibbles => BLOCK / 2,
            BlockFormat::Bytes | BlockFormat::HalfScaledBytes | BlockFormat::OffsetBytes => BLOCK,
        }
    }

    /// Scales per block in [`PackedMatrix::scales`].
    pub const fn scales_per_block(self) -> usize {
        match self {
            BlockFormat::HalfScaledBytes => 2,
            _ => 1,
        }
    }

    /// Whether blocks have a min (one per block in [`PackedMatrix::mins`]).
    pub const fn has_mins(self) -> bool {
        matches!(self, BlockFormat::Nibbles | BlockFormat::OffsetBytes)
    }
}

/// A row-major `[rows, cols]` matrix (`[out, in]` for a projection) in blocks along `cols`.
#[derive(Debug, Clone, PartialEq)]
pub struct PackedMatrix {
    pub format: BlockFormat,
    pub rows: usize,
    pub cols: usize,
    /// Row-major `[rows, cols / 32, format.scales_per_block()]`.
    pub scales: Vec<f32>,
    /// One per block, `[rows, cols / 32]`; empty unless `format.has_mins()`.
    pub mins: Vec<f32>,
    /// `[rows, cols / 32, quant_bytes]`
    pub quants: Vec<u8>,
}

impl PackedMatrix {
    /// Whether `ty` has a packed kernel; projections of other types are widened to f32.
    pub fn has_kernel(ty: GgmlType) -> bool {
        Self::format_of(ty).is_some()
    }

    /// The packed format `ty` runs in: its own (Q4_0, Q4_1, Q8_0) or a lossless repacking
    /// (Q4_K, Q5_0, Q5_K, Q6_K, IQ4_NL, IQ4_XS; see `repack.rs`).
    fn format_of(ty: GgmlType) -> Option<BlockFormat> {
        match ty {
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q4_K => Some(BlockFormat::Nibbles),
            GgmlType::Q8_0 | GgmlType::Q5_0 | GgmlType::IQ4_NL | GgmlType::IQ4_XS => Some(BlockFormat::Bytes),
            GgmlType::Q6_K => Some(BlockFormat::HalfScaledBytes),
            GgmlType::Q5_K => Some(BlockFormat::OffsetBytes),
            _ => None,
        }
    }

    /// Repacks a ggml tensor; `None` for types without a packed kernel (F32, F16, Q6_K…)
    /// or shapes that are not whole blocks, which the caller then widens to f32.
    pub fn from_ggml(ty: GgmlType, data: &[u8], rows: usize, cols: usize) -> Option<PackedMatrix> {
        let format = Self::format_of(ty)?;
        let (block_elements, block_bytes) = ty.block_layout();
        let (block_elements, block_bytes) = (block_elements as usize, block_bytes as usize);
        if !cols.is_multiple_of(block_elements) || data.len() != rows * cols / block_elements * block_bytes {
            return None;
        }
        let blocks = rows * cols / BLOCK;
        let mut m = PackedMatrix {
            format,
            rows,
            cols,
            scales: Vec::with_capacity(blocks * format.scales_per_block()),
            mins: Vec::with_capacity(if format.has_mins() { blocks } else { 0 }),
            quants: Vec::with_capacity(blocks * format.quant_bytes()),
        };
        let half = |b: &[u8]| f16::from_le_bytes([b[0], b[1]]).to_f32();
        for block in data.chunks_exact(block_bytes) {
            let mut blocks = repack::Blocks {
                scales: &mut m.scales,
                mins: &mut m.mins,
                quants: &mut m.quants,
            };
            if repack::push_repacked(ty, block, &mut blocks) {
                continue;
            }
            let scale = half(block);
            m.scales.push(scale);
            match ty {
                GgmlType::Q4_0 => m.mins.push(-8.0 * scale),
                GgmlType::Q4_1 => m.mins.push(half(&block[2..])),
                _ => {}
            }
            m.quants.extend_from_slice(&block[block_bytes - format.quant_bytes()..]);
        }
        Some(m)
    }

    pub fn blocks_per_row(&self) -> usize {
        self.cols / BLOCK
    }

    /// The weights as f32, exactly as the kernels see them (for tests and references).
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0.0; self.rows * self.cols];
        for (block, values) in out.chunks_exact_mut(BLOCK).enumerate() {
            values.copy_from_slice(&self.block_values(block));
        }
        out
    }

    /// Block `index` (row-major over `[rows, cols / 32]`) widened to f32.
    pub fn block_values(&self, index: usize) -> [f32; BLOCK] {
        let scale = self.scales[index * self.format.scales_per_block()];
        let q = &self.quants[index * self.format.quant_bytes()..][..self.format.quant_bytes()];
        let mut out = [0.0; BLOCK];
        match self.format {
            BlockFormat::Nibbles => {
                let min = self.mins[index];
                for (j, &byte) in q.iter().enumerate() {
                    out[j] = f32::from(byte & 0x0f).mul_add(scale, min);
                    out[j + BLOCK / 2] = f32::from(byte >> 4).mul_add(scale, min);
                }
            }
            BlockFormat::Bytes => {
                for (v, &byte) in out.iter_mut().zip(q) {
                    *v = f32::from(byte as i8) * scale;
                }
            }
            BlockFormat::HalfScaledBytes => {
                let high_scale = self.scales[2 * index + 1];
                for (j, (v, &byte)) in out.iter_mut().zip(q).enumerate() {
                    *v = f32::from(byte as i8) * if j < BLOCK / 2 { scale } else { high_scale };
                }
            }
            BlockFormat::OffsetBytes => {
                let min = self.mins[index];
                for (v, &byte) in out.iter_mut().zip(q) {
                    *v = f32::from(byte as i8).mul_add(scale, min);
                }
            }
        }
        out
    }

    /// The rows in the order `order` names them (`order[i]` is the source of row `i`).
    pub fn reorder_rows(&self, order: &[usize]) -> PackedMatrix {
        let bpr = self.blocks_per_row();
        let (spr, qpr) = (bpr * self.format.scales_per_block(), bpr * self.format.quant_bytes());
        let mut out = PackedMatrix {
            rows: order.len(),
            scales: Vec::with_capacity(order.len() * spr),
            mins: Vec::with_capacity(self.mins.len().min(order.len() * bpr)),
            quants: Vec::with_capacity(order.len() * qpr),
            ..self.clone_shape()
        };
        for &src in order {
            out.scales.extend_from_slice(&self.scales[src * spr..][..spr]);
            if !self.mins.is_empty() {
                out.mins.extend_from_slice(&self.mins[src * bpr..][..bpr]);
            }
            out.quants.extend_from_slice(&self.quants[src * qpr..][..qpr]);
        }
        out
    }

    /// The matrices' rows one after another; `None` unless they share format and width.
    pub fn stack(parts: &[PackedMatrix]) -> Option<PackedMatrix> {
        let first = parts.first()?;
        if parts.iter().any(|p| p.format != first.format || p.cols != first.cols) {
            return None;
        }
        let mut out = PackedMatrix {
            rows: parts.iter().map(|p| p.rows).sum(),
            ..first.clone_shape()
        };
        for p in parts {
            out.scales.extend_from_slice(&p.scales);
            out.mins.extend_from_slice(&p.mins);
            out.quants.extend_from_slice(&p.quants);
        }
        Some(out)
    }

    /// Bytes the weights occupy (what one decode step reads).
    pub fn size_bytes(&self) -> usize {
        4 * (self.scales.len() + self.mins.len()) + self.quants.len()
    }

    fn clone_shape(&self) -> PackedMatrix {
        PackedMatrix {
            format: self.format,
            rows: 0,
            cols: self.cols,
            scales: Vec::new(),
            mins: Vec::new(),
            quants: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_blocks::random_blocks;
    use crate::model::gguf::{dequantize, quantize};

    fn sample(n: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0).collect()
    }

    #[test]
    fn packed_values_equal_ggml_dequantisation() {
        // Q4_0 and Q8_0 are bit-identical; Q4_1's fused multiply-add may differ from ggml's
        // separate multiply and add by one rounding of `q * scale` (values here are below 3).
        let (rows, cols) = (3, 64);
        let data = sample(rows * cols);
        for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0] {
            let bytes = quantize(ty, &data).expect("quantise");
            let reference = dequantize(ty, &bytes, rows * cols).expect("dequantise");
            let packed = PackedMatrix::from_ggml(ty, &bytes, rows, cols).expect("packable");
            for (a, b) in packed.dequantize().iter().zip(&reference) {
                let tolerance = if ty == GgmlType::Q4_1 { 1e-6 } else { 0.0 };
                assert!((a - b).abs() <= tolerance, "{ty}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn repacked_types_keep_ggml_values() {
        // Bytes repackings are bit-identical; Q4_K's and Q5_K's fused `q * scale + min` is
        // allowed one rounding of each term against ggml's multiply and subtract (both terms
        // are exact in f32, so they agree bit for bit in practice).
        for (ty, rows, cols) in [
            (GgmlType::Q4_K, 2, 512),
            (GgmlType::Q5_0, 3, 64),
            (GgmlType::IQ4_NL, 3, 64),
            (GgmlType::IQ4_XS, 2, 256),
            (GgmlType::Q5_K, 2, 512),
            (GgmlType::Q6_K, 2, 512),
        ] {
            let per_block = ty.block_layout().0 as usize;
            let bytes = random_blocks(ty, rows * cols / per_block, 0);
            let reference = dequantize(ty, &bytes, rows * cols).expect("dequantise");
            let packed = PackedMatrix::from_ggml(ty, &bytes, rows, cols).expect("packable");
            assert!(PackedMatrix::has_kernel(ty));
            for (i, (a, b)) in packed.dequantize().iter().zip(&reference).enumerate() {
                let block = i / BLOCK;
                let tolerance = if packed.format.has_mins() {
                    2.0 * f32::EPSILON * (31.0 * packed.scales[block].abs() + packed.mins[block].abs())
                } else {
                    0.0
                };
                assert!((a - b).abs() <= tolerance, "{ty} element {i}: {a} vs {b}");
            }
        }
        assert!(!PackedMatrix::has_kernel(GgmlType::Q3_K));
    }

    #[test]
    fn unsupported_types_and_partial_blocks_are_declined() {
        let bytes = quantize(GgmlType::F16, &sample(64)).expect("quantise");
        assert!(PackedMatrix::from_ggml(GgmlType::F16, &bytes, 2, 32).is_none());
        let bytes = quantize(GgmlType::Q8_0, &sample(64)).expect("quantise");
        assert!(PackedMatrix::from_ggml(GgmlType::Q8_0, &bytes, 1, 64).is_some());
        assert!(PackedMatrix::from_ggml(GgmlType::Q8_0, &bytes, 2, 64).is_none());
    }

    #[test]
    fn reorder_and_stack_move_whole_rows() {
        let cols = 64;
        let pack = |rows: usize, ty| {
            let bytes = quantize(ty, &sample(rows * cols)).expect("quantise");
            PackedMatrix::from_ggml(ty, &bytes, rows, cols).expect("packable")
        };
        let a = pack(3, GgmlType::Q4_1);
        let dense = a.dequantize();
        let row = |m: &[f32], r: usize| m[r * cols..(r + 1) * cols].to_vec();
        let reordered = a.reorder_rows(&[2, 0, 1]).dequantize();
        assert_eq!(row(&reordered, 0), row(&dense, 2));
        assert_eq!(row(&reordered, 2), row(&dense, 1));
        let stacked = PackedMatrix::stack(&[a.clone(), a.reorder_rows(&[1])]).expect("same format");
        assert_eq!(stacked.rows, 4);
        assert_eq!(row(&stacked.dequantize(), 3), row(&dense, 1));
        assert!(PackedMatrix::stack(&[a, pack(1, GgmlType::Q8_0)]).is_none());
    }
}
