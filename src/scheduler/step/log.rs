//! One debug line per step that comes back (`RUST_LOG=kiln::scheduler::step::log=debug`):
//! its prefill chunks, decodes, predicted and measured time, and the executor's idle gap
//! before it, so where a long prompt's wall time goes can be read off a run (issue 31).

use std::fmt::Write;

use crate::engine::step::{ModelOutput, SchedulerOutput};

/// Logs `batch`, predicted at `predicted_s` when it was chosen, as `output` measured it;
/// `ahead`: it was scheduled while another step ran. `waiting`: requests still queued.
pub(crate) fn log_step(
    batch: &SchedulerOutput,
    output: &ModelOutput,
    predicted_s: Option<f64>,
    ahead: bool,
    waiting: usize,
) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let mut chunks = String::new();
    let mut decodes = 0;
    for seq in &batch.sequences {
        if seq.token_ids.len() > 1 {
            let _ = write!(chunks, "{}:{}@{} ", seq.id, seq.token_ids.len(), seq.start_position);
        } else {
            decodes += 1;
        }
    }
    tracing::debug!(
        chunks = chunks.trim_end(),
        prefill_tokens = batch.num_tokens() - decodes,
        decodes,
        predicted_ms = predicted_s.map(|s| (s * 1e3).round() as u64),
        actual_ms = (output.step_seconds * 1e3).round() as u64,
        idle_ms = output.idle_seconds.map(|s| (s * 1e4).round() / 10.0),
        ahead,
        waiting,
        "step"
    );
}
