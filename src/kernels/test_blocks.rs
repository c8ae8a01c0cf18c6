//! ggml blocks of pseudo-random bytes for the kernels' tests: every bit pattern of the
//! quantised values, with the f16 scales kept finite, or small enough for matmul sums.

use super::GgmlType;

/// Byte offsets of a block's f16 scales (`d`, and `dmin` where the type has one).
fn half_offsets(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q4_1 | GgmlType::Q5_1 => &[0, 2],
        GgmlType::Q6_K => &[208],
        GgmlType::Q3_K => &[108],
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL | GgmlType::IQ4_XS => &[0],
        other => panic!("no test blocks for {other}"),
    }
}

fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = 0x2545_f491_4f6c_dd1du64 ^ seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 56) as u8
        })
        .collect()
}

/// `n` blocks of `ty` of random bytes whose f16 scales are finite (any magnitude).
pub fn random_blocks(ty: GgmlType, n: usize, seed: u64) -> Vec<u8> {
    let size = ty.block_layout().1 as usize;
    let mut data = bytes(n * size, seed);
    for block in data.chunks_exact_mut(size) {
        for &at in half_offsets(ty) {
            block[at + 1] &= 0xbf; // exponent below all-ones: finite
        }
    }
    data
}

/// Like [`random_blocks`], with each f16 scale's magnitude in [2⁻¹⁰, 2⁻⁹): weights stay
/// below about 4, so matmul sums stay comparable with an absolute tolerance.
pub fn small_scale_blocks(ty: GgmlType, n: usize, seed: u64) -> Vec<u8> {
    let size = ty.block_layout().1 as usize;
    let mut data = bytes(n * size, seed);
    for block in data.chunks_exact_mut(size) {
        for &at in half_offsets(ty) {
            // sign and mantissa random, biased exponent 5 (2⁻¹⁰)
            block[at + 1] = (block[at + 1] & 0x83) | (5 << 2);
        }
    }
    data
}

/// `n` pseudo-random activations in [-1, 1), the same for the same `seed`.
pub fn pseudo_random(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}
