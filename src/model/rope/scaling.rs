//! Long-context RoPE scaling: each frequency divided by a factor.

/// How RoPE frequencies are scaled for contexts past the trained length.
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    None,
    /// Every frequency divided by the factor (positions interpolated).
    Linear(f32),
    /// Frequency `i` divided by factor `i`, for `head_dim / 2` factors: Llama 3.1's `llama3`
    /// scaling, as the GGUF `rope_freqs` tensor stores it.
    Frequencies(Vec<f32>),
}

impl RopeScaling {
    /// The divisor of frequency `i` (of `head_dim / 2`).
    pub fn divisor(&self, i: usize) -> f64 {
        match self {
            RopeScaling::None => 1.0,
            RopeScaling::Linear(factor) => f64::from(*factor),
            RopeScaling::Frequencies(factors) => f64::from(factors[i]),
        }
    }

    /// Llama 3.1's scaling as per-frequency divisors, computed as llama.cpp's converter
    /// writes `rope_freqs`: long wavelengths divided by `factor`, short ones kept, the band
    /// between interpolated.
    pub fn llama3(
        head_dim: usize,
        theta: f32,
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_context: usize,
    ) -> RopeScaling {
        let (factor, low, high) = (
            f64::from(factor),
            f64::from(low_freq_factor),
            f64::from(high_freq_factor),
        );
        let old = original_context as f64;
        let (low_wavelen, high_wavelen) = (old / low, old / high);
        let factors = (0..head_dim / 2)
            .map(|i| {
                let freq = 1.0 / f64::from(theta).powf((2 * i) as f64 / head_dim as f64);
                let wavelen = 2.0 * std::f64::consts::PI / freq;
                if wavelen < high_wavelen {
                    1.0
                } else if wavelen > low_wavelen {
                    factor as f32
                } else {
                    let smooth = (old / wavelen - low) / (high - low);
                    (1.0 / ((1.0 - smooth) / factor + smooth)) as f32
                }
            })
            .collect();
        RopeScaling::Frequencies(factors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama 3.1 8B's settings: the highest frequencies are kept, the lowest divided by 8,
    /// and the band between lies strictly between.
    #[test]
    fn llama3_keeps_short_wavelengths_and_divides_long_ones() {
        let RopeScaling::Frequencies(f) = RopeScaling::llama3(128, 500_000.0, 8.0, 1.0, 4.0, 8192) else {
            panic!("frequencies expected");
        };
        assert_eq!(f.len(), 64);
        assert_eq!(f[0], 1.0);
        assert_eq!(f[63], 8.0);
        assert!(f.windows(2).all(|w| w[0] <= w[1]), "{f:?}");
        assert!(f.iter().any(|&x| x > 1.0 && x < 8.0), "{f:?}");
    }
}
