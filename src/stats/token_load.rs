//! Load in tokens, the gauges the Gateway API Inference Extension's model-server protocol
//! lists: `num_tokens_waiting`, `num_tokens_running` and `max_token_capacity` (engine prefix,
//! vLLM's names), and kiln's `kiln_uncached_tokens_waiting` (the waiting tokens the prefix
//! cache would not cover), so a router can weigh replicas by the work queued, not by requests.

use opentelemetry::KeyValue;
use opentelemetry::metrics::Gauge;

use super::builder::InstrumentBuilder;
use super::data::TokenLoad;
use super::family::{engine, kiln};

pub(super) struct TokenLoadInstruments {
    waiting: Gauge<u64>,
    running: Gauge<u64>,
    capacity: Gauge<u64>,
    uncached_waiting: Gauge<u64>,
}

impl TokenLoadInstruments {
    pub(super) fn new(b: &InstrumentBuilder<'_>) -> Self {
        Self {
            waiting: b.gauge_u64(engine::NUM_TOKENS_WAITING),
            running: b.gauge_u64(engine::NUM_TOKENS_RUNNING),
            capacity: b.gauge_u64(engine::MAX_TOKEN_CAPACITY),
            uncached_waiting: b.unprefixed().gauge_u64(kiln::UNCACHED_TOKENS_WAITING),
        }
    }

    /// The capacity is fixed by the configuration: set once at start, before any step.
    pub(super) fn record_capacity(&self, model: &[KeyValue], tokens: u64) {
        self.capacity.record(tokens, model);
    }

    /// One step's load (the capacity is left alone: the initial, empty step has none).
    pub(super) fn record_step(&self, model: &[KeyValue], load: &TokenLoad) {
        self.waiting.record(load.waiting, model);
        self.running.record(load.running, model);
        self.uncached_waiting.record(load.uncached_waiting, model);
    }
}

#[cfg(test)]
mod tests {
    use crate::stats::exporter::test_support::{config, value};
    use crate::stats::exporter::{build_telemetry, render_metrics};

    #[test]
    fn the_token_gauges_exist_from_the_start_with_the_cache_capacity() {
        let mut cfg = config("vllm:");
        cfg.cache_info.block_size = 16;
        cfg.cache_info.num_gpu_blocks = 10;
        let t = build_telemetry(&cfg).unwrap();
        let text = render_metrics(&t.registry).unwrap();
        let labels = [("engine", "0"), ("model_name", "smollm2")];
        assert_eq!(value(&text, "vllm:max_token_capacity", &labels), Some(160.0), "{text}");
        for name in [
            "vllm:num_tokens_waiting",
            "vllm:num_tokens_running",
            "kiln_uncached_tokens_waiting",
        ] {
            assert_eq!(value(&text, name, &labels), Some(0.0), "{name}: {text}");
        }
    }

    #[test]
    fn a_lint_clean_prefix_renames_the_engine_families_only() {
        let t = build_telemetry(&config("kiln_")).unwrap();
        let text = render_metrics(&t.registry).unwrap();
        assert!(text.contains("\nkiln_num_tokens_waiting{"), "{text}");
        assert!(text.contains("\nkiln_uncached_tokens_waiting{"), "{text}");
        assert!(!text.contains("kiln_kiln_"), "{text}");
    }
}
