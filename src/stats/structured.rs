//! kiln's constrained-decoding families (`kiln_*` whatever the engine prefix, label
//! `model_name` and `engine`): constrained requests by kind, those that ended without a valid
//! completion by reason, grammar compile time, cache lookups and failures, and the time of
//! each per-token mask.

use actix::Message;
use opentelemetry::KeyValue;
use opentelemetry::metrics::Counter;

use super::builder::InstrumentBuilder;
use super::data::IterationStats;
use super::histogram_store::Histogram;
use crate::engine::structured_output::StructuredOutput;
use crate::engine::types::FinishReason;

use super::family::structured as specs;

/// Compile time buckets: from a cached lexer's fraction of a millisecond to the timeout.
pub const COMPILE_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];
/// Mask time buckets: llguidance aims at ~50 µs for a large vocabulary.
pub const MASK_BUCKETS: [f64; 12] = [
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1,
];
/// `reason` values of `kiln_structured_output_invalid_total` (the finish reasons but `stop`).
pub const INVALID_REASONS: [&str; 3] = ["length", "abort", "error"];
/// `reason` values of `kiln_grammar_compile_failures_total` (`GrammarError::reason`).
pub const COMPILE_FAILURE_REASONS: [&str; 4] = ["too_large", "invalid", "timeout", "unavailable"];

/// One compile request from the API: a cache hit, a compile, or a refusal.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct RecordGrammarCompile {
    /// The grammar came from the cache.
    pub cache_hit: bool,
    /// Seconds compiling (a miss that compiled).
    pub compile_seconds: Option<f64>,
    /// Why it was refused (`GrammarError::reason`).
    pub failure: Option<&'static str>,
}

pub(super) struct StructuredOutputInstruments {
    requests: Counter<u64>,
    invalid: Counter<u64>,
    compile_duration: Histogram<f64>,
    cache_queries: Counter<u64>,
    cache_hits: Counter<u64>,
    compile_failures: Counter<u64>,
    mask_duration: Histogram<f64>,
    /// `[model_name, engine, reason]` per `COMPILE_FAILURE_REASONS`.
    failure_attrs: [Vec<KeyValue>; 4],
}

/// `model` (the engine's `[model_name, engine]`) plus one label.
fn labelled(model: &[KeyValue], key: &'static str, value: &'static str) -> Vec<KeyValue> {
    let mut attrs = model.to_vec();
    attrs.push(KeyValue::new(key, value));
    attrs
}

impl StructuredOutputInstruments {
    /// `b` builds unprefixed instruments: these families are `kiln_*` whatever the prefix.
    pub(super) fn new(b: &InstrumentBuilder<'_>, model: &[KeyValue]) -> Self {
        let counter = |s| b.counter(s);
        let hist = |s, bounds: &[f64]| b.histogram_f64_with(s, bounds);
        let labelled = |key: &'static str, value: &'static str| {
            let mut attrs = model.to_vec();
            attrs.push(KeyValue::new(key, value));
            attrs
        };
        Self {
            requests: counter(specs::REQUESTS),
            invalid: counter(specs::INVALID),
            compile_duration: hist(specs::COMPILE_DURATION, &COMPILE_BUCKETS),
            cache_queries: counter(specs::CACHE_QUERIES),
            cache_hits: counter(specs::CACHE_HITS),
            compile_failures: counter(specs::COMPILE_FAILURES),
            mask_duration: hist(specs::MASK_DURATION, &MASK_BUCKETS),
            failure_attrs: COMPILE_FAILURE_REASONS.map(|r| labelled("reason", r)),
        }
    }

    /// Every counter series at 0, so `rate()` has a baseline before the first constraint.
    pub(super) fn record_initial(&self, model: &[KeyValue]) {
        for kind in StructuredOutput::KINDS {
            self.requests.add(0, &labelled(model, "kind", kind));
        }
        for reason in INVALID_REASONS {
            self.invalid.add(0, &labelled(model, "reason", reason));
        }
        self.failure_attrs.iter().for_each(|a| self.compile_failures.add(0, a));
        self.cache_queries.add(0, model);
        self.cache_hits.add(0, model);
    }

    pub(super) fn record_step(&self, model: &[KeyValue], it: &IterationStats) {
        for &seconds in &it.grammar_mask_seconds {
            self.mask_duration.record(seconds, model);
        }
        for finished in &it.finished {
            let Some(kind) = finished.constraint_kind else { continue };
            if let Some(&kind) = StructuredOutput::KINDS.iter().find(|&&k| k == kind) {
                self.requests.add(1, &labelled(model, "kind", kind));
            }
            let reason = match finished.finish_reason {
                FinishReason::Stop => continue,
                FinishReason::Length => 0,
                FinishReason::Abort => 1,
                FinishReason::Error => 2,
            };
            self.invalid.add(1, &labelled(model, "reason", INVALID_REASONS[reason]));
        }
    }

    pub(super) fn record_compile(&self, model: &[KeyValue], msg: RecordGrammarCompile) {
        if let Some(failure) = msg.failure {
            if let Some(i) = COMPILE_FAILURE_REASONS.iter().position(|&r| r == failure) {
                self.compile_failures.add(1, &self.failure_attrs[i]);
            }
            return;
        }
        self.cache_queries.add(1, model);
        if msg.cache_hit {
            self.cache_hits.add(1, model);
        }
        if let Some(seconds) = msg.compile_seconds {
            self.compile_duration.record(seconds, model);
        }
    }
}
