//! `[scheduler]`: how one engine step is shared between running decodes, short prompts and
//! long ones (issue 31): a time budget per step and vLLM's partial-prefill limits.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfigError, invalid};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
#[command(next_help_heading = "Scheduler")]
pub struct SchedulerSettings {
    /// Predicted wall time one engine step may take, in ms; prefill chunks are sized to fit
    /// it (0: no time budget, the token budget --max-num-batched-tokens alone).
    #[arg(long, env = "KILN_MAX_STEP_MS")]
    pub max_step_ms: f64,
    /// Prompts prefilled side by side in one step (vLLM's `--max-num-partial-prefills`).
    #[arg(long, env = "KILN_MAX_NUM_PARTIAL_PREFILLS")]
    pub max_num_partial_prefills: usize,
    /// Long prompts prefilled side by side in one step (vLLM's `--max-long-partial-prefills`).
    #[arg(long, env = "KILN_MAX_LONG_PARTIAL_PREFILLS")]
    pub max_long_partial_prefills: usize,
    /// Prompts of more tokens than this are long, the tokens already computed included (0: 4%
    /// of max_model_len, vLLM's rule, at least 64).
    #[arg(long, env = "KILN_LONG_PREFILL_TOKEN_THRESHOLD")]
    pub long_prefill_token_threshold: usize,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        Self {
            max_step_ms: 250.0,
            max_num_partial_prefills: 4,
            max_long_partial_prefills: 1,
            long_prefill_token_threshold: 0,
        }
    }
}

impl SchedulerSettings {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.max_step_ms >= 0.0 && self.max_step_ms.is_finite()) {
            return Err(invalid(
                "scheduler.max_step_ms",
                "must be a number of milliseconds, 0 or more",
            ));
        }
        if self.max_num_partial_prefills == 0 {
            return Err(invalid("scheduler.max_num_partial_prefills", "must be at least 1"));
        }
        if self.max_long_partial_prefills == 0 || self.max_long_partial_prefills > self.max_num_partial_prefills {
            return Err(invalid(
                "scheduler.max_long_partial_prefills",
                "must be at least 1 and at most max_num_partial_prefills",
            ));
        }
        Ok(())
    }

    /// The time budget, `None` when off.
    pub fn max_step(&self) -> Option<Duration> {
        (self.max_step_ms > 0.0).then(|| Duration::from_secs_f64(self.max_step_ms / 1000.0))
    }

    /// The long-prefill threshold for a model context of `max_model_len` tokens.
    pub fn long_prefill_threshold(&self, max_model_len: usize) -> usize {
        if self.long_prefill_token_threshold > 0 {
            self.long_prefill_token_threshold
        } else {
            (max_model_len * 4 / 100).max(64)
        }
    }
}
