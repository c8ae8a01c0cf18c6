//! OCP FP8 E4M3 (the "FN" form vLLM's `--kv-cache-dtype fp8` stores): 1 sign bit, 4 exponent
//! bits (bias 7), 3 mantissa bits, no infinities. Finite values reach ±448; the smallest
//! subnormal is 2^-9. `S.1111.111` (0x7F, 0xFF) is NaN; the other 254 codes are finite.
//!
//! Written once here: the KV cache encodes with [`encode`] and the attention kernels widen
//! with [`E4m3::to_f32`].

/// The largest finite E4M3 value.
pub const E4M3_MAX: f32 = 448.0;

/// One E4M3 code, as the KV cache stores it (one byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(transparent)]
pub struct E4m3(pub u8);

/// 2^120: the difference of f32's exponent bias (127) and E4M3's (7), as an exponent field.
const BIAS_SHIFT_BITS: u32 = 120 << 23;

impl E4m3 {
    /// The code's value: exact (every E4M3 value is an f32). NaN for 0x7F and 0xFF.
    /// Branch-free selects, so the kernels' loops vectorise.
    #[inline(always)]
    pub fn to_f32(self) -> f32 {
        let c = u32::from(self.0);
        let magnitude = c & 0x7F;
        // A normal code's exponent and mantissa, moved into f32's fields and rebiased.
        let normal = f32::from_bits((magnitude << 20) + BIAS_SHIFT_BITS);
        // Exponent field 0: mantissa × 2^-9 (computed, to keep f32 denormals out of it).
        let subnormal = magnitude as f32 * (1.0 / 512.0);
        let value = if magnitude < 8 { subnormal } else { normal };
        let value = if magnitude == 0x7F { f32::NAN } else { value };
        f32::from_bits(value.to_bits() | ((c & 0x80) << 24))
    }
}

/// `x` rounded to the nearest E4M3 value, ties to even, saturating: magnitudes at or above
/// 448 (infinities included) become ±448. NaN becomes 0x7F (0xFF with its sign bit set).
pub fn encode(x: f32) -> E4m3 {
    let sign = ((x.to_bits() >> 24) & 0x80) as u8;
    if x.is_nan() {
        return E4m3(sign | 0x7F);
    }
    let a = x.abs();
    if a >= E4M3_MAX {
        return E4m3(sign | 0x7E);
    }
    // a's binary exponent (-127 for zero and f32 denormals); E4M3 steps by 2^(exp-3) in
    // [2^exp, 2^(exp+1)) for exp >= -6 and by 2^-9 below (subnormals).
    let exp = ((a.to_bits() >> 23) as i32) - 127;
    let quantum_exp = exp.max(-6) - 3;
    let quantum = f32::from_bits(((quantum_exp + 127) as u32) << 23);
    // Exact (a power-of-two divisor); at most 16, where rounding reaches the next binade.
    let steps = (a / quantum).round_ties_even() as i32;
    // Codes are monotonic in the value, so `steps` past the binade's 8 lands on the next
    // exponent's mantissa 0; below 2^-5 the code is the step count itself.
    let code = if exp < -6 { steps } else { ((exp + 7) << 3) + steps - 8 };
    E4m3(sign | code as u8)
}

/// `dst[i] ← encode(src[i])` (same lengths).
pub fn encode_slice(src: &[f32], dst: &mut [E4m3]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = encode(*s);
    }
}

/// Views a byte buffer as E4M3 codes.
pub fn as_codes(bytes: &[u8]) -> &[E4m3] {
    // SAFETY: `E4m3` is `repr(transparent)` over `u8`: same size, alignment and validity.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast(), bytes.len()) }
}

/// Views a mutable byte buffer as E4M3 codes.
pub fn as_codes_mut(bytes: &mut [u8]) -> &mut [E4m3] {
    // SAFETY: as in `as_codes`; the borrow is carried over.
    unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast(), bytes.len()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The format's definition, written out: what `to_f32` must give.
    fn by_definition(c: u8) -> f32 {
        let sign = if c & 0x80 != 0 { -1.0 } else { 1.0 };
        let e = i32::from((c >> 3) & 0xF);
        let m = f32::from(c & 7);
        if e == 15 && m == 7.0 {
            return f32::NAN;
        }
        let magnitude = if e == 0 {
            m / 8.0 * 2f32.powi(-6)
        } else {
            (1.0 + m / 8.0) * 2f32.powi(e - 7)
        };
        sign * magnitude
    }

    #[test]
    fn every_code_decodes_as_the_format_defines() {
        for c in 0..=255u8 {
            let (got, want) = (E4m3(c).to_f32(), by_definition(c));
            if want.is_nan() {
                assert!(got.is_nan(), "{c:#04x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{c:#04x}: {got} against {want}");
            }
        }
        assert_eq!(E4m3(0x7E).to_f32(), E4M3_MAX);
        assert_eq!(E4m3(0x01).to_f32(), 2f32.powi(-9));
        assert_eq!(E4m3(0x80).to_f32().to_bits(), (-0.0f32).to_bits());
    }

    #[test]
    fn every_finite_code_encodes_back_to_itself() {
        for c in 0..=255u8 {
            let value = E4m3(c).to_f32();
            if value.is_nan() {
                continue;
            }
            assert_eq!(encode(value), E4m3(c), "{c:#04x} ({value})");
        }
    }

    #[test]
    fn encoding_rounds_to_nearest_even_and_saturates() {
        let finite: Vec<f32> = (0..0x7Fu8).map(|c| E4m3(c).to_f32()).collect();
        // Between each pair of neighbours: just below, at and just above the midpoint.
        for (i, pair) in finite.windows(2).enumerate() {
            let (lo, hi) = (pair[0], pair[1]);
            let mid = (lo + hi) / 2.0;
            let (lo_code, hi_code) = (i as u8, i as u8 + 1);
            let even = if lo_code % 2 == 0 { lo_code } else { hi_code };
            assert_eq!(encode(mid), E4m3(even), "tie {mid}");
            assert_eq!(encode(f32::from_bits(mid.to_bits() - 1)), E4m3(lo_code), "below {mid}");
            assert_eq!(encode(f32::from_bits(mid.to_bits() + 1)), E4m3(hi_code), "above {mid}");
            assert_eq!(encode(-mid), E4m3(0x80 | even), "tie -{mid}");
        }
        for big in [448.0, 460.0, 464.0, 1e6, f32::MAX, f32::INFINITY] {
            assert_eq!(encode(big), E4m3(0x7E), "{big}");
            assert_eq!(encode(-big), E4m3(0xFE), "-{big}");
        }
        // Below half the smallest subnormal: zero (the tie at 2^-10 goes to even, zero).
        assert_eq!(encode(2f32.powi(-10)), E4m3(0));
        assert_eq!(encode(1e-30), E4m3(0));
        assert_eq!(encode(-1e-45), E4m3(0x80));
        assert_eq!(encode(f32::NAN), E4m3(0x7F));
        assert_eq!(encode(-f32::NAN), E4m3(0xFF));
    }

    #[test]
    fn byte_views_keep_the_codes() {
        let mut bytes = vec![0x38u8, 0xC0, 0x7E];
        assert_eq!(as_codes(&bytes)[0].to_f32(), 1.0);
        as_codes_mut(&mut bytes)[1] = encode(0.5);
        assert_eq!(bytes[1], 0x30);
    }
}
