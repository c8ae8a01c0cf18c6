//! Integration tests, in one binary so the crate is linked once (built with the `testing`
//! feature, for the doubles). Tests that set process-wide state (an environment variable, the
//! global tracing subscriber) have binaries of their own: `tests/otlp_env_headers.rs`,
//! `tests/otlp_logs.rs`.

mod access_control;
mod access_logs;
mod alert_rules;
mod api_tiny;
mod benchmarks;
mod chat_templates;
mod common;
mod config_errors;
mod deploy_manifests;
mod disconnects;
mod draining;
mod exemplars;
mod faults;
mod gateway_metrics;
mod grafana_dashboard;
mod hostile_input;
mod kv_events;
mod log_injection;
mod model_formats;
mod openai_client;
mod openapi;
mod otlp_export_health;
mod otlp_push;
mod overload;
mod process_lifecycle;
mod reference_parity;
mod sampling_params;
mod scheduler_pressure;
mod schemathesis;
mod slow_clients;
mod structured_outputs;
mod telemetry;
mod telemetry_external;
mod tls;
mod tool_calling;
mod trace_exemplars;
mod traces;
mod vllm_compat;
mod vllm_dashboards;
mod vocabulary;
