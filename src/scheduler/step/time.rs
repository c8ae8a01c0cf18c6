//! The step-time model: a step's wall time predicted from its shape, so the scheduler can
//! size prefill chunks to a time budget (`--max-step-ms`) rather than to a token count only.
//!
//! time ≈ per_step + per_token × tokens + per_pair × pairs, where `pairs` counts the
//! (query token, context token) pairs attention computes. The linear layers cost per token;
//! attention costs per pair, which is why a 2,048-token chunk at 6k of context takes many
//! times one at the start of a prompt. The coefficients start from a prior (from the model's
//! shapes) and are refitted after every measured step by ridge-regularised least squares over
//! the recent steps, so the model follows this machine and its load.

use std::collections::VecDeque;

use crate::model::config::ModelConfig;
use crate::stats::step_cost::StepCostModel;

/// The work of a step (or of part of one), as the model's features.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepShape {
    pub tokens: f64,
    pub pairs: f64,
}

impl StepShape {
    /// `new_tokens` run from position `start`: query token i attends to `start + i + 1` tokens.
    pub fn chunk(new_tokens: usize, start: usize) -> Self {
        let (n, p) = (new_tokens as f64, start as f64);
        Self {
            tokens: n,
            pairs: n * p + n * (n + 1.0) / 2.0,
        }
    }

    pub fn add(&mut self, other: Self) {
        self.tokens += other.tokens;
        self.pairs += other.pairs;
    }

    /// `self - other`, never below zero.
    pub fn less(self, other: Self) -> Self {
        Self {
            tokens: (self.tokens - other.tokens).max(0.0),
            pairs: (self.pairs - other.pairs).max(0.0),
        }
    }
}

/// Seconds per step, per token and per attention pair.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepTimeCoefficients {
    pub per_step: f64,
    pub per_token: f64,
    pub per_pair: f64,
}

/// Matrix throughput assumed before the first measurement: on the low side for a 2-core
/// AVX2/AVX-512 machine, so the first chunks are too small rather than too long.
const PRIOR_LINEAR_FLOPS_PER_S: f64 = 50e9;
/// Attention runs slower than the packed matmuls (see `examples/bench_attention.rs`).
const PRIOR_ATTENTION_FLOPS_PER_S: f64 = 20e9;
/// Steps kept for the fit: enough to see both decodes and prefill chunks, few enough to
/// follow a change of load within seconds.
const WINDOW: usize = 64;
/// Of those, the most recent prefill steps (at least [`PREFILL_STEP_TOKENS`] tokens) are kept
/// apart: between two bursts of prompts a server runs hundreds of decode steps, whose token
/// counts barely vary, and a window of decodes alone cannot tell the cost of a prompt token
/// from that of a step. (It predicted a 128-token prompt at 3.4x its measured time, so the
/// budget cut prompts into chunks a third of the size it allowed.)
const PREFILL_WINDOW: usize = 16;
/// Pull toward the prior, in units of one (scaled) observation: weak, so that a few
/// measured steps override a prior that is off by 10x (tuned in a simulation of a cold start).
const RIDGE: f64 = 0.05;
/// Feature scales, so that one ridge weight suits all three coefficients; the small step
/// feature keeps a first long step from being read as a fixed cost.
const SCALE: [f64; 3] = [10.0, 1e2, 1e5];
/// Steps of at least this many tokens teach the per-token and per-pair costs.
const PREFILL_STEP_TOKENS: f64 = 16.0;

impl StepTimeCoefficients {
    /// A prior from the model's shapes: its FLOPs per token and per pair at a modest rate.
    pub fn prior_for(cfg: &ModelConfig) -> Self {
        let cost = StepCostModel::new(cfg, 0.0, 4);
        let one = cost.sequence(1, 0, false).flops;
        let per_pair = (cost.sequence(1, 1000, false).flops - one) / 1000.0;
        Self {
            per_step: 0.005,
            per_token: (one - per_pair) / PRIOR_LINEAR_FLOPS_PER_S,
            per_pair: per_pair / PRIOR_ATTENTION_FLOPS_PER_S,
        }
    }

    /// Predicted seconds of a step of this shape.
    pub fn predict(&self, shape: StepShape) -> f64 {
        self.per_step + self.per_token * shape.tokens + self.per_pair * shape.pairs
    }

    fn as_scaled(self) -> [f64; 3] {
        [
            self.per_step * SCALE[0],
            self.per_token * SCALE[1],
            self.per_pair * SCALE[2],
        ]
    }

    fn from_scaled(b: [f64; 3]) -> Self {
        Self {
            per_step: (b[0] / SCALE[0]).max(0.0),
            per_token: (b[1] / SCALE[1]).max(0.0),
            per_pair: (b[2] / SCALE[2]).max(0.0),
        }
    }
}

impl Default for StepTimeCoefficients {
    /// A 135M-parameter model on two cores, roughly.
    fn default() -> Self {
        Self {
            per_step: 0.005,
            per_token: 0.002,
            per_pair: 2e-6,
        }
    }
}

/// Predicts step times, and learns from measured ones when `learning`.
#[derive(Debug, Clone)]
pub struct StepTimeModel {
    prior: StepTimeCoefficients,
    current: StepTimeCoefficients,
    learning: bool,
    /// Recent steps of fewer than [`PREFILL_STEP_TOKENS`] tokens (decodes).
    recent: VecDeque<Observation>,
    /// Recent steps of at least [`PREFILL_STEP_TOKENS`] tokens.
    recent_prefills: VecDeque<Observation>,
    prefill_steps_seen: usize,
}

/// A measured step: its scaled features and seconds.
type Observation = ([f64; 3], f64);

impl StepTimeModel {
    pub fn new(prior: StepTimeCoefficients, learning: bool) -> Self {
        Self {
            prior,
            current: prior,
            learning,
            recent: VecDeque::with_capacity(WINDOW - PREFILL_WINDOW),
            recent_prefills: VecDeque::with_capacity(PREFILL_WINDOW),
            prefill_steps_seen: 0,
        }
    }

    /// Learning and not yet measured on two prefill steps: the prior alone may be far off,
    /// so chunks stay small until it is not.
    pub fn is_cold(&self) -> bool {
        self.learning && self.prefill_steps_seen < 2
    }

    pub fn coefficients(&self) -> StepTimeCoefficients {
        self.current
    }

    /// Predicted seconds of a step of this shape.
    pub fn predict(&self, shape: StepShape) -> f64 {
        self.current.predict(shape)
    }

    /// A step of `shape` took `seconds`: refit on the recent steps.
    pub fn observe(&mut self, shape: StepShape, seconds: f64) {
        let measured = seconds > 0.0 && seconds.is_finite();
        if !self.learning || !measured || shape.tokens == 0.0 {
            return;
        }
        let x = [1.0 / SCALE[0], shape.tokens / SCALE[1], shape.pairs / SCALE[2]];
        let (window, capacity) = if shape.tokens >= PREFILL_STEP_TOKENS {
            self.prefill_steps_seen += 1;
            (&mut self.recent_prefills, PREFILL_WINDOW)
        } else {
            (&mut self.recent, WINDOW - PREFILL_WINDOW)
        };
        if window.len() == capacity {
            window.pop_front();
        }
        window.push_back((x, seconds));
        self.current = StepTimeCoefficients::from_scaled(self.fit());
    }

    /// Ridge regression toward the prior: (XᵀX + λI) b = Xᵀy + λ b₀.
    fn fit(&self) -> [f64; 3] {
        let prior = self.prior.as_scaled();
        let mut a = [[0.0; 3]; 3];
        let mut rhs = [0.0; 3];
        for i in 0..3 {
            a[i][i] = RIDGE;
            rhs[i] = RIDGE * prior[i];
        }
        for (x, y) in self.recent.iter().chain(&self.recent_prefills) {
            for i in 0..3 {
                for j in 0..3 {
                    a[i][j] += x[i] * x[j];
                }
                rhs[i] += x[i] * y;
            }
        }
        solve3(a, rhs).unwrap_or(prior)
    }
}

/// Gaussian elimination with partial pivoting; `None` when singular.
fn solve3(mut a: [[f64; 3]; 3], mut b: [f64; 3]) -> Option<[f64; 3]> {
    for col in 0..3 {
        let pivot = (col..3).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        let pivot_row = a[col];
        for row in col + 1..3 {
            let f = a[row][col] / pivot_row[col];
            for (value, above) in a[row].iter_mut().zip(pivot_row).skip(col) {
                *value -= f * above;
            }
            b[row] -= f * b[col];
        }
    }
    let mut x = [0.0; 3];
    for row in (0..3).rev() {
        let tail: f64 = (row + 1..3).map(|k| a[row][k] * x[k]).sum();
        x[row] = (b[row] - tail) / a[row][row];
    }
    Some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_the_coefficients_of_a_machine_from_its_steps() {
        let truth = StepTimeCoefficients {
            per_step: 0.01,
            per_token: 0.0005,
            per_pair: 1e-7,
        };
        // The prior is off by 4x everywhere.
        let prior = StepTimeCoefficients {
            per_step: 0.04,
            per_token: 0.002,
            per_pair: 4e-7,
        };
        let mut model = StepTimeModel::new(prior, true);
        let time = |s: StepShape| truth.per_step + truth.per_token * s.tokens + truth.per_pair * s.pairs;
        // Decodes of 8 sequences at growing context and prefill chunks at growing offsets.
        for i in 0..40 {
            let mut decode = StepShape::default();
            for _ in 0..8 {
                decode.add(StepShape::chunk(1, 100 + 50 * i));
            }
            model.observe(decode, time(decode));
            let chunk = StepShape::chunk(512, 512 * (i % 12));
            model.observe(chunk, time(chunk));
        }
        let probe = StepShape::chunk(1024, 4096);
        let predicted = model.predict(probe);
        // Tolerance: the ridge pull toward the prior over 80 exact observations.
        assert!(
            (predicted / time(probe) - 1.0).abs() < 0.05,
            "predicted {predicted}, true {}",
            time(probe)
        );
    }

    /// One burst of prompts, then hundreds of decode steps: the prompt-token cost learned
    /// from the burst still predicts the next burst (the decodes alone cannot tell it apart
    /// from the per-step cost, and the prior is 4x off).
    #[test]
    fn remembers_prompt_costs_through_a_long_run_of_decodes() {
        let truth = StepTimeCoefficients {
            per_step: 0.01,
            per_token: 0.001,
            per_pair: 1e-7,
        };
        let prior = StepTimeCoefficients {
            per_step: 0.005,
            per_token: 0.004,
            per_pair: 4e-7,
        };
        let mut model = StepTimeModel::new(prior, true);
        let time = |s: StepShape| truth.per_step + truth.per_token * s.tokens + truth.per_pair * s.pairs;
        for burst in 0..3 {
            for prompts in [1, 7] {
                let mut step = StepShape::default();
                for _ in 0..prompts {
                    step.add(StepShape::chunk(128, 0));
                }
                model.observe(step, time(step));
            }
            for i in 0..300 {
                let mut decode = StepShape::default();
                for _ in 0..8 {
                    decode.add(StepShape::chunk(1, 128 + (i + burst) % 128));
                }
                model.observe(decode, time(decode));
            }
        }
        let probe = StepShape::chunk(128, 0);
        let predicted = model.predict(probe);
        // Tolerance: 10 % (the ridge pull toward the prior; the window of decodes alone
        // predicted 2-3x).
        assert!(
            (predicted / time(probe) - 1.0).abs() < 0.1,
            "predicted {predicted}, true {}",
            time(probe)
        );
    }

    #[test]
    fn a_fixed_model_does_not_learn() {
        let c = StepTimeCoefficients::default();
        let mut model = StepTimeModel::new(c, false);
        model.observe(StepShape::chunk(100, 0), 100.0);
        assert_eq!(model.coefficients(), c);
    }

    #[test]
    fn pairs_count_every_query_against_its_context() {
        // 3 tokens from 0: 1 + 2 + 3; one decode at position 10 sees 11 tokens.
        assert_eq!(StepShape::chunk(3, 0).pairs, 6.0);
        assert_eq!(StepShape::chunk(1, 10).pairs, 11.0);
    }
}
