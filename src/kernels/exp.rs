//! `exp` as plain arithmetic, so the loops that call it (softmax, SiLU) vectorise: `f32::exp`
//! is a libm call, one element at a time, which kept those loops scalar and made `expf` a
//! visible share of a long-context decode step.

/// `e^x` to about one ulp (Cephes' `expf` polynomial), for `x` clamped to `[-87, 88]`: the
/// result never overflows to infinity nor underflows past the smallest normal float, which
/// neither softmax (whose inputs are at most 0) nor SiLU can tell apart.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LN2_HIGH: f32 = 0.693_359_4;
    const LN2_LOW: f32 = -2.121_944_4e-4;
    // Adding and subtracting 1.5 · 2^23 rounds to the nearest integer without a libm call.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let n = (x * std::f32::consts::LOG2_E + ROUND) - ROUND;
    // x = n · ln 2 + r, |r| ≤ ln 2 / 2, with ln 2 split so `n · LN2_HIGH` is exact.
    let r = x - n * LN2_HIGH - n * LN2_LOW;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let e_r = p * r * r + r + 1.0;
    // 2^n from its exponent bits: n + 127 lies in 1..=254 after the clamp.
    e_r * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_f64_exp_within_a_few_ulps_over_the_clamped_range() {
        let mut worst = 0.0f64;
        let steps = 200_000;
        for i in 0..=steps {
            let x = -87.0 + 175.0 * i as f32 / steps as f32;
            let want = f64::from(x).exp();
            let got = f64::from(exp(x));
            worst = worst.max(((got - want) / want).abs());
        }
        // One f32 ulp is 1.19e-7 relative at worst; Cephes states 1.7e-7 for this polynomial.
        assert!(worst < 3e-7, "worst relative error {worst:e}");
    }

    #[test]
    fn extremes_clamp_instead_of_overflowing() {
        assert!(exp(-1000.0) > 0.0 && exp(-1000.0) < 1e-37);
        assert!(exp(1000.0).is_finite() && exp(1000.0) > 1e38);
        assert_eq!(exp(0.0), 1.0);
    }
}
