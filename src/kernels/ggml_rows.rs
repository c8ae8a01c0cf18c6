//! Rows of a packed matrix widened exactly as ggml's reference dequantisation (kiln's
//! `gguf::dequantize`) widens the type they were packed from: the token embedding's lookup,
//! bit-identical to the f32 copy of the whole table the loader used to keep. The kernels'
//! [`PackedMatrix::block_values`] fuses `q * scale + min` into one rounding instead, which no
//! matmul sum can tell apart but an embedding row, the value the model starts from, can.

use super::GgmlType;
use super::packed::{BLOCK, BlockFormat, PackedMatrix, five_bit_values};

impl PackedMatrix {
    /// Row `row` as f32 into `out[..self.cols]`, rounded as ggml rounds `source` (the type
    /// [`PackedMatrix::from_ggml`] packed): a separate multiply and add, and Q4_0's
    /// `(q - 8) * d` (whose zero takes `d`'s sign, where `q * d - 8 * d` gives +0).
    pub fn row_as_ggml(&self, row: usize, source: GgmlType, out: &mut [f32]) {
        let bpr = self.blocks_per_row();
        let per_block = self.format.scales_per_block();
        let qb = self.format.quant_bytes();
        for (b, dst) in out[..self.cols].chunks_exact_mut(BLOCK).enumerate() {
            let index = row * bpr + b;
            let scales = &self.scales[index * per_block..][..per_block];
            let q = &self.quants[index * qb..][..qb];
            // The half's scale: Q6_K's and Q5_K's halves have one each.
            let scale = |j: usize| scales[(j / (BLOCK / 2)) * (per_block - 1)];
            match self.format {
                BlockFormat::Nibbles => {
                    let min = self.mins[index];
                    for (j, v) in dst.iter_mut().enumerate() {
                        let nibble = f32::from((q[j % (BLOCK / 2)] >> (4 * (j / (BLOCK / 2)))) & 0x0f);
                        *v = match source {
                            GgmlType::Q4_0 => (nibble - 8.0) * scale(j),
                            _ => nibble * scale(j) + min,
                        };
                    }
                }
                BlockFormat::Bytes | BlockFormat::HalfScaledBytes => {
                    for (j, (v, &byte)) in dst.iter_mut().zip(q).enumerate() {
                        *v = f32::from(byte as i8) * scale(j);
                    }
                }
                BlockFormat::FiveBit => {
                    for (j, (v, q)) in dst.iter_mut().zip(five_bit_values(q)).enumerate() {
                        *v = f32::from(q) * scale(j);
                    }
                }
                BlockFormat::OffsetBytes => {
                    let min = self.mins[index];
                    for (j, (v, &byte)) in dst.iter_mut().zip(q).enumerate() {
                        *v = f32::from(byte as i8) * scale(j) + min;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::kernels::test_blocks::random_blocks;
    use crate::kernels::{GgmlType, PackedMatrix};
    use crate::model::gguf::dequantize;

    #[test]
    fn rows_are_bit_identical_to_ggml_dequantisation_for_every_packed_type() {
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
            GgmlType::Q8_0,
            GgmlType::Q3_K,
            GgmlType::Q4_K,
            GgmlType::Q5_K,
            GgmlType::Q6_K,
            GgmlType::IQ4_NL,
            GgmlType::IQ4_XS,
        ] {
            let (rows, cols) = (6, 512);
            let bytes = random_blocks(ty, rows * cols / ty.block_layout().0 as usize, 7);
            let reference = dequantize(ty, &bytes, rows * cols).expect("dequantise");
            let packed = PackedMatrix::from_ggml(ty, &bytes, rows, cols).expect("packable");
            let mut row = vec![f32::NAN; cols];
            for r in 0..rows {
                packed.row_as_ggml(r, ty, &mut row);
                let want = &reference[r * cols..(r + 1) * cols];
                for (c, (a, b)) in row.iter().zip(want).enumerate() {
                    assert_eq!(a.to_bits(), b.to_bits(), "{ty} row {r} column {c}: {a} vs {b}");
                }
            }
        }
    }
}
