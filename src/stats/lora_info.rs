//! vLLM's `lora_requests_info` (engine prefix), which the Gateway API Inference Extension's
//! model-server protocol requires of a server that serves LoRA and llm-d's endpoint picker
//! reads for adapter affinity: a gauge whose labels carry the state (`max_lora`, and the
//! adapters of the running and of the waiting requests, comma-joined) and whose value is the
//! Unix time of the update, so the reader takes the series with the largest value. Exactly
//! as vLLM's `PrometheusStatLogger` writes it: no other label, every step, only with LoRA on
//! (the series of past states stay, as prometheus_client's do).

use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::KeyValue;
use opentelemetry::metrics::Gauge;

use super::builder::InstrumentBuilder;
use super::data::SchedulerStats;
use super::family::lora;

pub(super) struct LoraInfo {
    gauge: Gauge<f64>,
}

impl LoraInfo {
    pub(super) fn new(b: &InstrumentBuilder<'_>) -> Self {
        Self {
            gauge: b.gauge_f64(lora::LORA_REQUESTS_INFO),
        }
    }

    pub(super) fn record_step(&self, s: &SchedulerStats) {
        let Some(load) = &s.lora else {
            return;
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let attrs = [
            KeyValue::new("max_lora", load.max_loras.to_string()),
            KeyValue::new("waiting_lora_adapters", load.waiting.join(",")),
            KeyValue::new("running_lora_adapters", load.running.join(",")),
        ];
        self.gauge.record(now, &attrs);
    }
}

#[cfg(test)]
mod tests {
    use crate::stats::data::{IterationStats, LoraLoad, SchedulerStats};
    use crate::stats::exporter::test_support::{config, value};
    use crate::stats::exporter::{build_telemetry, render_metrics};

    #[test]
    fn the_info_gauge_carries_the_adapters_and_the_update_time() {
        let t = build_telemetry(&config("vllm:")).unwrap();
        let instruments = t.instruments.clone().expect("telemetry is on");
        instruments.record_step_for_test(&SchedulerStats::default(), &IterationStats::default());
        let text = render_metrics(&t.registry).unwrap();
        assert!(!text.contains("lora_requests_info"), "none without LoRA");
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let stats = SchedulerStats {
            lora: Some(LoraLoad {
                max_loras: 2,
                running: vec!["a".into(), "b".into()],
                waiting: vec!["c".into()],
                ..LoraLoad::default()
            }),
            ..Default::default()
        };
        instruments.record_step_for_test(&stats, &IterationStats::default());
        let text = render_metrics(&t.registry).unwrap();
        let labels = [
            ("max_lora", "2"),
            ("running_lora_adapters", "a,b"),
            ("waiting_lora_adapters", "c"),
        ];
        let at = value(&text, "vllm:lora_requests_info", &labels).expect("the series");
        assert!(at >= before.floor() && at < before + 600.0, "{at} vs {before}");
    }
}
