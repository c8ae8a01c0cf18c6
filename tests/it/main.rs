//! Integration tests, in one binary so the crate is linked once.

mod api_tiny;
mod benchmarks;
mod common;
mod disconnects;
mod model_formats;
mod openai_client;
mod otlp_env_headers;
mod otlp_logs;
mod otlp_push;
mod reference_parity;
mod scheduler_pressure;
mod telemetry;
mod telemetry_external;
