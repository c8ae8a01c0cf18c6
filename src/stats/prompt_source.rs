//! vLLM's second-round engine families that say where a prompt's KV came from and why
//! requests wait: `prompt_tokens_by_source_total`, `prompt_tokens_cached_total`,
//! `prompt_tokens_cached_by_source_total`, `request_prefill_kv_computed_tokens` and
//! `num_requests_waiting_by_reason`. kiln has no KV transfer, so the `external_kv_transfer`
//! series stay 0; a waiting request is `deferred` while its LoRA adapter finds no slot
//! (`--max-loras`), else it waits for `capacity`; the
//! series exist from the start all the same, as vLLM's do, so dashboards show 0, not "no data".

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge};

use super::builder::InstrumentBuilder;
use super::data::{IterationStats, SchedulerStats};
use super::histogram_store::Histogram;

use super::family::prompt_source as specs;

/// `source` values of `prompt_tokens_by_source_total`.
pub const PROMPT_SOURCES: [&str; 3] = ["local_compute", "local_cache_hit", "external_kv_transfer"];
/// `source` values of `prompt_tokens_cached_by_source_total`.
pub const CACHED_SOURCES: [&str; 2] = ["local_cache_hit", "external_kv_transfer"];
/// `reason` values of `num_requests_waiting_by_reason`.
pub const WAITING_REASONS: [&str; 2] = ["capacity", "deferred"];

pub(super) struct PromptSourceInstruments {
    by_source: Counter<u64>,
    cached: Counter<u64>,
    cached_by_source: Counter<u64>,
    waiting_by_reason: Gauge<u64>,
    prefill_kv_computed: Histogram<u64>,
}

/// `model` (the engine's `[model_name, engine]`) plus one label.
fn labelled(model: &[KeyValue], key: &'static str, value: &'static str) -> Vec<KeyValue> {
    let mut attrs = model.to_vec();
    attrs.push(KeyValue::new(key, value));
    attrs
}

impl PromptSourceInstruments {
    pub(super) fn new(b: &InstrumentBuilder<'_>) -> Self {
        Self {
            by_source: b.counter(specs::PROMPT_TOKENS_BY_SOURCE),
            cached: b.counter(specs::PROMPT_TOKENS_CACHED),
            cached_by_source: b.counter(specs::PROMPT_TOKENS_CACHED_BY_SOURCE),
            waiting_by_reason: b.gauge_u64(specs::NUM_REQUESTS_WAITING_BY_REASON),
            prefill_kv_computed: b.histogram_u64(specs::REQUEST_PREFILL_KV_COMPUTED_TOKENS),
        }
    }

    /// One step; adding 0 keeps every series present from the first (initial) step.
    pub(super) fn record_step(&self, model: &[KeyValue], s: &SchedulerStats, it: &IterationStats) {
        let cached = it.num_prompt_tokens_cached.min(it.num_prompt_tokens);
        let [compute, cache_hit, external] = PROMPT_SOURCES.map(|v| labelled(model, "source", v));
        self.by_source.add(it.num_prompt_tokens - cached, &compute);
        self.by_source.add(cached, &cache_hit);
        self.by_source.add(0, &external);
        self.cached.add(cached, model);
        let [local, transferred] = CACHED_SOURCES.map(|v| labelled(model, "source", v));
        self.cached_by_source.add(cached, &local);
        self.cached_by_source.add(0, &transferred);
        let [capacity, deferred] = WAITING_REASONS.map(|v| labelled(model, "reason", v));
        let deferred_now = s.num_waiting_deferred.min(s.num_waiting);
        self.waiting_by_reason
            .record((s.num_waiting - deferred_now) as u64, &capacity);
        self.waiting_by_reason.record(deferred_now as u64, &deferred);
        for &computed in &it.prefill_kv_computed_tokens {
            self.prefill_kv_computed.record(computed, model);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::exporter::test_support::{config, value};
    use crate::stats::exporter::{build_telemetry, render_metrics};

    #[test]
    fn every_source_and_reason_exists_from_the_start_at_zero() {
        let t = build_telemetry(&config("vllm:")).unwrap();
        let text = render_metrics(&t.registry).unwrap();
        let labels = |k, v| [(k, v), ("engine", "0"), ("model_name", "smollm2")];
        for source in PROMPT_SOURCES {
            let name = "vllm:prompt_tokens_by_source_total";
            assert_eq!(value(&text, name, &labels("source", source)), Some(0.0), "{source}");
        }
        for source in CACHED_SOURCES {
            let name = "vllm:prompt_tokens_cached_by_source_total";
            assert_eq!(value(&text, name, &labels("source", source)), Some(0.0), "{source}");
        }
        for reason in WAITING_REASONS {
            let name = "vllm:num_requests_waiting_by_reason";
            assert_eq!(value(&text, name, &labels("reason", reason)), Some(0.0), "{reason}");
        }
        assert_eq!(value(&text, "vllm:prompt_tokens_cached_total", &[]), Some(0.0));
    }

    #[test]
    fn a_step_splits_prompt_tokens_by_source_and_waiting_by_reason() {
        let t = build_telemetry(&config("vllm:")).unwrap();
        let scheduler = SchedulerStats {
            num_waiting: 3,
            num_waiting_deferred: 1,
            ..Default::default()
        };
        let iteration = IterationStats {
            num_prompt_tokens: 30,
            num_prompt_tokens_cached: 12,
            prefill_kv_computed_tokens: vec![8, 10],
            ..Default::default()
        };
        let i = t.instruments.as_ref().unwrap();
        i.record_step_for_test(&scheduler, &iteration);
        let text = render_metrics(&t.registry).unwrap();
        let by_source = "vllm:prompt_tokens_by_source_total";
        assert_eq!(value(&text, by_source, &[("source", "local_compute")]), Some(18.0));
        assert_eq!(value(&text, by_source, &[("source", "local_cache_hit")]), Some(12.0));
        assert_eq!(
            value(&text, by_source, &[("source", "external_kv_transfer")]),
            Some(0.0)
        );
        // The sum over sources is the prompt-token total (METRICS.md).
        assert_eq!(value(&text, "vllm:prompt_tokens_total", &[]), Some(30.0));
        assert_eq!(value(&text, "vllm:prompt_tokens_cached_total", &[]), Some(12.0));
        let cached_by_source = "vllm:prompt_tokens_cached_by_source_total";
        assert_eq!(
            value(&text, cached_by_source, &[("source", "local_cache_hit")]),
            Some(12.0)
        );
        let waiting = "vllm:num_requests_waiting_by_reason";
        // The reasons sum to the waiting requests: one waits for its adapter's slot.
        assert_eq!(value(&text, waiting, &[("reason", "capacity")]), Some(2.0));
        assert_eq!(value(&text, waiting, &[("reason", "deferred")]), Some(1.0));
        assert_eq!(value(&text, "vllm:num_requests_waiting", &[]), Some(3.0));
        let computed = "vllm:request_prefill_kv_computed_tokens";
        assert_eq!(value(&text, &format!("{computed}_count"), &[]), Some(2.0));
        assert_eq!(value(&text, &format!("{computed}_sum"), &[]), Some(18.0));
        assert_eq!(
            value(&text, &format!("{computed}_bucket"), &[("le", "10.0")]),
            Some(2.0)
        );
    }
}
