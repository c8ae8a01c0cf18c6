//! One validated `Config`. Precedence: built-in defaults < config file (`--config`) <
//! environment (`KILN_…`) < command-line flags; clap merges the last two.

mod bytes;
mod choices;
pub mod cli;
pub mod kv_events;
pub mod lora;
pub mod scheduler;
pub mod security;
mod security_args;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use bytes::parse_bytes;
pub use choices::{CpuActivations, CpuKernels, PreemptionMode, ToolCallParser};
pub use kv_events::KvEventsConfig;
pub use lora::{LoraArgs, LoraConfig, LoraModule};
pub use scheduler::SchedulerSettings;
pub use security::SecurityConfig;
pub use security_args::SecurityArgs;

use crate::otlp::{OtlpConfig, OtlpError, OtlpProtocol, otlp_config_from_lookup};

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub model: ModelConfig,
    pub engine: EngineConfig,
    pub limits: LimitsConfig,
    pub security: SecurityConfig,
    pub telemetry: TelemetrySettings,
    pub kv_events: KvEventsConfig,
    pub scheduler: SchedulerSettings,
    pub lora: LoraConfig,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    pub host: String,
    pub port: u16,
    /// The model id clients use; empty means the model's own name.
    pub served_model_name: String,
    /// Largest accepted request body.
    pub max_request_body_bytes: usize,
    /// Add a `metrics` object (queue, TTFT, decode, ITL, tokens/s) to every response.
    pub enable_per_request_metrics: bool,
    /// Serve `GET /tokenizer_info` (vLLM's `--enable-tokenizer-info-endpoint`).
    pub enable_tokenizer_info_endpoint: bool,
    /// Seconds running requests get to finish after SIGTERM/SIGINT; the rest are aborted.
    pub shutdown_grace_period_s: f64,
    /// Seconds a client may take to send a request's head; then 408 and the connection closes.
    pub request_head_timeout_s: f64,
    /// Seconds a client may take to send a request's body once the head is in; then 408.
    pub request_body_timeout_s: f64,
    /// Seconds a streaming client may leave a ready chunk untaken before its request is aborted.
    pub stream_stall_timeout_s: f64,
    /// Kernel send buffer of each client connection in bytes (0: the kernel's autotuning, up
    /// to its `tcp_wmem` maximum). Bounds what a client that stops reading can pile up.
    pub send_buffer_bytes: usize,
    /// HTTP worker threads; 0: one per CPU the process may use.
    pub http_workers: usize,
}

impl ServerConfig {
    /// The HTTP worker count: the configured one, else one per CPU the process may use.
    pub fn http_workers(&self) -> usize {
        if self.http_workers > 0 {
            return self.http_workers;
        }
        std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// A `.gguf` file or a Hugging Face folder; empty means the default model.
    pub path: String,
    /// Where the default model is cached; empty means `$XDG_CACHE_HOME/kiln` or `~/.cache/kiln`.
    pub cache_dir: String,
    /// Widen quantised GGUF weights to f32 at load instead of keeping them packed for the CPU
    /// kernel (always the case on CUDA).
    pub dequantize_weights: bool,
    /// The operator's chat template, replacing the model's: a file, or the template itself
    /// when it contains `{`, `}` or a newline (vLLM's `--chat-template`); empty: the model's.
    pub chat_template: String,
    /// `tool_choice: auto` is served (vLLM's `--enable-auto-tool-choice`); needs a parser.
    pub enable_auto_tool_choice: bool,
    /// How `auto` tool calls are read from the text (vLLM's `--tool-call-parser`); the
    /// file's empty string is none.
    #[serde(deserialize_with = "choices::empty_as_none")]
    pub tool_call_parser: Option<ToolCallParser>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    pub block_size: usize,
    /// Memory for the KV cache, e.g. "1GiB"; sets the number of blocks.
    pub kv_cache_memory: String,
    /// Force this many KV blocks (0: derive from `kv_cache_memory`).
    pub num_gpu_blocks_override: usize,
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
    /// 0: the model's context length.
    pub max_model_len: usize,
    /// Requests allowed to wait before new ones get 429.
    pub max_waiting: usize,
    /// What happens to a running request when blocks run out.
    pub preemption_mode: PreemptionMode,
    /// Host memory (GiB) for the swap pool of `preemption_mode = "swap"`.
    pub swap_space_gib: f64,
    /// Reuse the KV blocks of prompts that start like an earlier one (on by default, as in
    /// vLLM v1: its cost without reuse is within noise, see docs/02-configuration.md).
    pub enable_prefix_caching: bool,
    /// Schedule each step while the one before runs, so the executor never waits for the
    /// scheduler.
    pub async_scheduling: bool,
    /// Executor restarts (after a panic) allowed without a successful step in between; one
    /// more panic marks the engine dead and kiln exits non-zero.
    pub max_engine_restarts: u32,
    /// Seconds one step may run before the engine is declared hung and kiln exits non-zero;
    /// 0: no deadline.
    pub step_timeout_s: f64,
    /// CPU kernel instruction set (the best this CPU runs by default).
    pub cpu_kernels: CpuKernels,
    /// Activations' precision in the many-token matmuls (f32 by default; int8 opts in).
    pub cpu_activations: CpuActivations,
}

/// What one request may ask for, so that no body fans out or costs without bound.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Most sequences one body may start: prompts × `n`.
    pub max_choices_per_request: usize,
    /// Most bytes of all `stop` strings together (each is searched on every token).
    pub max_stop_bytes: usize,
    /// Longest `stop_token_ids` list.
    pub max_stop_token_ids: usize,
    /// Most bytes of prompt text: all prompts of a completions body, or all message contents
    /// of a chat body.
    pub max_prompt_bytes: usize,
    /// Most bytes of a request's output constraint (JSON schema, regex, grammar, choices).
    pub max_structured_output_bytes: usize,
    /// Most prompt-logprob entries one body may ask for (`prompt_logprobs`, or `echo` with
    /// `logprobs`): prompt tokens × (alternatives + 1) × `n`, each computed, decoded and
    /// written.
    pub max_prompt_logprob_entries: usize,
    /// Longest a constraint may take to compile before the request is refused.
    pub grammar_compile_timeout_s: f64,
    /// Compiled grammars kept for reuse.
    pub grammar_cache_size: usize,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetrySettings {
    pub enabled: bool,
    pub engine_prefix: String,
    pub log_interval_s: f64,
    /// Serve `/metrics` on this address too (e.g. "127.0.0.1:9090"); empty: only on the API port.
    pub metrics_listen: String,
    /// OTLP push target, the exact URL; empty: no push (unless `OTEL_EXPORTER_OTLP_*ENDPOINT`).
    pub otlp_endpoint: String,
    /// "http/protobuf" or "grpc".
    pub otlp_protocol: String,
    pub otlp_interval_s: f64,
    pub otlp_timeout_s: f64,
    /// Extra request headers, each "name=value".
    pub otlp_headers: Vec<String>,
    /// "cumulative" or "delta".
    pub otlp_temporality: String,
    /// Pushed histograms: "explicit" or "exponential"; empty: from
    /// `OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION` (default explicit).
    pub otlp_histogram_aggregation: String,
    /// KV-block residency histograms (vLLM's `--kv-cache-metrics`).
    pub kv_cache_metrics: bool,
    /// Fraction of KV blocks sampled for them (vLLM's `--kv-cache-metrics-sample`).
    pub kv_cache_metrics_sample: f64,
    /// Estimated FLOPs and bytes of every step (vLLM's `--enable-mfu-metrics`).
    pub enable_mfu_metrics: bool,
    /// OTLP traces target, the exact URL; empty: none unless `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
    /// or `OTEL_EXPORTER_OTLP_ENDPOINT` is set. Tracing is on exactly when there is one.
    pub otlp_traces_endpoint: String,
    /// "http/protobuf" or "grpc"; empty: from the standard variables (default http/protobuf).
    pub otlp_traces_protocol: String,
    /// Finished spans waiting for export; when full, new spans are dropped and counted.
    pub otlp_traces_queue_size: usize,
    /// "request" (one span a request) or "phases" (also queue, prefill-chunk and decode spans).
    pub otlp_traces_detail: String,
    /// Access-log lines for `/health`, `/ready` and `/metrics` too.
    pub access_log_probes: bool,
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

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            block_size: 16,
            kv_cache_memory: "1GiB".into(),
            num_gpu_blocks_override: 0,
            max_num_seqs: 32,
            max_num_batched_tokens: 2048,
            max_model_len: 0,
            max_waiting: 1024,
            preemption_mode: PreemptionMode::Recompute,
            swap_space_gib: 4.0,
            enable_prefix_caching: true,
            async_scheduling: true,
            max_engine_restarts: 3,
            step_timeout_s: 300.0,
            cpu_kernels: CpuKernels::Auto,
            cpu_activations: CpuActivations::F32,
        }
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_choices_per_request: 128,
            max_stop_bytes: 1024,
            max_stop_token_ids: 64,
            max_prompt_bytes: 1 << 20,
            max_structured_output_bytes: 64 << 10,
            max_prompt_logprob_entries: 1 << 20,
            grammar_compile_timeout_s: 5.0,
            grammar_cache_size: 256,
        }
    }
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        Self {
            enabled: true,
            engine_prefix: "vllm:".into(),
            log_interval_s: 5.0,
            metrics_listen: String::new(),
            otlp_endpoint: String::new(),
            otlp_protocol: "http/protobuf".into(),
            otlp_interval_s: 60.0,
            otlp_timeout_s: 10.0,
            otlp_headers: Vec::new(),
            otlp_temporality: "cumulative".into(),
            otlp_histogram_aggregation: String::new(),
            kv_cache_metrics: false,
            kv_cache_metrics_sample: 0.01,
            enable_mfu_metrics: false,
            otlp_traces_endpoint: String::new(),
            otlp_traces_protocol: String::new(),
            otlp_traces_queue_size: crate::traces::config::DEFAULT_QUEUE_SIZE,
            otlp_traces_detail: "request".to_owned(),
            access_log_probes: false,
        }
    }
}

/// A configuration value was refused; the message names the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("invalid value for `{key}`: {message}")]
    Invalid { key: &'static str, message: String },
}

fn invalid(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.into(),
    }
}

impl Config {
    /// Reads a TOML file on top of the defaults.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::File {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }

    /// Checks every value; the first bad one is reported with its key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let e = &self.engine;
        if self.server.host.is_empty() {
            return Err(invalid("server.host", "must not be empty"));
        }
        format!("{}:{}", self.server.host, self.server.port)
            .parse::<SocketAddr>()
            .map_err(|err| invalid("server.host", err.to_string()))?;
        if self.model.enable_auto_tool_choice && self.model.tool_call_parser.is_none() {
            return Err(invalid(
                "model.enable_auto_tool_choice",
                "needs model.tool_call_parser (--tool-call-parser)",
            ));
        }
        if self.server.max_request_body_bytes < 1024 {
            return Err(invalid("server.max_request_body_bytes", "must be at least 1024"));
        }
        for (key, value) in [
            ("server.request_head_timeout_s", self.server.request_head_timeout_s),
            ("server.request_body_timeout_s", self.server.request_body_timeout_s),
            ("server.stream_stall_timeout_s", self.server.stream_stall_timeout_s),
        ] {
            if !(value > 0.0 && value.is_finite()) {
                return Err(invalid(key, "must be a positive number of seconds"));
            }
        }
        if !(1..=1024).contains(&e.block_size) || !e.block_size.is_power_of_two() {
            return Err(invalid(
                "engine.block_size",
                "must be a power of two between 1 and 1024",
            ));
        }
        self.kv_cache_bytes()?;
        if e.max_num_seqs == 0 {
            return Err(invalid("engine.max_num_seqs", "must be at least 1"));
        }
        if e.max_num_batched_tokens < e.max_num_seqs {
            return Err(invalid(
                "engine.max_num_batched_tokens",
                format!("must be at least max_num_seqs ({})", e.max_num_seqs),
            ));
        }
        if !(e.swap_space_gib >= 0.0 && e.swap_space_gib.is_finite()) {
            return Err(invalid("engine.swap_space_gib", "must be a number of GiB, 0 or more"));
        }
        e.cpu_kernels
            .path()
            .map_err(|m| invalid("engine.cpu_kernels", format!("{m} (--cpu-kernels)")))?;
        if e.max_waiting == 0 {
            return Err(invalid("engine.max_waiting", "must be at least 1"));
        }
        for (key, seconds) in [
            ("server.shutdown_grace_period_s", self.server.shutdown_grace_period_s),
            ("engine.step_timeout_s", e.step_timeout_s),
        ] {
            if !(seconds >= 0.0 && seconds.is_finite()) {
                return Err(invalid(key, "must be a number of seconds, 0 or more"));
            }
        }
        let l = &self.limits;
        for (key, value) in [
            ("limits.max_choices_per_request", l.max_choices_per_request),
            ("limits.max_stop_bytes", l.max_stop_bytes),
            ("limits.max_stop_token_ids", l.max_stop_token_ids),
            ("limits.max_prompt_bytes", l.max_prompt_bytes),
            ("limits.max_structured_output_bytes", l.max_structured_output_bytes),
            ("limits.max_prompt_logprob_entries", l.max_prompt_logprob_entries),
            ("limits.grammar_cache_size", l.grammar_cache_size),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be at least 1"));
            }
        }
        if !(l.grammar_compile_timeout_s > 0.0 && l.grammar_compile_timeout_s.is_finite()) {
            return Err(invalid(
                "limits.grammar_compile_timeout_s",
                "must be a positive number of seconds",
            ));
        }
        let t = &self.telemetry;
        if !(t.log_interval_s > 0.0 && t.log_interval_s.is_finite()) {
            return Err(invalid(
                "telemetry.log_interval_s",
                "must be a positive number of seconds",
            ));
        }
        if !(t.kv_cache_metrics_sample > 0.0 && t.kv_cache_metrics_sample <= 1.0) {
            return Err(invalid(
                "telemetry.kv_cache_metrics_sample",
                "must be a fraction in (0, 1]",
            ));
        }
        if !crate::stats::exporter::is_metric_name_prefix(&t.engine_prefix) {
            return Err(invalid(
                "telemetry.engine_prefix",
                format!(
                    "`{}` (--engine-prefix) is not a Prometheus name prefix ([a-zA-Z_:][a-zA-Z0-9_:]*)",
                    t.engine_prefix
                ),
            ));
        }
        if !t.metrics_listen.is_empty() {
            t.metrics_listen
                .parse::<SocketAddr>()
                .map_err(|e| invalid("telemetry.metrics_listen", format!("`{}`: {e}", t.metrics_listen)))?;
        }
        self.otlp().map_err(|e| invalid("telemetry.otlp_*", e))?;
        // The file's and flags' traces values alone; `validate_environment` adds the OTEL_*
        // variables.
        self.traces(|_| None)?;
        self.security.validate()?;
        self.kv_events.validate()?;
        self.scheduler.validate()?;
        self.lora.validate()?;
        Ok(())
    }

    /// Checks what the process environment adds (the `OTEL_*` traces variables), so a bad
    /// one stops startup before the model loads, naming the variable.
    pub fn validate_environment(&self, lookup: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        crate::stats::push_histograms::histogram_aggregation_from_lookup(
            &self.telemetry.otlp_histogram_aggregation,
            &lookup,
        )
        .map_err(|e| invalid("telemetry.otlp_histogram_aggregation", e))?;
        self.traces(lookup).map(|_| ())
    }

    /// How pushed histograms are aggregated: the setting, else the standard variable.
    pub fn otlp_histogram_aggregation(&self) -> Result<crate::stats::push_histograms::HistogramAggregation, String> {
        crate::stats::push_histograms::histogram_aggregation_from_lookup(
            &self.telemetry.otlp_histogram_aggregation,
            |name| std::env::var(name).ok(),
        )
    }

    /// The OTLP push settings, or `None` when no endpoint is configured.
    pub fn otlp(&self) -> Result<Option<OtlpConfig>, String> {
        let t = &self.telemetry;
        if t.otlp_endpoint.is_empty() {
            return Ok(None);
        }
        let protocol: OtlpProtocol = t.otlp_protocol.parse().map_err(|e: OtlpError| e.to_string())?;
        let mut cfg = OtlpConfig::new(t.otlp_endpoint.clone(), protocol);
        cfg.temporality = t.otlp_temporality.parse().map_err(|e: OtlpError| e.to_string())?;
        let seconds = |key: &str, v: f64| {
            (v > 0.0 && v.is_finite())
                .then(|| std::time::Duration::from_secs_f64(v))
                .ok_or_else(|| format!("{key} must be a positive number of seconds"))
        };
        cfg.interval = seconds("otlp_interval_s", t.otlp_interval_s)?;
        cfg.timeout = seconds("otlp_timeout_s", t.otlp_timeout_s)?;
        for header in &t.otlp_headers {
            let (name, value) = header
                .split_once('=')
                .filter(|(n, _)| !n.trim().is_empty())
                .ok_or_else(|| format!("otlp header `{header}` is not name=value"))?;
            cfg.set_header(name.trim(), value.trim());
        }
        Ok(Some(cfg))
    }

    /// Applies the standard `OTEL_EXPORTER_OTLP_*` / `OTEL_METRIC_EXPORT_INTERVAL` variables
    /// (read through `lookup`) over the file's OTLP settings; kiln's flags come after.
    pub fn apply_otel_env(&mut self, lookup: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        let t = &self.telemetry;
        let env_endpoint = ["OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"]
            .iter()
            .any(|v| lookup(v).is_some_and(|e| !e.trim().is_empty()));
        if t.otlp_endpoint.is_empty() && !env_endpoint {
            return Ok(()); // no push configured anywhere (flags may still add it)
        }
        let mut base = OtlpConfig::new(
            t.otlp_endpoint.clone(),
            t.otlp_protocol
                .parse()
                .map_err(|e: OtlpError| invalid("telemetry.otlp_protocol", e.to_string()))?,
        );
        base.temporality = t
            .otlp_temporality
            .parse()
            .map_err(|e: OtlpError| invalid("telemetry.otlp_temporality", e.to_string()))?;
        base.interval = std::time::Duration::from_secs_f64(t.otlp_interval_s.max(0.001));
        base.timeout = std::time::Duration::from_secs_f64(t.otlp_timeout_s.max(0.001));
        let Some(cfg) =
            otlp_config_from_lookup(Some(base), lookup).map_err(|e| invalid("OTEL_EXPORTER_OTLP_*", e.to_string()))?
        else {
            return Ok(());
        };
        let t = &mut self.telemetry;
        t.otlp_endpoint = cfg.endpoint;
        t.otlp_protocol = cfg.protocol.as_str().to_string();
        t.otlp_temporality = cfg.temporality.as_str().to_string();
        t.otlp_interval_s = cfg.interval.as_secs_f64();
        t.otlp_timeout_s = cfg.timeout.as_secs_f64();
        for (name, value) in cfg.headers {
            t.otlp_headers
                .retain(|h| !h.split('=').next().unwrap_or("").trim().eq_ignore_ascii_case(&name));
            t.otlp_headers.push(format!("{name}={value}"));
        }
        Ok(())
    }

    /// The traces settings over the standard `OTEL_*` variables read through `lookup`, or
    /// `None` when no traces endpoint is configured anywhere.
    pub fn traces(
        &self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<crate::traces::config::TracesConfig>, ConfigError> {
        let t = &self.telemetry;
        let protocol = match t.otlp_traces_protocol.as_str() {
            "" => None,
            p => Some(
                p.parse()
                    .map_err(|e: OtlpError| invalid("telemetry.otlp_traces_protocol", e.to_string()))?,
            ),
        };
        let detail = t
            .otlp_traces_detail
            .parse()
            .map_err(|e: String| invalid("telemetry.otlp_traces_detail", e))?;
        let settings = crate::traces::config::TracesSettings {
            endpoint: (!t.otlp_traces_endpoint.is_empty()).then(|| t.otlp_traces_endpoint.clone()),
            protocol,
            queue_size: Some(t.otlp_traces_queue_size),
            detail,
        };
        crate::traces::config::traces_config_from_lookup(&settings, lookup)
            .map_err(|e| invalid("telemetry.otlp_traces_*", e.to_string()))
    }

    /// KV cache bytes from `engine.kv_cache_memory`; an error naming the key, never 0 for a
    /// value that does not parse.
    pub fn kv_cache_bytes(&self) -> Result<u64, ConfigError> {
        parse_bytes(&self.engine.kv_cache_memory).map_err(|m| invalid("engine.kv_cache_memory", m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_defaults_match_the_built_in_ones() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/default.toml");
        let config = Config::from_file(&path).expect("config/default.toml parses");
        assert_eq!(config, Config::default());
        config.validate().expect("defaults are valid");
    }

    #[test]
    fn bad_values_name_their_key() {
        let mut c = Config::default();
        c.engine.block_size = 3;
        assert!(c.validate().unwrap_err().to_string().contains("engine.block_size"));
        let mut c = Config::default();
        c.engine.kv_cache_memory = "lots".into();
        assert!(c.validate().unwrap_err().to_string().contains("engine.kv_cache_memory"));
    }

    #[test]
    fn the_metric_prefix_and_the_traces_environment_are_checked_before_anything_loads() {
        let mut c = Config::default();
        c.telemetry.engine_prefix = "1x_".into();
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("--engine-prefix"), "{err}");
        let mut c = Config::default();
        c.telemetry.otlp_traces_endpoint = "http://127.0.0.1:9/v1/traces".into();
        c.validate().expect("valid without the environment");
        let bogus = |name: &str| (name == "OTEL_TRACES_SAMPLER").then(|| "bogus".to_string());
        let err = c.validate_environment(bogus).unwrap_err().to_string();
        assert!(err.contains("OTEL_TRACES_SAMPLER"), "{err}");
    }

    #[test]
    fn unknown_keys_in_a_file_are_refused_with_their_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[engine]\nmax_num_seq = 4\n").expect("write");
        let err = Config::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("max_num_seq"), "{err}");
    }
}
