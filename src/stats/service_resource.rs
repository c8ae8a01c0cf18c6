//! The OpenTelemetry resource kiln's metric and span exports carry.

use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::resource::EnvResourceDetector;

/// `service.*` from the config, then `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_SERVICE_NAME` on
/// top (the standard variables win, as the OpenTelemetry spec says). No SDK/telemetry
/// detectors: `target_info` carries what operators asked for and nothing else.
pub fn service_resource(service_name: &str, service_instance_id: &str) -> Resource {
    let instance_id = if service_instance_id.is_empty() {
        default_instance_id()
    } else {
        service_instance_id.to_owned()
    };
    let mut builder = Resource::builder_empty()
        .with_service_name(service_name.to_owned())
        .with_attributes([
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            KeyValue::new("service.instance.id", instance_id),
        ])
        .with_detector(Box::new(EnvResourceDetector::new()));
    if let Some(name) = std::env::var("OTEL_SERVICE_NAME").ok().filter(|s| !s.is_empty()) {
        builder = builder.with_service_name(name);
    }
    builder.build()
}

fn default_instance_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".to_owned());
    format!("{}@{host}", std::process::id())
}
