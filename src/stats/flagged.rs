//! Engine families vLLM exposes only behind a flag, and kiln likewise:
//! `--kv-cache-metrics` (KV-block residency histograms, from sampled blocks) and
//! `--enable-mfu-metrics` (estimated FLOPs and bytes per step; "per GPU" is per engine).

use opentelemetry::KeyValue;
use opentelemetry::metrics::Counter;

use super::builder::InstrumentBuilder;
use super::data::{IterationStats, SchedulerStats};
use super::histogram_store::Histogram;

use super::family::flagged as specs;

struct Residency {
    lifetime: Histogram<f64>,
    idle_before_evict: Histogram<f64>,
    reuse_gap: Histogram<f64>,
}

struct StepCostCounters {
    flops: Counter<f64>,
    read_bytes: Counter<f64>,
    write_bytes: Counter<f64>,
}

/// The flagged instruments; each group is `None` when its flag is off, so nothing of it is
/// exposed.
pub(super) struct FlaggedInstruments {
    residency: Option<Residency>,
    step_cost: Option<StepCostCounters>,
}

impl FlaggedInstruments {
    pub(super) fn new(b: &InstrumentBuilder<'_>) -> Self {
        let cfg = b.config();
        let hist = |s| b.histogram_f64(s);
        let counter = |s| b.counter_f64(s);
        Self {
            residency: cfg.kv_cache_metrics.then(|| Residency {
                lifetime: hist(specs::KV_BLOCK_LIFETIME),
                idle_before_evict: hist(specs::KV_BLOCK_IDLE_BEFORE_EVICT),
                reuse_gap: hist(specs::KV_BLOCK_REUSE_GAP),
            }),
            step_cost: cfg.mfu_metrics.then(|| StepCostCounters {
                flops: counter(specs::ESTIMATED_FLOPS),
                read_bytes: counter(specs::ESTIMATED_READ_BYTES),
                write_bytes: counter(specs::ESTIMATED_WRITE_BYTES),
            }),
        }
    }

    /// One step; the counters add 0 on idle steps so their series exist from the start.
    pub(super) fn record_step(&self, model: &[KeyValue], s: &SchedulerStats, it: &IterationStats) {
        if let Some(r) = &self.residency {
            let o = &s.kv_block_residency;
            for (hist, values) in [
                (&r.lifetime, &o.lifetime_s),
                (&r.idle_before_evict, &o.idle_before_evict_s),
                (&r.reuse_gap, &o.reuse_gap_s),
            ] {
                for &v in values {
                    hist.record(v, model);
                }
            }
        }
        if let Some(c) = &self.step_cost {
            c.flops.add(it.step_cost.flops, model);
            c.read_bytes.add(it.step_cost.read_bytes, model);
            c.write_bytes.add(it.step_cost.write_bytes, model);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::kv_cache::residency::ResidencyObservations;
    use crate::stats::data::{IterationStats, SchedulerStats};
    use crate::stats::exporter::test_support::{config, value};
    use crate::stats::exporter::{TelemetryConfig, build_telemetry, render_metrics};
    use crate::stats::step_cost::StepCost;

    fn step() -> (SchedulerStats, IterationStats) {
        let scheduler = SchedulerStats {
            kv_block_residency: ResidencyObservations {
                lifetime_s: vec![1.5, 30.0],
                idle_before_evict_s: vec![1.0],
                reuse_gap_s: vec![0.3],
            },
            ..Default::default()
        };
        let iteration = IterationStats {
            step_cost: StepCost {
                flops: 1e9,
                read_bytes: 2e6,
                write_bytes: 4096.0,
            },
            ..Default::default()
        };
        (scheduler, iteration)
    }

    fn render(cfg: &TelemetryConfig) -> String {
        let t = build_telemetry(cfg).unwrap();
        let (s, i) = step();
        t.instruments.as_ref().unwrap().record_step_for_test(&s, &i);
        render_metrics(&t.registry).unwrap()
    }

    #[test]
    fn off_by_default_and_recorded_with_their_flags() {
        let off = render(&config("vllm:"));
        assert!(!off.contains("kv_block_") && !off.contains("estimated_"), "{off}");
        let on = render(&TelemetryConfig {
            kv_cache_metrics: true,
            mfu_metrics: true,
            ..config("vllm:")
        });
        let count = |name: &str| value(&on, &format!("vllm:{name}_seconds_count"), &[]);
        assert_eq!(count("kv_block_lifetime"), Some(2.0));
        assert_eq!(count("kv_block_idle_before_evict"), Some(1.0));
        assert_eq!(count("kv_block_reuse_gap"), Some(1.0));
        let lifetime = "vllm:kv_block_lifetime_seconds_bucket";
        assert_eq!(value(&on, lifetime, &[("le", "2.0")]), Some(1.0));
        let labels = [("engine", "0"), ("model_name", "smollm2")];
        assert_eq!(value(&on, "vllm:estimated_flops_per_gpu_total", &labels), Some(1e9));
        assert_eq!(
            value(&on, "vllm:estimated_read_bytes_per_gpu_total", &labels),
            Some(2e6)
        );
        assert_eq!(
            value(&on, "vllm:estimated_write_bytes_per_gpu_total", &labels),
            Some(4096.0)
        );
    }
}
