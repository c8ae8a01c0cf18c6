//! The tokens a non-greedy sample draws from, and the draw. Temperature and the softmax are
//! one pass over the vocabulary in id order; only top-k and top-p need an order, and they
//! sort only the best candidates (a window grown until it holds the top-p mass), never the
//! whole vocabulary for every token: a full sort of 49 152 logits cost ~2 ms a token, more
//! than the rest of the sampler and a tenth of a step at 32 streams.

use std::cmp::Ordering;

use rand::Rng;
use rand::rngs::StdRng;

use crate::engine::sampling_params::SamplingParams;

/// The first window of best candidates sorted for top-p, and its growth factor.
const FIRST_WINDOW: usize = 64;
const GROWTH: usize = 8;

fn by_weight_desc(a: &(u32, f32), b: &(u32, f32)) -> Ordering {
    b.1.total_cmp(&a.1)
}

/// `(token, weight)` pairs, weights proportional to the probabilities after temperature,
/// top-k, top-p and min-p (the best candidate weighs 1); in no particular order.
pub fn candidates(logits: &[f32], params: &SamplingParams) -> Vec<(u32, f32)> {
    let inv_t = 1.0 / params.temperature.max(1e-5);
    let mut scaled: Vec<(u32, f32)> = logits.iter().enumerate().map(|(i, &l)| (i as u32, l * inv_t)).collect();
    if let Some(k) = params.top_k.map(|k| k as usize).filter(|&k| k > 0 && k < scaled.len()) {
        scaled.select_nth_unstable_by(k - 1, by_weight_desc);
        scaled.truncate(k);
    }
    let max = scaled.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max);
    let mut weighted: Vec<(u32, f32)> = scaled.into_iter().map(|(t, l)| (t, (l - max).exp())).collect();
    if params.top_p < 1.0 {
        keep_top_p(&mut weighted, params.top_p);
    }
    if params.min_p > 0.0 {
        // Relative to the best candidate's probability, whose weight is 1.
        weighted.retain(|c| c.1 >= params.min_p);
    }
    weighted
}

/// Keeps the smallest best-first prefix whose mass reaches `top_p` of the whole.
fn keep_top_p(weighted: &mut Vec<(u32, f32)>, top_p: f32) {
    // Sums in f64: 49 152 f32 terms drift enough in f32 to move the boundary.
    let target = f64::from(top_p) * weighted.iter().map(|c| f64::from(c.1)).sum::<f64>();
    let mut window = FIRST_WINDOW.min(weighted.len());
    loop {
        if window < weighted.len() {
            weighted.select_nth_unstable_by(window - 1, by_weight_desc);
        }
        weighted[..window].sort_unstable_by(by_weight_desc);
        let mut cumulative = 0.0f64;
        if let Some(last) = weighted[..window].iter().position(|c| {
            cumulative += f64::from(c.1);
            cumulative >= target
        }) {
            weighted.truncate(last + 1);
            return;
        }
        if window == weighted.len() {
            return; // rounding kept the mass just short of the target: keep everything
        }
        window = (window * GROWTH).min(weighted.len());
    }
}

/// Draws a token with probability proportional to its weight.
pub fn draw(candidates: &[(u32, f32)], rng: &mut StdRng) -> Option<u32> {
    let total: f64 = candidates.iter().map(|c| f64::from(c.1)).sum();
    let mut draw = f64::from(rng.random::<f32>()) * total;
    for &(token, weight) in candidates {
        if draw < f64::from(weight) {
            return Some(token);
        }
        draw -= f64::from(weight);
    }
    candidates.last().map(|c| c.0)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use rand::SeedableRng;

    use super::*;

    /// The filters as the definition reads: every candidate sorted, best first.
    fn by_full_sort(logits: &[f32], params: &SamplingParams) -> HashMap<u32, f32> {
        let inv_t = 1.0 / params.temperature.max(1e-5);
        let mut all: Vec<(u32, f32)> = logits.iter().enumerate().map(|(i, &l)| (i as u32, l * inv_t)).collect();
        all.sort_unstable_by(by_weight_desc);
        if let Some(k) = params.top_k {
            all.truncate(k as usize);
        }
        let max = all[0].1;
        let total: f64 = all.iter().map(|c| f64::from((c.1 - max).exp())).sum();
        let probs: Vec<f32> = all
            .iter()
            .map(|c| (f64::from((c.1 - max).exp()) / total) as f32)
            .collect();
        let mut keep = all.len();
        let mut cumulative = 0.0f64;
        for (i, p) in probs.iter().enumerate() {
            cumulative += f64::from(*p);
            if params.top_p < 1.0 && cumulative >= f64::from(params.top_p) {
                keep = i + 1;
                break;
            }
        }
        let threshold = probs[0] * params.min_p;
        let kept: Vec<(u32, f32)> = (0..keep)
            .filter(|&i| probs[i] >= threshold)
            .map(|i| (all[i].0, probs[i]))
            .collect();
        normalised(&kept)
    }

    fn normalised(candidates: &[(u32, f32)]) -> HashMap<u32, f32> {
        let total: f32 = candidates.iter().map(|c| c.1).sum();
        candidates.iter().map(|&(t, w)| (t, w / total)).collect()
    }

    #[test]
    fn the_windowed_filters_keep_what_a_full_sort_keeps() {
        let mut rng = StdRng::seed_from_u64(11);
        for round in 0..6 {
            let logits: Vec<f32> = (0..49152)
                .map(|_| rng.random::<f32>() * 4.0 * (round as f32 + 1.0))
                .collect();
            for (temperature, top_k, top_p, min_p) in [
                (1.0, None, 1.0, 0.0),
                (0.7, None, 0.9, 0.0),
                (1.3, None, 0.5, 0.0),
                (1.0, Some(50), 0.95, 0.0),
                (1.0, Some(1), 1.0, 0.0),
                (0.8, None, 1.0, 0.05),
                (1.0, Some(4000), 0.99, 0.01),
            ] {
                let params = SamplingParams {
                    temperature,
                    top_k,
                    top_p,
                    min_p,
                    ..SamplingParams::default()
                };
                let fast = normalised(&candidates(&logits, &params));
                let reference = by_full_sort(&logits, &params);
                let what = format!("round {round}, t {temperature} k {top_k:?} p {top_p} min_p {min_p}");
                // Tolerance: the two sum the same f32 weights in different orders; a
                // candidate exactly at the top-p boundary may fall either side of it.
                let differing = fast.len().abs_diff(reference.len());
                assert!(
                    differing <= 1,
                    "{what}: {} vs {} candidates",
                    fast.len(),
                    reference.len()
                );
                for (token, p) in &reference {
                    if let Some(q) = fast.get(token) {
                        assert!((p - q).abs() <= 1e-5 + 1e-3 * p, "{what}: token {token}: {p} vs {q}");
                    }
                }
            }
        }
    }

    #[test]
    fn draws_follow_the_weights() {
        let candidates = [(7, 1.0), (3, 3.0), (9, 0.0)];
        let mut rng = StdRng::seed_from_u64(5);
        let mut counts: HashMap<u32, u32> = HashMap::new();
        for _ in 0..8000 {
            *counts.entry(draw(&candidates, &mut rng).expect("a token")).or_default() += 1;
        }
        assert_eq!(counts.get(&9), None, "a zero weight is never drawn");
        let share = f64::from(counts[&3]) / 8000.0;
        assert!(
            (share - 0.75).abs() < 0.03,
            "token 3 drew {share} (expected 0.75 ± 0.03)"
        );
        assert_eq!(draw(&[], &mut rng), None);
    }
}
