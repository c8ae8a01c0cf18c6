//! `kiln_memory_bytes{component,device}`: where the process's memory goes (weights, KV cache,
//! host swap pool, the kernels' scratch), beside `process_resident_memory_bytes`. An
//! observable gauge reads the executor's shared counts at each collection.

use std::sync::Arc;

use opentelemetry::KeyValue;
use opentelemetry::metrics::MeterProvider;

use super::exporter::Telemetry;
use super::family::kiln::MEMORY;
use crate::engine::memory::{MemoryComponent, MemoryFootprint};
use crate::kernels::scratch::scratch_bytes;

/// Registers the gauge on the telemetry's meter providers (none when telemetry is off);
/// `device` names where the weights and KV cache live ("cpu" for the CPU backend).
/// The engines' bytes of `component` together; the weights are shared between a
/// data-parallel server's engines, so they count once.
fn engines_total(footprints: &[Arc<MemoryFootprint>], component: MemoryComponent) -> u64 {
    match component {
        MemoryComponent::Weights => footprints.first().map_or(0, |f| f.get(component)),
        _ => footprints.iter().map(|f| f.get(component)).sum(),
    }
}

pub fn register_memory(telemetry: &Telemetry, footprints: &[Arc<MemoryFootprint>], device: &'static str) {
    if telemetry.instruments.is_none() {
        return;
    }
    for provider in telemetry.providers() {
        let footprints = footprints.to_vec();
        let labels = |component: &'static str, device: &'static str| {
            [KeyValue::new("component", component), KeyValue::new("device", device)]
        };
        // The SDK keeps the callback registered for the provider's life.
        let _ = provider
            .meter("kiln")
            .u64_observable_gauge(MEMORY.name)
            .with_unit(MEMORY.unit)
            .with_description(MEMORY.description)
            .with_callback(move |observer| {
                for component in MemoryComponent::ALL {
                    // The swap pool is host memory whatever the device.
                    let on = if component == MemoryComponent::HostSwapPool {
                        "cpu"
                    } else {
                        device
                    };
                    observer.observe(engines_total(&footprints, component), &labels(component.name(), on));
                }
                observer.observe(scratch_bytes(), &labels("scratch", "cpu"));
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
    fn the_gauge_reads_each_component_at_each_scrape() {
        let telemetry = crate::stats::exporter::build_telemetry(&config("vllm:")).expect("builds");
        let footprint = Arc::new(MemoryFootprint::default());
        register_memory(&telemetry, std::slice::from_ref(&footprint), "cpu");
        footprint.set(MemoryComponent::Weights, 1234);
        footprint.set(MemoryComponent::KvCache, 1 << 20);
        let read = |component: &str| {
            let text = render_metrics(&telemetry.registry).expect("renders");
            assert!(text.contains("# TYPE kiln_memory_bytes gauge"), "{text}");
            value(
                &text,
                "kiln_memory_bytes",
                &[("component", component), ("device", "cpu")],
            )
        };
        assert_eq!(read("weights"), Some(1234.0));
        assert_eq!(read("kv_cache"), Some(1048576.0));
        assert_eq!(read("host_swap"), Some(0.0));
        footprint.set(MemoryComponent::HostSwapPool, 4096);
        assert_eq!(read("host_swap"), Some(4096.0));
        assert!(read("scratch").is_some());
    }
}
