//! Weight matrices kept in ggml's 32-element blocks instead of being widened to f32.
//!
//! Single-stream decode reads every weight once per token, so its speed is set by bytes per
//! weight: Q4_1 is 5 bits against f32's 32. Scales are widened to f32 once at load and stored
//! apart from the quantised values so the kernels load them without conversion.

use std::sync::OnceLock;

use half::f16;

use super::GgmlType;
use super::repack;

/// Elements per quantisation block (all supported ggml types).
pub const BLOCK: usize = 32;
/// Bytes of a [`BlockFormat::FiveBit`] block's values: 4 of high bits, 16 of nibbles.
pub const FIVE_BIT_BYTES: usize = 4 + BLOCK / 2;

/// How the quantised values of a block are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockFormat {
    /// 16 bytes of 4-bit values (element `j` the low nibble of byte `j`, element `j + 16` the
    /// high nibble); `x = q * scale + min`. Q4_1 as is; Q4_0 with `min = -8 * scale`, which
    /// gives bit-identical values to ggml's `(q - 8) * scale`.
    Nibbles,
    /// 32 signed bytes; `x = q * scale` (Q8_0).
    Bytes,
    /// Q5_0's 5-bit values as ggml stores them, 20 bytes: a little-endian `u32` whose bit `j`
    /// is element `j`'s high bit, then 16 bytes of low nibbles in [`BlockFormat::Nibbles`]'
    /// order; `x = (q - 16) * scale`, 6 bits a weight with the f32 scale (Bytes: 9).
    FiveBit,
    /// 32 signed bytes whose halves (elements 0..16 and 16..32) have a scale each:
    /// `x = q * scale[half]` (Q6_K, whose int6 values have a scale per 16).
    HalfScaledBytes,
    /// 32 signed bytes whose halves have a scale each, and a min: `x = q * scale[half] + min`.
    /// Q5_K (5-bit values with a scale and min per 32: both halves' scales equal), and any mix
    /// of formats stacked into one projection (each converts to it exactly).
    OffsetBytes,
}

impl BlockFormat {
    /// Bytes of quantised values per block.
    pub const fn quant_bytes(self) -> usize {
        match self {
            BlockFormat::Nibbles => BLOCK / 2,
            BlockFormat::FiveBit => FIVE_BIT_BYTES,
            BlockFormat::Bytes | BlockFormat::HalfScaledBytes | BlockFormat::OffsetBytes => BLOCK,
        }
    }

    /// Scales per block in [`PackedMatrix::scales`].
    pub const fn scales_per_block(self) -> usize {
        match self {
            BlockFormat::HalfScaledBytes | BlockFormat::OffsetBytes => 2,
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
    /// What the int8 activation mode derives from the values on its first call
    /// (`int8/layout.rs`); empty until then, and never in the f32 mode.
    pub int8_cache: Int8Cache,
}

/// Derived data the int8 kernel builds once per matrix: each (row, group)'s sum of signed
/// byte values. It is a cache: a clone starts empty, and it takes no part in equality.
#[derive(Default)]
pub struct Int8Cache(pub(super) OnceLock<Vec<i16>>);

impl Clone for Int8Cache {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for Int8Cache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for Int8Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "Int8Cache(built)"
        } else {
            "Int8Cache(empty)"
        })
    }
}

impl PackedMatrix {
    /// Whether `ty` has a packed kernel; projections of other types are widened to f32.
    pub fn has_kernel(ty: GgmlType) -> bool {
        Self::format_of(ty).is_some()
    }

    /// The packed format `ty` runs in: its own (Q4_0, Q4_1, Q5_0, Q8_0) or a lossless
    /// repacking (Q3_K, Q4_K, Q5_1, Q5_K, Q6_K, IQ4_NL, IQ4_XS; see `repack.rs`). Q2_K (a
    /// min per 16 elements) and the 16-bit floats have none: they are widened to f32.
    fn format_of(ty: GgmlType) -> Option<BlockFormat> {
        match ty {
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q4_K => Some(BlockFormat::Nibbles),
            GgmlType::Q5_0 => Some(BlockFormat::FiveBit),
            GgmlType::Q8_0 | GgmlType::IQ4_NL | GgmlType::IQ4_XS => Some(BlockFormat::Bytes),
            GgmlType::Q6_K | GgmlType::Q3_K => Some(BlockFormat::HalfScaledBytes),
            GgmlType::Q5_K | GgmlType::Q5_1 => Some(BlockFormat::OffsetBytes),
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
            int8_cache: Int8Cache::default(),
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
            BlockFormat::FiveBit => {
                for (v, q) in out.iter_mut().zip(five_bit_values(q)) {
                    *v = f32::from(q) * scale;
                }
            }
            BlockFormat::HalfScaledBytes => {
                let high_scale = self.scales[2 * index + 1];
                for (j, (v, &byte)) in out.iter_mut().zip(q).enumerate() {
                    *v = f32::from(byte as i8) * if j < BLOCK / 2 { scale } else { high_scale };
                }
            }
            BlockFormat::OffsetBytes => {
                let (high_scale, min) = (self.scales[2 * index + 1], self.mins[index]);
                for (j, (v, &byte)) in out.iter_mut().zip(q).enumerate() {
                    *v = f32::from(byte as i8).mul_add(if j < BLOCK / 2 { scale } else { high_scale }, min);
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

    /// The matrices' rows one after another; `None` unless they share their width. Parts of
    /// different formats are converted to the narrowest format that holds each exactly:
    /// [`BlockFormat::Bytes`] for a Q5_0 q/k with a Q8_0 v, else
    /// [`BlockFormat::OffsetBytes`] (a Q4_K q/k with a Q6_K v).
    pub fn stack(parts: &[PackedMatrix]) -> Option<PackedMatrix> {
        let first = parts.first()?;
        if parts.iter().any(|p| p.cols != first.cols) {
            return None;
        }
        if parts.iter().any(|p| p.format != first.format) {
            let signed_bytes = |p: &PackedMatrix| matches!(p.format, BlockFormat::Bytes | BlockFormat::FiveBit);
            let converted: Vec<PackedMatrix> = if parts.iter().all(signed_bytes) {
                parts.iter().map(PackedMatrix::to_bytes).collect()
            } else {
                parts.iter().map(PackedMatrix::to_offset_bytes).collect()
            };
            return Self::stack(&converted);
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

    /// The same values in [`BlockFormat::OffsetBytes`]: nibbles become bytes, a single scale
    /// serves both halves, a missing min is 0 (`fma(q, s, 0)` rounds as `q * s` does; a -0.0
    /// may become +0.0, which no sum can tell).
    pub fn to_offset_bytes(&self) -> PackedMatrix {
        let blocks = self.rows * self.blocks_per_row();
        let mut out = PackedMatrix {
            format: BlockFormat::OffsetBytes,
            scales: Vec::with_capacity(2 * blocks),
            mins: Vec::with_capacity(blocks),
            quants: Vec::with_capacity(blocks * BLOCK),
            rows: self.rows,
            ..self.clone_shape()
        };
        let per_block = self.format.scales_per_block();
        for b in 0..blocks {
            let scales = &self.scales[b * per_block..][..per_block];
            out.scales.extend([scales[0], scales[per_block - 1]]);
            out.mins.push(if self.format.has_mins() { self.mins[b] } else { 0.0 });
            let q = &self.quants[b * self.format.quant_bytes()..][..self.format.quant_bytes()];
            match self.format {
                BlockFormat::Nibbles => {
                    out.quants.extend(q.iter().map(|v| v & 0x0f));
                    out.quants.extend(q.iter().map(|v| v >> 4));
                }
                BlockFormat::FiveBit => out.quants.extend(five_bit_values(q).map(|v| v as u8)),
                _ => out.quants.extend_from_slice(q),
            }
        }
        out
    }

    /// A [`BlockFormat::FiveBit`] matrix's values as [`BlockFormat::Bytes`] (`q - 16` is a
    /// signed byte; the same products); other formats are returned as they are.
    pub fn to_bytes(&self) -> PackedMatrix {
        if self.format != BlockFormat::FiveBit {
            return self.clone();
        }
        PackedMatrix {
            format: BlockFormat::Bytes,
            scales: self.scales.clone(),
            quants: self
                .quants
                .chunks_exact(FIVE_BIT_BYTES)
                .flat_map(|q| five_bit_values(q).map(|v| v as u8))
                .collect(),
            rows: self.rows,
            ..self.clone_shape()
        }
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
            int8_cache: Int8Cache::default(),
        }
    }
}

/// A [`BlockFormat::FiveBit`] block's 32 values, `q - 16`.
pub(super) fn five_bit_values(q: &[u8]) -> [i8; BLOCK] {
    let high_bits = u32::from_le_bytes([q[0], q[1], q[2], q[3]]);
    let nibbles = &q[4..FIVE_BIT_BYTES];
    std::array::from_fn(|j| {
        let nibble = (nibbles[j % (BLOCK / 2)] >> (4 * (j / (BLOCK / 2)))) & 0x0f;
        (nibble | (((high_bits >> j) & 1) as u8) << 4) as i8 - 16
    })
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
            (GgmlType::Q5_1, 3, 64),
            (GgmlType::Q3_K, 2, 512),
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
        assert!(!PackedMatrix::has_kernel(GgmlType::Q2_K));
    }

    #[test]
    fn q5_0_is_kept_at_six_bits_a_weight_and_stacks_with_q8_0_as_bytes() {
        let (rows, cols) = (4, 256);
        let part = |ty: GgmlType, seed| {
            let blocks = rows * cols / ty.block_layout().0 as usize;
            PackedMatrix::from_ggml(ty, &random_blocks(ty, blocks, seed), rows, cols).expect("packable")
        };
        let (q5, q8) = (part(GgmlType::Q5_0, 1), part(GgmlType::Q8_0, 2));
        assert_eq!(q5.format, BlockFormat::FiveBit);
        assert_eq!(
            8 * q5.size_bytes(),
            6 * rows * cols,
            "20 bytes of values and an f32 scale per 32"
        );
        let stacked = PackedMatrix::stack(&[q5.clone(), q8.clone()]).expect("same width");
        assert_eq!(stacked.format, BlockFormat::Bytes);
        let want: Vec<f32> = [&q5, &q8].into_iter().flat_map(PackedMatrix::dequantize).collect();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&stacked.dequantize()), bits(&want), "Bytes holds Q5_0 bit for bit");
        let with_k = PackedMatrix::stack(&[q5.clone(), part(GgmlType::Q4_K, 3)]).expect("same width");
        assert_eq!(with_k.format, BlockFormat::OffsetBytes);
        assert!(
            with_k.dequantize()[..rows * cols] == q5.dequantize()[..],
            "OffsetBytes holds Q5_0"
        );
        let same = PackedMatrix::stack(&[q5.clone(), q5.clone()]).expect("same width");
        assert_eq!((same.format, same.rows), (BlockFormat::FiveBit, 2 * rows));
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
        let narrow = PackedMatrix::from_ggml(GgmlType::Q8_0, &quantize(GgmlType::Q8_0, &sample(32)).unwrap(), 1, 32);
        assert!(
            PackedMatrix::stack(&[a, narrow.expect("packable")]).is_none(),
            "widths differ"
        );
    }

    #[test]
    fn parts_of_different_formats_stack_exactly_as_offset_bytes() {
        let cols = 512;
        let part = |ty: GgmlType, rows: usize, seed| {
            let blocks = rows * cols / ty.block_layout().0 as usize;
            PackedMatrix::from_ggml(ty, &random_blocks(ty, blocks, seed), rows, cols).expect("packable")
        };
        let parts = [
            part(GgmlType::Q4_K, 2, 1),
            part(GgmlType::Q6_K, 1, 2),
            part(GgmlType::Q8_0, 1, 3),
            part(GgmlType::Q5_K, 1, 4),
        ];
        let stacked = PackedMatrix::stack(&parts).expect("same width");
        assert_eq!((stacked.format, stacked.rows), (BlockFormat::OffsetBytes, 5));
        let want: Vec<f32> = parts.iter().flat_map(PackedMatrix::dequantize).collect();
        // `==`: equal values, a zero of either sign equal to the other.
        assert!(stacked.dequantize().iter().zip(&want).all(|(a, b)| a == b));
    }
}
