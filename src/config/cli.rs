//! Command-line flags (vLLM's names where vLLM has one); each flag also reads `KILN_<NAME>`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use super::{Config, ConfigError, LoraArgs, SecurityArgs};

#[derive(Debug, Parser)]
#[command(
    name = "kiln",
    version,
    about = "An OpenAI-compatible LLM server with production telemetry"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve a model over the OpenAI-compatible API (the default model when --model is absent).
    Serve(Box<ServeArgs>),
    /// Download a known model (default: the default model) into the cache and print its path.
    FetchModel(FetchArgs),
}

#[derive(Debug, Args)]
pub struct FetchArgs {
    /// A known model's short name: smollm2-135m (the default) or gemma3-270m.
    pub model: Option<String>,
    /// Cache folder (default: `$XDG_CACHE_HOME/kiln` or `~/.cache/kiln`).
    #[arg(long, env = "KILN_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
}

#[derive(Debug, Default, Args)]
pub struct ServeArgs {
    /// TOML config file; see config/default.toml for every key.
    #[arg(long, env = "KILN_CONFIG")]
    pub config: Option<PathBuf>,
    /// A .gguf file, a Hugging Face folder (config.json, *.safetensors, tokenizer.json), or a
    /// known model's short name (gemma3-270m), fetched into the cache on first use.
    #[arg(long, env = "KILN_MODEL")]
    pub model: Option<String>,
    #[arg(long, env = "KILN_SERVED_MODEL_NAME")]
    pub served_model_name: Option<String>,
    #[arg(long, env = "KILN_HOST")]
    pub host: Option<String>,
    #[arg(long, env = "KILN_PORT")]
    pub port: Option<u16>,
    #[arg(long, env = "KILN_CACHE_DIR")]
    pub cache_dir: Option<String>,
    /// Widen Q4_0/Q4_1/Q8_0 weights to f32 at load instead of multiplying the packed blocks
    /// (same values; 4-6x the memory traffic per token on the CPU).
    #[arg(long, env = "KILN_DEQUANTIZE_WEIGHTS")]
    pub dequantize_weights: bool,
    /// A Jinja chat template replacing the model's: a file, or the template itself when the
    /// value contains '{', '}' or a newline.
    #[arg(long, env = "KILN_CHAT_TEMPLATE")]
    pub chat_template: Option<String>,
    /// Serve `tool_choice: "auto"` (needs --tool-call-parser).
    #[arg(long, env = "KILN_ENABLE_AUTO_TOOL_CHOICE")]
    pub enable_auto_tool_choice: bool,
    /// How `auto` tool calls are read from the model's text.
    #[arg(long, env = "KILN_TOOL_CALL_PARSER", value_enum)]
    pub tool_call_parser: Option<super::ToolCallParser>,
    /// Tokens per KV-cache block.
    #[arg(long, env = "KILN_BLOCK_SIZE")]
    pub block_size: Option<usize>,
    /// Memory for the KV cache, e.g. 1GiB.
    #[arg(long, env = "KILN_KV_CACHE_MEMORY")]
    pub kv_cache_memory: Option<String>,
    /// Use exactly this many KV blocks.
    #[arg(long, env = "KILN_NUM_GPU_BLOCKS_OVERRIDE")]
    pub num_gpu_blocks_override: Option<usize>,
    #[arg(long, env = "KILN_MAX_NUM_SEQS")]
    pub max_num_seqs: Option<usize>,
    #[arg(long, env = "KILN_MAX_NUM_BATCHED_TOKENS")]
    pub max_num_batched_tokens: Option<usize>,
    #[arg(long, env = "KILN_MAX_MODEL_LEN")]
    pub max_model_len: Option<usize>,
    /// Predicted wall time one engine step may take, in ms (0: no time budget).
    #[arg(long, env = "KILN_MAX_STEP_MS")]
    pub max_step_ms: Option<f64>,
    /// Prompts prefilled side by side in one step.
    #[arg(long, env = "KILN_MAX_NUM_PARTIAL_PREFILLS")]
    pub max_num_partial_prefills: Option<usize>,
    /// Long prompts prefilled side by side in one step.
    #[arg(long, env = "KILN_MAX_LONG_PARTIAL_PREFILLS")]
    pub max_long_partial_prefills: Option<usize>,
    /// Prompts of more tokens than this are long, the tokens already computed included (0: 4% of max_model_len).
    #[arg(long, env = "KILN_LONG_PREFILL_TOKEN_THRESHOLD")]
    pub long_prefill_token_threshold: Option<usize>,
    /// Requests allowed to wait before new ones get 429.
    #[arg(long, env = "KILN_MAX_WAITING")]
    pub max_waiting: Option<usize>,
    /// What happens to a running request when KV blocks run out.
    #[arg(long, env = "KILN_PREEMPTION_MODE", value_enum)]
    pub preemption_mode: Option<super::PreemptionMode>,
    /// Host memory in GiB for the swap pool (preemption mode swap).
    #[arg(long, env = "KILN_SWAP_SPACE")]
    pub swap_space: Option<f64>,
    /// Reuse the KV blocks of prompts that start like an earlier one: bare, or `=true` /
    /// `=false` (default true, as vLLM v1).
    #[arg(long, env = "KILN_ENABLE_PREFIX_CACHING", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub enable_prefix_caching: Option<bool>,
    /// Turn prefix caching off (vLLM's spelling).
    #[arg(long, conflicts_with = "enable_prefix_caching")]
    pub no_enable_prefix_caching: bool,
    /// Schedule each step while the one before runs (true or false; default true).
    #[arg(long, env = "KILN_ASYNC_SCHEDULING", action = clap::ArgAction::Set)]
    pub async_scheduling: Option<bool>,
    #[arg(long, env = "KILN_MAX_REQUEST_BODY_BYTES")]
    pub max_request_body_bytes: Option<usize>,
    /// Seconds a client may take to send a request's head (then 408).
    #[arg(long, env = "KILN_REQUEST_HEAD_TIMEOUT")]
    pub request_head_timeout: Option<f64>,
    /// Seconds a client may take to send a request's body (then 408).
    #[arg(long, env = "KILN_REQUEST_BODY_TIMEOUT")]
    pub request_body_timeout: Option<f64>,
    /// Seconds a streaming client may stop reading before its request is aborted.
    #[arg(long, env = "KILN_STREAM_STALL_TIMEOUT")]
    pub stream_stall_timeout: Option<f64>,
    /// Kernel send buffer of each client connection in bytes (0: kernel autotuning).
    #[arg(long, env = "KILN_SEND_BUFFER_BYTES")]
    pub send_buffer_bytes: Option<usize>,
    /// HTTP worker threads (0: one per CPU the process may use).
    #[arg(long, env = "KILN_HTTP_WORKERS")]
    pub http_workers: Option<usize>,
    /// Most sequences one body may start (prompts × n).
    #[arg(long, env = "KILN_MAX_CHOICES_PER_REQUEST")]
    pub max_choices_per_request: Option<usize>,
    /// Most bytes of a request's stop strings together.
    #[arg(long, env = "KILN_MAX_STOP_BYTES")]
    pub max_stop_bytes: Option<usize>,
    /// Longest stop_token_ids list.
    #[arg(long, env = "KILN_MAX_STOP_TOKEN_IDS")]
    pub max_stop_token_ids: Option<usize>,
    /// Most bytes of prompt text (all prompts, or all chat message contents) in one request.
    #[arg(long, env = "KILN_MAX_PROMPT_BYTES")]
    pub max_prompt_bytes: Option<usize>,
    /// Most bytes of a request's output constraint (JSON schema, regex, grammar, choices).
    #[arg(long, env = "KILN_MAX_STRUCTURED_OUTPUT_BYTES")]
    pub max_structured_output_bytes: Option<usize>,
    /// Most prompt-logprob entries one request may ask for: prompt tokens × (prompt_logprobs
    /// + 1) × n (echo with logprobs counts as prompt_logprobs).
    #[arg(long, env = "KILN_MAX_PROMPT_LOGPROB_ENTRIES")]
    pub max_prompt_logprob_entries: Option<usize>,
    /// Seconds a constraint may take to compile before the request gets 400.
    #[arg(long, env = "KILN_GRAMMAR_COMPILE_TIMEOUT")]
    pub grammar_compile_timeout: Option<f64>,
    /// Compiled grammars kept for reuse.
    #[arg(long, env = "KILN_GRAMMAR_CACHE_SIZE")]
    pub grammar_cache_size: Option<usize>,
    /// Turn telemetry off (to measure its cost).
    #[arg(long, env = "KILN_DISABLE_TELEMETRY")]
    pub disable_telemetry: bool,
    /// Prefix of the engine metrics (default `vllm:`).
    #[arg(long, env = "KILN_ENGINE_PREFIX")]
    pub engine_prefix: Option<String>,
    /// Seconds between stats log lines.
    #[arg(long, env = "KILN_LOG_INTERVAL")]
    pub log_interval: Option<f64>,
    /// Also serve /metrics on this address (HOST:PORT), e.g. to keep it off the public port.
    #[arg(long, env = "KILN_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,
    /// Add a `metrics` object (queue, TTFT, decode, ITL, tokens/s) to every response.
    #[arg(long, env = "KILN_ENABLE_PER_REQUEST_METRICS")]
    pub enable_per_request_metrics: bool,
    /// Serve GET /tokenizer_info (the tokenizer's configuration, as vLLM's flag of this name).
    #[arg(long, env = "KILN_ENABLE_TOKENIZER_INFO_ENDPOINT")]
    pub enable_tokenizer_info_endpoint: bool,
    /// Push metrics over OTLP to this URL (http/protobuf: include /v1/metrics).
    #[arg(long, env = "KILN_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// http/protobuf or grpc.
    #[arg(long, env = "KILN_OTLP_PROTOCOL")]
    pub otlp_protocol: Option<String>,
    /// Seconds between OTLP exports.
    #[arg(long, env = "KILN_OTLP_INTERVAL")]
    pub otlp_interval: Option<f64>,
    /// Seconds one OTLP export may take.
    #[arg(long, env = "KILN_OTLP_TIMEOUT")]
    pub otlp_timeout: Option<f64>,
    /// An OTLP request header, NAME=VALUE (repeatable).
    #[arg(long = "otlp-header", env = "KILN_OTLP_HEADERS", value_delimiter = ',')]
    pub otlp_headers: Vec<String>,
    /// cumulative or delta.
    #[arg(long, env = "KILN_OTLP_TEMPORALITY")]
    pub otlp_temporality: Option<String>,
    /// Pushed histograms: explicit (the /metrics buckets) or exponential (base-2).
    #[arg(long, env = "KILN_OTLP_HISTOGRAM_AGGREGATION")]
    pub otlp_histogram_aggregation: Option<String>,
    /// Export request spans over OTLP to this URL (http/protobuf: include /v1/traces), as vLLM's.
    #[arg(long, env = "KILN_OTLP_TRACES_ENDPOINT")]
    pub otlp_traces_endpoint: Option<String>,
    /// http/protobuf or grpc, for spans.
    #[arg(long, env = "KILN_OTLP_TRACES_PROTOCOL")]
    pub otlp_traces_protocol: Option<String>,
    /// Finished spans waiting for export; when full, new spans are dropped (and counted).
    #[arg(long, env = "KILN_OTLP_TRACES_QUEUE_SIZE")]
    pub otlp_traces_queue_size: Option<usize>,
    /// request: one span a request; phases: also queue, prefill-chunk and decode child spans.
    #[arg(long, env = "KILN_OTLP_TRACES_DETAIL", value_parser = ["request", "phases"])]
    pub otlp_traces_detail: Option<String>,
    /// Log format: text or json (one JSON object per line).
    #[arg(long, env = "KILN_LOG_FORMAT", value_parser = ["text", "json"])]
    pub log_format: Option<String>,
    /// Write access-log lines for /health, /ready and /metrics too.
    #[arg(long, env = "KILN_ACCESS_LOG_PROBES")]
    pub access_log_probes: bool,
    /// KV-block residency histograms (lifetime, idle before eviction, reuse gaps), as vLLM's.
    #[arg(long, env = "KILN_KV_CACHE_METRICS")]
    pub kv_cache_metrics: bool,
    /// Fraction of KV blocks those histograms sample (default 0.01).
    #[arg(long, env = "KILN_KV_CACHE_METRICS_SAMPLE")]
    pub kv_cache_metrics_sample: Option<f64>,
    /// Estimated FLOPs and bytes read and written per step, as vLLM's MFU metrics.
    #[arg(long, env = "KILN_ENABLE_MFU_METRICS")]
    pub enable_mfu_metrics: bool,
    /// Seconds running requests get to finish after SIGTERM before they are aborted.
    #[arg(long, env = "KILN_SHUTDOWN_GRACE_PERIOD")]
    pub shutdown_grace_period: Option<f64>,
    /// Executor restarts allowed without a successful step in between; past them kiln exits.
    #[arg(long, env = "KILN_MAX_ENGINE_RESTARTS")]
    pub max_engine_restarts: Option<u32>,
    /// Seconds one engine step may run before kiln declares it hung and exits (0: never).
    #[arg(long, env = "KILN_STEP_TIMEOUT")]
    pub step_timeout: Option<f64>,
    /// CPU kernels: auto is the best this CPU runs, detected at start.
    #[arg(long, env = "KILN_CPU_KERNELS", value_enum)]
    pub cpu_kernels: Option<super::CpuKernels>,
    /// Activations in the many-token CPU matmuls: f32 (default) or int8 (8-bit, integer dot
    /// products; faster, not bit-parity with the reference).
    #[arg(long, env = "KILN_CPU_ACTIVATIONS", value_enum)]
    pub cpu_activations: Option<super::CpuActivations>,
    /// vLLM's KV-cache events, as its JSON, e.g. '{"enable_kv_cache_events": true,
    /// "publisher": "zmq", "endpoint": "tcp://*:5557", "topic": "kv@pod@model"}'.
    #[arg(long, env = "KILN_KV_EVENTS_CONFIG")]
    pub kv_events_config: Option<String>,
    #[command(flatten)]
    pub security: SecurityArgs,
    #[command(flatten)]
    pub lora: LoraArgs,
}

impl ServeArgs {
    /// Defaults, then the file, then these flags (which already include `KILN_*`).
    pub fn resolve(&self) -> Result<Config, ConfigError> {
        let mut c = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        // The standard OpenTelemetry variables sit between the file and kiln's own settings.
        c.apply_otel_env(|name| std::env::var(name).ok())?;
        fn set<T: Clone>(target: &mut T, value: &Option<T>) {
            if let Some(v) = value {
                *target = v.clone();
            }
        }
        set(&mut c.model.path, &self.model);
        set(&mut c.model.cache_dir, &self.cache_dir);
        set(&mut c.model.chat_template, &self.chat_template);
        c.model.enable_auto_tool_choice |= self.enable_auto_tool_choice;
        if self.tool_call_parser.is_some() {
            c.model.tool_call_parser = self.tool_call_parser;
        }
        if self.dequantize_weights {
            c.model.dequantize_weights = true;
        }
        set(&mut c.server.served_model_name, &self.served_model_name);
        set(&mut c.server.host, &self.host);
        set(&mut c.server.port, &self.port);
        set(&mut c.server.max_request_body_bytes, &self.max_request_body_bytes);
        set(&mut c.server.shutdown_grace_period_s, &self.shutdown_grace_period);
        set(&mut c.engine.max_engine_restarts, &self.max_engine_restarts);
        set(&mut c.engine.step_timeout_s, &self.step_timeout);
        set(&mut c.engine.cpu_kernels, &self.cpu_kernels);
        set(&mut c.engine.cpu_activations, &self.cpu_activations);
        set(&mut c.server.request_head_timeout_s, &self.request_head_timeout);
        set(&mut c.server.request_body_timeout_s, &self.request_body_timeout);
        set(&mut c.server.stream_stall_timeout_s, &self.stream_stall_timeout);
        set(&mut c.server.send_buffer_bytes, &self.send_buffer_bytes);
        set(&mut c.server.http_workers, &self.http_workers);
        set(&mut c.limits.max_choices_per_request, &self.max_choices_per_request);
        set(&mut c.limits.max_stop_bytes, &self.max_stop_bytes);
        set(&mut c.limits.max_stop_token_ids, &self.max_stop_token_ids);
        set(&mut c.limits.max_prompt_bytes, &self.max_prompt_bytes);
        set(
            &mut c.limits.max_prompt_logprob_entries,
            &self.max_prompt_logprob_entries,
        );
        set(
            &mut c.limits.max_structured_output_bytes,
            &self.max_structured_output_bytes,
        );
        set(&mut c.limits.grammar_compile_timeout_s, &self.grammar_compile_timeout);
        set(&mut c.limits.grammar_cache_size, &self.grammar_cache_size);
        set(&mut c.engine.block_size, &self.block_size);
        set(&mut c.engine.kv_cache_memory, &self.kv_cache_memory);
        set(&mut c.engine.num_gpu_blocks_override, &self.num_gpu_blocks_override);
        set(&mut c.engine.max_num_seqs, &self.max_num_seqs);
        set(&mut c.engine.max_num_batched_tokens, &self.max_num_batched_tokens);
        set(&mut c.engine.max_model_len, &self.max_model_len);
        set(&mut c.scheduler.max_step_ms, &self.max_step_ms);
        set(
            &mut c.scheduler.max_num_partial_prefills,
            &self.max_num_partial_prefills,
        );
        set(
            &mut c.scheduler.max_long_partial_prefills,
            &self.max_long_partial_prefills,
        );
        set(
            &mut c.scheduler.long_prefill_token_threshold,
            &self.long_prefill_token_threshold,
        );
        set(&mut c.engine.max_waiting, &self.max_waiting);
        set(&mut c.engine.preemption_mode, &self.preemption_mode);
        set(&mut c.engine.swap_space_gib, &self.swap_space);
        set(&mut c.engine.enable_prefix_caching, &self.enable_prefix_caching);
        if self.no_enable_prefix_caching {
            c.engine.enable_prefix_caching = false;
        }
        set(&mut c.engine.async_scheduling, &self.async_scheduling);
        set(&mut c.telemetry.engine_prefix, &self.engine_prefix);
        set(&mut c.telemetry.log_interval_s, &self.log_interval);
        set(&mut c.telemetry.metrics_listen, &self.metrics_listen);
        set(&mut c.telemetry.otlp_endpoint, &self.otlp_endpoint);
        set(&mut c.telemetry.otlp_protocol, &self.otlp_protocol);
        set(&mut c.telemetry.otlp_interval_s, &self.otlp_interval);
        set(&mut c.telemetry.otlp_timeout_s, &self.otlp_timeout);
        set(&mut c.telemetry.otlp_temporality, &self.otlp_temporality);
        set(
            &mut c.telemetry.otlp_histogram_aggregation,
            &self.otlp_histogram_aggregation,
        );
        set(&mut c.telemetry.otlp_traces_endpoint, &self.otlp_traces_endpoint);
        set(&mut c.telemetry.otlp_traces_protocol, &self.otlp_traces_protocol);
        set(&mut c.telemetry.otlp_traces_queue_size, &self.otlp_traces_queue_size);
        set(&mut c.telemetry.otlp_traces_detail, &self.otlp_traces_detail);
        if self.access_log_probes {
            c.telemetry.access_log_probes = true;
        }
        for header in &self.otlp_headers {
            let name = header.split('=').next().unwrap_or("").trim().to_string();
            c.telemetry
                .otlp_headers
                .retain(|h| !h.split('=').next().unwrap_or("").trim().eq_ignore_ascii_case(&name));
            c.telemetry.otlp_headers.push(header.clone());
        }
        self.security
            .apply(&mut c.security, std::env::var("VLLM_API_KEY").ok())?;
        if self.disable_telemetry {
            c.telemetry.enabled = false;
        }
        if self.enable_per_request_metrics {
            c.server.enable_per_request_metrics = true;
        }
        c.server.enable_tokenizer_info_endpoint |= self.enable_tokenizer_info_endpoint;
        c.telemetry.kv_cache_metrics |= self.kv_cache_metrics;
        set(&mut c.telemetry.kv_cache_metrics_sample, &self.kv_cache_metrics_sample);
        c.telemetry.enable_mfu_metrics |= self.enable_mfu_metrics;
        if let Some(json) = &self.kv_events_config {
            c.kv_events = super::KvEventsConfig::from_json(json)?;
        }
        self.lora.apply(&mut c.lora)?;
        c.validate()?;
        c.validate_environment(|name| std::env::var(name).ok())?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kiln.toml");
        std::fs::write(&path, "[server]\nport = 9001\n[engine]\nmax_num_seqs = 4\n").expect("write");
        let cli = Cli::try_parse_from([
            "kiln",
            "serve",
            "--config",
            path.to_str().unwrap(),
            "--max-num-seqs",
            "8",
        ])
        .expect("parses");
        let Command::Serve(args) = cli.command else {
            panic!("serve")
        };
        let c = args.resolve().expect("valid");
        assert_eq!(c.server.port, 9001); // file
        assert_eq!(c.engine.max_num_seqs, 8); // flag beats file
        assert_eq!(c.engine.block_size, 16); // default
    }

    #[test]
    fn async_scheduling_is_on_by_default_and_a_flag_turns_it_off() {
        let parse = |extra: &[&str]| {
            let cli = Cli::try_parse_from(["kiln", "serve"].iter().chain(extra)).expect("parses");
            let Command::Serve(args) = cli.command else {
                panic!("serve")
            };
            args.resolve().expect("valid").engine.async_scheduling
        };
        assert!(parse(&[]));
        assert!(!parse(&["--async-scheduling", "false"]));
        assert!(parse(&["--async-scheduling", "true"]));
    }

    #[test]
    fn prefix_caching_flags_in_vllms_spellings() {
        let parse = |extra: &[&str]| {
            let cli = Cli::try_parse_from(["kiln", "serve"].iter().chain(extra)).expect("parses");
            let Command::Serve(args) = cli.command else {
                panic!("serve")
            };
            args.resolve().expect("valid").engine.enable_prefix_caching
        };
        assert_eq!(parse(&[]), Config::default().engine.enable_prefix_caching);
        assert!(parse(&["--enable-prefix-caching"]));
        assert!(parse(&["--enable-prefix-caching=true"]));
        assert!(!parse(&["--enable-prefix-caching=false"]));
        assert!(!parse(&["--no-enable-prefix-caching"]));
        let both = ["kiln", "serve", "--enable-prefix-caching", "--no-enable-prefix-caching"];
        assert!(Cli::try_parse_from(both).is_err());
    }

    #[test]
    fn a_bad_flag_value_is_refused_naming_the_key() {
        let args = ServeArgs {
            block_size: Some(5),
            ..Default::default()
        };
        let err = args.resolve().unwrap_err().to_string();
        assert!(err.contains("engine.block_size"), "{err}");
    }
}
