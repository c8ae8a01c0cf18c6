//! Telemetry: the only module that touches metrics APIs. The engine sends plain stats data
//! (`data`) to the `StatsActor`, which records OpenTelemetry instruments declared once in
//! `instruments`; `exporter` exposes them to Prometheus (and push readers).

pub mod actor;
mod boxed_reader;
pub mod buckets;
pub mod builder;
pub mod custom_buckets;
pub mod data;
pub mod engine_health;
pub mod export_health;
pub mod exporter;
pub mod exposition;
pub mod family;
pub mod flagged;
pub mod histogram_store;
pub mod instrumentator;
pub mod instruments;
mod kv_offload;
pub mod lora_adapters;
mod lora_info;
pub mod memory;
pub mod metrics_endpoint;
pub mod native_buckets;
pub mod otlp_push;
pub mod prefix_hit_rate;
pub mod prom_proto;
pub mod prompt_source;
pub mod protobuf_exposition;
pub mod push_histograms;
mod request_failure;
pub mod sample_filter;
mod service_resource;
pub mod span_exports;
pub mod step_cost;
pub mod step_duration;
pub mod structured;
pub mod throughput_log;
pub mod token_load;
