//! The SwiGLU activation on host rows, fused into one pass over the gate/up projection's
//! output (burn would narrow, copy and allocate three `[tokens, ffn]` tensors).

use rayon::prelude::*;

use super::exp::exp;

/// `silu(gate) * up` for every row of `gate_up` (`[tokens, 2 * ffn]`, gate columns first).
///
/// # Shapes
/// - gate_up: `[tokens, 2 * ffn]`
/// - output: `[tokens, ffn]`
pub fn swiglu(gate_up: &[f32], ffn: usize) -> Vec<f32> {
    assert_eq!(gate_up.len() % (2 * ffn), 0, "gate_up must be [tokens, {}]", 2 * ffn);
    let mut out = vec![0.0f32; gate_up.len() / 2];
    out.par_chunks_mut(ffn)
        .zip(gate_up.par_chunks(2 * ffn))
        .for_each(|(out, row)| {
            let (gate, up) = row.split_at(ffn);
            for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
                *o = g / (1.0 + exp(-g)) * u;
            }
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_silu_times_up_row_by_row() {
        let ffn = 5;
        let gate_up: Vec<f32> = (0..3 * 2 * ffn).map(|i| (i as f32 - 14.0) / 3.0).collect();
        let got = swiglu(&gate_up, ffn);
        assert_eq!(got.len(), 3 * ffn);
        for t in 0..3 {
            for j in 0..ffn {
                let g = f64::from(gate_up[t * 2 * ffn + j]);
                let u = f64::from(gate_up[t * 2 * ffn + ffn + j]);
                let expected = g / (1.0 + (-g).exp()) * u;
                // One exp, one division and two products in f32: a few ulps.
                assert!((f64::from(got[t * ffn + j]) - expected).abs() < 1e-5 * expected.abs().max(1.0));
            }
        }
    }
}
