//! `vllm:engine_healthy{engine}`, as vLLM exposes it under fault tolerance (the `engine` label
//! alone, no `model_name`, as vLLM's fault-tolerance tests read it): 1 while the
//! executor serves (ready, or draining its last requests), 0 while it loads or restarts and
//! once it is dead. An observable gauge reads the shared `EngineHealth` at each collection,
//! so a scrape says what `/ready` and `/health` would say at that moment.

use std::sync::Arc;

use opentelemetry::metrics::MeterProvider;

use super::exporter::Telemetry;
use super::family::{engine::ENGINE_HEALTHY, engine_metric_name};
use crate::engine::health::{EngineHealth, EngineState};

/// The gauge's value for a state.
pub fn healthy_value(state: &EngineState) -> u64 {
    match state {
        EngineState::Ready | EngineState::Draining => 1,
        EngineState::Loading | EngineState::Restarting | EngineState::Dead(_) => 0,
    }
}

/// Registers the gauge on the telemetry's meter providers (none when telemetry is off): one
/// series per engine, `health[i]` being engine `i`'s.
pub fn register_engine_health(telemetry: &Telemetry, engine_prefix: &str, health: &[Arc<EngineHealth>]) {
    let Some(instruments) = &telemetry.instruments else {
        return;
    };
    for provider in telemetry.providers() {
        // `model[1]` is the `engine` label.
        let series: Vec<_> = health
            .iter()
            .enumerate()
            .map(|(i, h)| ([instruments.engine_labels(i).model[1].clone()], Arc::clone(h)))
            .collect();
        // The SDK keeps the callback registered for the provider's life.
        let _ = provider
            .meter("kiln")
            .u64_observable_gauge(engine_metric_name(engine_prefix, ENGINE_HEALTHY.name))
            .with_description(ENGINE_HEALTHY.description)
            .with_callback(move |observer| {
                for (labels, health) in &series {
                    observer.observe(healthy_value(&health.state()), labels);
                }
            })
            .build();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::exporter::render_metrics;
    use crate::stats::exporter::test_support::{config, value};

    #[test]
    fn the_gauge_follows_the_engine_state_at_each_scrape() {
        let telemetry = crate::stats::exporter::build_telemetry(&config("vllm:")).expect("builds");
        let health = Arc::new(EngineHealth::new());
        register_engine_health(&telemetry, "vllm:", std::slice::from_ref(&health));
        let healthy = || {
            let text = render_metrics(&telemetry.registry).expect("renders");
            let lines = crate::stats::exporter::test_support::samples(&text, "vllm:engine_healthy");
            assert_eq!(lines.len(), 1);
            assert!(
                lines[0].starts_with("vllm:engine_healthy{engine=\"0\"} "),
                "{}",
                lines[0]
            );
            value(&text, "vllm:engine_healthy", &[("engine", "0")])
        };
        assert_eq!(healthy(), Some(0.0), "loading");
        health.ready();
        assert_eq!(healthy(), Some(1.0));
        health.restarting();
        assert_eq!(healthy(), Some(0.0), "restarting");
        health.ready();
        health.draining();
        assert_eq!(healthy(), Some(1.0), "draining still serves");
        health.dead("restarts exhausted");
        assert_eq!(healthy(), Some(0.0), "dead");
    }
}
