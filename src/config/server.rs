//! `[server]`: the HTTP listener and its connections.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::{ConfigError, invalid};

/// Each field is one setting: its key (`server.<field>`), its flag and `KILN_*` variable
/// (`#[arg]`), its help (the doc comment) and its default (`Default`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
#[command(next_help_heading = "Server")]
pub struct ServerConfig {
    /// Address to listen on (loopback by default; 0.0.0.0 serves the network).
    #[arg(long, env = "KILN_HOST")]
    pub host: String,
    /// TCP port.
    #[arg(long, env = "KILN_PORT")]
    pub port: u16,
    /// The model id clients send and /v1/models lists; empty: the model's own name.
    #[arg(long, env = "KILN_SERVED_MODEL_NAME")]
    pub served_model_name: String,
    /// Largest accepted request body in bytes; larger ones get 413.
    #[arg(long, env = "KILN_MAX_REQUEST_BODY_BYTES")]
    pub max_request_body_bytes: usize,
    /// Add a `metrics` object (queue, TTFT, decode, ITL, tokens/s) to every response.
    #[arg(long, env = "KILN_ENABLE_PER_REQUEST_METRICS")]
    pub enable_per_request_metrics: bool,
    /// Serve GET /tokenizer_info (the tokenizer's configuration, as vLLM's flag of this name).
    #[arg(long, env = "KILN_ENABLE_TOKENIZER_INFO_ENDPOINT")]
    pub enable_tokenizer_info_endpoint: bool,
    /// Seconds running requests get to finish after SIGTERM before they are aborted.
    #[arg(
        long = "shutdown-grace-period",
        env = "KILN_SHUTDOWN_GRACE_PERIOD",
        value_name = "SECS"
    )]
    pub shutdown_grace_period_s: f64,
    /// Seconds a client may take to send a request's head (then 408).
    #[arg(
        long = "request-head-timeout",
        env = "KILN_REQUEST_HEAD_TIMEOUT",
        value_name = "SECS"
    )]
    pub request_head_timeout_s: f64,
    /// Seconds a client may take to send a request's body (then 408).
    #[arg(
        long = "request-body-timeout",
        env = "KILN_REQUEST_BODY_TIMEOUT",
        value_name = "SECS"
    )]
    pub request_body_timeout_s: f64,
    /// Seconds a streaming client may stop reading before its request is aborted.
    #[arg(
        long = "stream-stall-timeout",
        env = "KILN_STREAM_STALL_TIMEOUT",
        value_name = "SECS"
    )]
    pub stream_stall_timeout_s: f64,
    /// Kernel send buffer of each client connection in bytes (0: kernel autotuning). Bounds
    /// what a client that stops reading can pile up.
    #[arg(long, env = "KILN_SEND_BUFFER_BYTES")]
    pub send_buffer_bytes: usize,
    /// HTTP worker threads (0: one per CPU the process may use).
    #[arg(long, env = "KILN_HTTP_WORKERS")]
    pub http_workers: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 8000,
            served_model_name: String::new(),
            max_request_body_bytes: 1 << 20,
            enable_per_request_metrics: false,
            enable_tokenizer_info_endpoint: false,
            shutdown_grace_period_s: 30.0,
            request_head_timeout_s: 5.0,
            request_body_timeout_s: 30.0,
            stream_stall_timeout_s: 30.0,
            send_buffer_bytes: 0,
            http_workers: 0,
        }
    }
}

impl ServerConfig {
    /// The HTTP worker count: the configured one, else one per CPU the process may use.
    pub fn http_workers(&self) -> usize {
        if self.http_workers > 0 {
            return self.http_workers;
        }
        std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.host.is_empty() {
            return Err(invalid("server.host", "must not be empty"));
        }
        format!("{}:{}", self.host, self.port)
            .parse::<SocketAddr>()
            .map_err(|err| invalid("server.host", err.to_string()))?;
        if self.max_request_body_bytes < 1024 {
            return Err(invalid("server.max_request_body_bytes", "must be at least 1024"));
        }
        for (key, value) in [
            ("server.request_head_timeout_s", self.request_head_timeout_s),
            ("server.request_body_timeout_s", self.request_body_timeout_s),
            ("server.stream_stall_timeout_s", self.stream_stall_timeout_s),
        ] {
            if !(value > 0.0 && value.is_finite()) {
                return Err(invalid(key, "must be a positive number of seconds"));
            }
        }
        let grace = self.shutdown_grace_period_s;
        if !(grace >= 0.0 && grace.is_finite()) {
            return Err(invalid(
                "server.shutdown_grace_period_s",
                "must be a number of seconds, 0 or more",
            ));
        }
        Ok(())
    }
}
