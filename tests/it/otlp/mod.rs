//! OTLP metric push to real receivers: the push itself, exponential histograms, export health.

mod exponential;
mod export_health;
mod push;
mod store_push;
