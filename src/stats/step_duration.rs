//! `kiln_step_duration_seconds`: the executor's wall time per engine step, beside
//! `iteration_tokens_total`. It shows the scheduler's step-time budget (`--max-step-ms`) at
//! work: with the budget on, steps cluster under it whatever the prompts.

use opentelemetry::KeyValue;

use super::builder::InstrumentBuilder;
use super::data::IterationStats;
use super::family::kiln::STEP_DURATION;
use super::histogram_store::Histogram;

/// From a decode step of a small model (a few ms) to a long-context prefill chunk of a large
/// one (tens of seconds).
pub const STEP_DURATION_BUCKETS: [f64; 16] = [
    0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

pub(super) struct StepDurationInstrument {
    histogram: Histogram<f64>,
}

impl StepDurationInstrument {
    /// `b` builds unprefixed instruments: the family is `kiln_*` whatever the prefix.
    pub(super) fn new(b: &InstrumentBuilder<'_>) -> Self {
        Self {
            histogram: b.histogram_f64_with(STEP_DURATION, &STEP_DURATION_BUCKETS),
        }
    }

    pub(super) fn record_step(&self, model: &[KeyValue], it: &IterationStats) {
        if let Some(seconds) = it.step_duration_s {
            self.histogram.record(seconds, model);
        }
    }
}
