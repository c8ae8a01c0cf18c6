//! The int8 activation mode's operands (`lanes.rs` says how they are multiplied):
//! activations quantised per token and group of columns, laid out for `vpdpbusd`; the
//! weights of the signed-byte formats read as they are stored, and panels of the nibble
//! formats' rows unpacked into unsigned bytes, each group with a scale and a bias.

use std::ops::Range;

use rayon::prelude::*;

use crate::kernels::packed::{BLOCK, BlockFormat, PackedMatrix};

/// Rows unpacked at a time: one unit of parallel work (48 × 2048 bytes, in L2).
pub(super) const PANEL_ROWS: usize = 48;
/// Tokens are padded to a multiple of this (the VNNI kernel's 16 lanes).
pub(super) const TOKEN_LANES: usize = 16;

/// Activations quantised to 8 bits for a matmul call.
pub(super) struct QuantizedLanes {
    /// Columns per group (16 or 32).
    pub group: usize,
    pub k: usize,
    pub tokens: usize,
    /// `tokens` rounded up to [`TOKEN_LANES`]; the extra tokens are zero.
    pub padded: usize,
    /// Each `q` as a signed byte, or plus 128 as an unsigned one (`biased`), laid out as
    /// `[k / 4][padded][4]`.
    pub bytes: Vec<u8>,
    /// The bytes hold `q + 128`: `vpdpbusd`'s unsigned operand, against signed weights.
    pub biased: bool,
    /// `[k / group][padded]`: each (group, token)'s scale.
    pub scales: Vec<f32>,
    /// `[k / group][padded]`: each (group, token)'s `scale · Σ q` (what a min multiplies).
    pub sums: Vec<f32>,
}

impl QuantizedLanes {
    /// `x` (`[tokens, k]`) quantised per token and group of `group` columns, in portable
    /// code.
    pub fn quantize(x: &[f32], tokens: usize, k: usize, group: usize, biased: bool) -> QuantizedLanes {
        let mut out = QuantizedLanes::zeroed(tokens, k, group, biased);
        let flip = out.flip();
        assert_eq!(x.len(), tokens * k, "x must be [tokens, {k}]");
        let padded = out.padded;
        for (t, row) in x.chunks_exact(k).enumerate() {
            for (g, values) in row.chunks_exact(group).enumerate() {
                let amax = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let (scale, inverse) = scale_and_inverse(amax);
                let mut sum = 0i32;
                for (j, &v) in values.iter().enumerate() {
                    // Ties to even, as the vector conversion rounds.
                    let q = (v * inverse).round_ties_even().clamp(-127.0, 127.0) as i32;
                    sum += q;
                    let c = g * group + j;
                    out.bytes[((c / 4) * padded + t) * 4 + c % 4] = q as i8 as u8 ^ flip;
                }
                out.scales[g * padded + t] = scale;
                out.sums[g * padded + t] = scale * sum as f32;
            }
        }
        out
    }

    /// Room for `tokens` × `k` activations in groups of `group`, all zero.
    pub fn zeroed(tokens: usize, k: usize, group: usize, biased: bool) -> QuantizedLanes {
        assert!(
            group.is_multiple_of(16) && k.is_multiple_of(group),
            "{k} columns in groups of {group}"
        );
        let padded = tokens.next_multiple_of(TOKEN_LANES);
        let groups = k / group;
        QuantizedLanes {
            group,
            k,
            tokens,
            padded,
            bytes: vec![flip_of(biased); k * padded],
            biased,
            scales: vec![0.0; groups * padded],
            sums: vec![0.0; groups * padded],
        }
    }

    /// The quantised value of token `t`, column `c`.
    pub fn q(&self, t: usize, c: usize) -> i32 {
        i32::from((self.bytes[((c / 4) * self.padded + t) * 4 + c % 4] ^ self.flip()) as i8)
    }

    /// What turns a stored byte into `q` as a signed byte, and back: `q + 128` is `q` with
    /// its top bit flipped.
    pub fn flip(&self) -> u8 {
        flip_of(self.biased)
    }

    /// The activations as the kernel sees them, `[tokens, k]` (`q · scale`; for tests).
    #[cfg(test)]
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0.0; self.tokens * self.k];
        for t in 0..self.tokens {
            for c in 0..self.k {
                out[t * self.k + c] = self.q(t, c) as f32 * self.scales[(c / self.group) * self.padded + t];
            }
        }
        out
    }
}

/// The top bit for biased bytes (`q + 128`), none for signed ones.
fn flip_of(biased: bool) -> u8 {
    if biased { 0x80 } else { 0 }
}

/// A group's scale (`amax / 127`) and its inverse (0 and 0 for an all-zero group).
pub(super) fn scale_and_inverse(amax: f32) -> (f32, f32) {
    if amax > 0.0 {
        (amax / 127.0, 127.0 / amax)
    } else {
        (0.0, 0.0)
    }
}

/// Columns per group the int8 kernel uses for `format`: 16 where a block has a scale per
/// half, else 32.
pub(super) fn group_of(format: BlockFormat) -> usize {
    BLOCK / format.scales_per_block()
}

/// Whether the int8 kernel reads `format`'s values as they are stored (32 signed bytes a
/// block: the signed operand of `vpdpbusd`, against activations biased to unsigned bytes),
/// rather than unpacking them into an [`Int8Panel`] of unsigned bytes (the nibble formats).
pub(super) fn signed_weights(format: BlockFormat) -> bool {
    match format {
        BlockFormat::Bytes | BlockFormat::HalfScaledBytes | BlockFormat::OffsetBytes => true,
        BlockFormat::Nibbles | BlockFormat::FiveBit => false,
    }
}

/// A signed-byte matrix's sum of values for each (row, group of `group` columns), row-major:
/// what the bias of 128 on the activations adds to an integer sum (`128 · Σ q_w`), to take
/// away again. Built on the matrix's first int8 call (one pass over its bytes; 2 bytes a
/// group, 1/16 of the values' size at groups of 32) and kept with it.
pub(super) fn group_sums(w: &PackedMatrix, group: usize) -> &[i16] {
    assert!(signed_weights(w.format) && w.quants.len() == w.rows * w.cols);
    w.int8_cache.0.get_or_init(|| {
        w.quants
            .par_chunks(group)
            .map(|values| values.iter().map(|&v| i16::from(v as i8)).sum())
            .collect()
    })
}

/// A panel of weight rows unpacked for the int8 kernel: each weight as an unsigned byte `u`
/// with `w = u · scale + bias` per group; the scales and mins are read from the matrix as
/// they are ([`WeightGroups`]). For the nibble formats only ([`signed_weights`]).
#[derive(Default)]
pub(super) struct Int8Panel {
    /// `[rows][k]`
    pub values: Vec<u8>,
}

impl Int8Panel {
    /// Rows `rows` of `w` unpacked (reusing the buffer).
    pub fn fill(&mut self, w: &PackedMatrix, rows: Range<usize>) {
        for (q, dst) in self.blocks(w, rows) {
            unpack_block(w.format, q, dst);
        }
    }

    /// Room for rows `rows` of a nibble-format `w`: each block's packed bytes with the 32
    /// bytes it unpacks into (the portable and the vector unpacking share this).
    pub fn blocks<'a>(
        &'a mut self,
        w: &'a PackedMatrix,
        rows: Range<usize>,
    ) -> impl Iterator<Item = (&'a [u8], &'a mut [u8])> {
        assert!(!signed_weights(w.format), "{:?} is read as it is stored", w.format);
        self.values.resize(rows.len() * w.cols, 0);
        let qb = w.format.quant_bytes();
        let per_row = w.blocks_per_row() * qb;
        w.quants[rows.start * per_row..rows.end * per_row]
            .chunks_exact(qb)
            .zip(self.values.chunks_exact_mut(BLOCK))
    }
}

/// How a matrix's per-group scale and bias are found: `scale = scales[r · groups + g]`,
/// `bias = min + offset · scale` with `min = mins[r · blocks + g / groups_per_block]` (0
/// without mins) and `offset` the format's (what its unpacked unsigned bytes carry above
/// the value; 0 for the signed-byte formats, which the kernel reads as they are).
pub(super) struct WeightGroups<'a> {
    pub scales: &'a [f32],
    pub mins: &'a [f32],
    pub groups_per_block: usize,
    pub offset: f32,
}

impl<'a> WeightGroups<'a> {
    pub fn of(w: &'a PackedMatrix) -> WeightGroups<'a> {
        let offset = match w.format {
            BlockFormat::Nibbles => 0.0,
            BlockFormat::FiveBit => -16.0,
            BlockFormat::Bytes | BlockFormat::HalfScaledBytes | BlockFormat::OffsetBytes => 0.0,
        };
        WeightGroups {
            scales: &w.scales,
            mins: &w.mins,
            groups_per_block: w.format.scales_per_block(),
            offset,
        }
    }

    /// Group `g` of row `r`'s (scale, bias), `groups` groups a row.
    #[inline(always)]
    pub fn get(&self, r: usize, g: usize, groups: usize) -> (f32, f32) {
        let scale = self.scales[r * groups + g];
        let min = if self.mins.is_empty() {
            0.0
        } else {
            self.mins[(r * groups + g) / self.groups_per_block]
        };
        (scale, self.offset.mul_add(scale, min))
    }
}

/// One nibble-format block's 32 values as unsigned bytes (`w = u · scale + bias`).
fn unpack_block(format: BlockFormat, q: &[u8], dst: &mut [u8]) {
    match format {
        BlockFormat::Nibbles => unpack_nibbles(q, dst),
        BlockFormat::FiveBit => {
            let (high, nibbles) = q.split_at(4);
            unpack_nibbles(nibbles, dst);
            for (eight, &bits) in dst.chunks_exact_mut(8).zip(high) {
                let values = u64::from_le_bytes(eight.try_into().expect("8 bytes"));
                eight.copy_from_slice(&(values | FIVE_BIT_HIGH[usize::from(bits)]).to_le_bytes());
            }
        }
        BlockFormat::Bytes | BlockFormat::HalfScaledBytes | BlockFormat::OffsetBytes => {
            unreachable!("signed-byte blocks are not unpacked")
        }
    }
}

/// 16 bytes of nibbles as 32 values: the low nibbles first, then the high ones.
fn unpack_nibbles(q: &[u8], dst: &mut [u8]) {
    for j in 0..BLOCK / 2 {
        dst[j] = q[j] & 0x0f;
        dst[j + BLOCK / 2] = q[j] >> 4;
    }
}

/// A Q5_0 byte of fifth bits as 8 values' worth of 0x10 (byte `i` has it where bit `i` is
/// set): eight values take their fifth bit in one OR instead of eight shifts.
const FIVE_BIT_HIGH: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut bits = 0;
    while bits < 256 {
        let mut i = 0;
        while i < 8 {
            if (bits >> i) & 1 == 1 {
                table[bits] |= 0x10 << (8 * i);
            }
            i += 1;
        }
        bits += 1;
    }
    table
};

/// The `[tokens, row_stride]` output, shared by panels that write disjoint columns.
pub(super) struct Output {
    pub ptr: *mut f32,
    pub tokens: usize,
    pub row_stride: usize,
}
// SAFETY: panels write disjoint elements, and the buffer outlives the parallel loop.
unsafe impl Sync for Output {}
