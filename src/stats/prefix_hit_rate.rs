//! vLLM v0's `gpu_prefix_cache_hit_rate` gauge (engine prefix): the share of looked-up prompt
//! tokens the prefix cache held, since start. vLLM v1 replaced it with the two counters kiln
//! also exports, but SGLang's model gateway (smg) still reads the gauge for its view of a
//! worker's cache.

use std::sync::atomic::{AtomicU64, Ordering};

use opentelemetry::KeyValue;
use opentelemetry::metrics::Gauge;

use super::builder::InstrumentBuilder;
use super::data::SchedulerStats;
use super::family::engine;

pub(super) struct PrefixHitRate {
    gauge: Gauge<f64>,
    /// Lifetime totals (the steps' stats carry only what changed since the last).
    queries: AtomicU64,
    hits: AtomicU64,
}

impl PrefixHitRate {
    pub(super) fn new(b: &InstrumentBuilder<'_>) -> Self {
        Self {
            gauge: b.gauge_f64(engine::GPU_PREFIX_CACHE_HIT_RATE),
            queries: AtomicU64::new(0),
            hits: AtomicU64::new(0),
        }
    }

    /// Adds one step's lookups and sets the gauge (0 before any lookup).
    pub(super) fn record_step(&self, model: &[KeyValue], s: &SchedulerStats) {
        let queries = self.queries.fetch_add(s.prefix_cache_queries, Ordering::Relaxed) + s.prefix_cache_queries;
        let hits = self.hits.fetch_add(s.prefix_cache_hits, Ordering::Relaxed) + s.prefix_cache_hits;
        let rate = if queries == 0 {
            0.0
        } else {
            hits as f64 / queries as f64
        };
        self.gauge.record(rate, model);
    }
}

#[cfg(test)]
mod tests {
    use crate::stats::data::{IterationStats, SchedulerStats};
    use crate::stats::exporter::test_support::{config, value};
    use crate::stats::exporter::{build_telemetry, render_metrics};

    #[test]
    fn the_rate_is_lifetime_hits_over_lookups() {
        let t = build_telemetry(&config("vllm:")).unwrap();
        let instruments = t.instruments.clone().expect("telemetry is on");
        let labels = [("engine", "0"), ("model_name", "smollm2")];
        let rate = || {
            value(
                &render_metrics(&t.registry).unwrap(),
                "vllm:gpu_prefix_cache_hit_rate",
                &labels,
            )
        };
        instruments.record_step_for_test(&SchedulerStats::default(), &IterationStats::default());
        assert_eq!(rate(), Some(0.0), "before any lookup");
        let step = |queries, hits| SchedulerStats {
            prefix_cache_queries: queries,
            prefix_cache_hits: hits,
            ..Default::default()
        };
        instruments.record_step_for_test(&step(30, 12), &IterationStats::default());
        assert_eq!(rate(), Some(0.4));
        instruments.record_step_for_test(&step(10, 10), &IterationStats::default());
        assert_eq!(rate(), Some(0.55));
    }
}
