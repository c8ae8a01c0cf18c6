//! Every instrument kiln exports, declared once: name, unit, description and buckets.
//!
//! Names, units and buckets are the contract of `shared/METRICS.md`; changing one here is a
//! breaking change for dashboards and routers. The exporter derives the exposed name: it
//! appends `_seconds` for unit `s`, `_bytes` for `By`, `_total` for counters, and turns dots
//! into underscores. Units written as `{annotation}` add no suffix, which is why the
//! token-count and ratio instruments use annotations or no unit at all (`1` would add
//! `_ratio`, `{token}/s` would add `_per_second`).

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Histogram, Meter, UpDownCounter};
use serde::{Deserialize, Serialize};

use std::sync::Arc;

use crate::engine::types::{FinishReason, Operation};

/// Identity of one instrument: what a dashboard depends on.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// Instrument name; engine names get the configured prefix in front.
    pub name: &'static str,
    pub unit: &'static str,
    pub description: &'static str,
}

/// Which bucket list a histogram uses; the engine families are configurable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BucketFamily {
    Ttft,
    Itl,
    RequestLatency,
    TokenCounts,
    ParamsN,
    IterationTokens,
    GenAiRequestDuration,
    GenAiTtft,
    GenAiTimePerOutputToken,
    HttpDuration,
    HttpBodySize,
}

/// A histogram's identity plus its bucket family.
#[derive(Debug, Clone, Copy)]
pub struct HistogramSpec {
    pub spec: Spec,
    pub buckets: BucketFamily,
}

const fn spec(name: &'static str, unit: &'static str, description: &'static str) -> Spec {
    Spec {
        name,
        unit,
        description,
    }
}

const fn hist(
    name: &'static str,
    unit: &'static str,
    description: &'static str,
    buckets: BucketFamily,
) -> HistogramSpec {
    HistogramSpec {
        spec: spec(name, unit, description),
        buckets,
    }
}

/// Engine instruments (vLLM names, prefix prepended, label `model_name`).
#[rustfmt::skip]
pub mod engine {
    use super::BucketFamily as B;
    use super::{HistogramSpec, Spec, hist, spec};

    // Gauges, set from every step's SchedulerStats.
    pub const NUM_REQUESTS_RUNNING: Spec = spec("num_requests_running", "{request}", "Number of requests in the running batch.");
    pub const NUM_REQUESTS_WAITING: Spec = spec("num_requests_waiting", "{request}", "Number of requests queued and not running (new, or preempted for recompute).");
    pub const NUM_REQUESTS_SWAPPED: Spec = spec("num_requests_swapped", "{request}", "Number of preempted requests whose KV blocks sit in the host swap pool.");
    pub const KV_CACHE_USAGE_PERC: Spec = spec("kv_cache_usage_perc", "", "Device KV-cache usage: blocks in use / all device blocks, 0..1.");
    pub const GPU_CACHE_USAGE_PERC: Spec = spec("gpu_cache_usage_perc", "", "Device KV-cache usage, 0..1 (same value as kv_cache_usage_perc, seed name).");
    pub const CPU_CACHE_USAGE_PERC: Spec = spec("cpu_cache_usage_perc", "", "Host swap-pool usage: blocks in use / all host blocks, 0..1.");
    pub const AVG_PROMPT_THROUGHPUT: Spec = spec("avg_prompt_throughput_toks_per_s", "", "Prompt tokens computed per second over the last logging interval.");
    pub const AVG_GENERATION_THROUGHPUT: Spec = spec("avg_generation_throughput_toks_per_s", "", "Generated tokens per second over the last logging interval.");
    pub const CACHE_CONFIG_INFO: Spec = spec("cache_config_info", "", "Information of the KV-cache configuration (value 1).");
    // Counters (`_total` is appended by the exporter).
    pub const PROMPT_TOKENS: Spec = spec("prompt_tokens", "{token}", "Prompt tokens whose prefill completed, once per request.");
    pub const GENERATION_TOKENS: Spec = spec("generation_tokens", "{token}", "Number of generated tokens.");
    pub const REQUEST_SUCCESS: Spec = spec("request_success", "{request}", "Finished requests, by finished_reason.");
    pub const NUM_PREEMPTIONS: Spec = spec("num_preemptions", "{preemption}", "Preemptions (recompute or swap).");
    pub const PREFIX_CACHE_QUERIES: Spec = spec("prefix_cache_queries", "{token}", "Prompt tokens looked up in the prefix cache.");
    pub const PREFIX_CACHE_HITS: Spec = spec("prefix_cache_hits", "{token}", "Prompt tokens found in the prefix cache.");
    pub const ADMISSION_REJECTIONS: Spec = spec("admission_rejections", "{request}", "Requests refused at the door, by reason.");
    // Histograms (`_seconds` is appended for unit `s`); bucket families are configurable.
    pub const TIME_TO_FIRST_TOKEN: HistogramSpec = hist("time_to_first_token", "s", "Time from arrival to the first generated token.", B::Ttft);
    pub const INTER_TOKEN_LATENCY: HistogramSpec = hist("inter_token_latency", "s", "Time between two consecutive tokens of one request.", B::Itl);
    pub const TIME_PER_OUTPUT_TOKEN: HistogramSpec = hist("request_time_per_output_token", "s", "(last token - first token) / (generated - 1), per finished request.", B::Itl);
    pub const E2E_REQUEST_LATENCY: HistogramSpec = hist("e2e_request_latency", "s", "Time from arrival to finish, every finished request.", B::RequestLatency);
    pub const REQUEST_QUEUE_TIME: HistogramSpec = hist("request_queue_time", "s", "Time from queued to first scheduled.", B::RequestLatency);
    pub const REQUEST_PREFILL_TIME: HistogramSpec = hist("request_prefill_time", "s", "Time from first scheduled to first token.", B::RequestLatency);
    pub const REQUEST_DECODE_TIME: HistogramSpec = hist("request_decode_time", "s", "Time from first token to last token.", B::RequestLatency);
    pub const REQUEST_INFERENCE_TIME: HistogramSpec = hist("request_inference_time", "s", "Time from first scheduled to last token.", B::RequestLatency);
    pub const REQUEST_PROMPT_TOKENS: HistogramSpec = hist("request_prompt_tokens", "{token}", "Prompt length of finished requests.", B::TokenCounts);
    pub const REQUEST_GENERATION_TOKENS: HistogramSpec = hist("request_generation_tokens", "{token}", "Generated tokens of finished requests.", B::TokenCounts);
    pub const REQUEST_PARAMS_MAX_TOKENS: HistogramSpec = hist("request_params_max_tokens", "{token}", "The max_tokens parameter of finished requests.", B::TokenCounts);
    pub const REQUEST_MAX_NUM_GENERATION_TOKENS: HistogramSpec = hist("request_max_num_generation_tokens", "{token}", "The most tokens a finished request could generate (its max_tokens), as vLLM exports it.", B::TokenCounts);
    pub const REQUEST_PARAMS_N: HistogramSpec = hist("request_params_n", "{sequence}", "The n parameter of finished requests.", B::ParamsN);
    pub const ITERATION_TOKENS: HistogramSpec = hist("iteration_tokens_total", "{token}", "Tokens run through the model per engine step (prefill + decode).", B::IterationTokens);
}

/// kiln's own families: named `kiln_*` whatever the engine prefix, label `model_name`.
#[rustfmt::skip]
pub mod kiln {
    use super::{Spec, spec};

    pub const ENGINE_RESTARTS: Spec = spec("kiln_engine_restarts", "{restart}", "Executor restarts after a panic; each failed its step's requests and emptied the KV and prefix caches.");
    pub const OTLP_METRIC_EXPORTS: Spec = spec("kiln_otlp_metric_exports", "{export}", "OTLP metric exports (pushes to the collector), by result: success or failure.");
}

/// GenAI semantic-convention instruments (no prefix).
#[rustfmt::skip]
pub mod gen_ai {
    use super::BucketFamily as B;
    use super::{HistogramSpec, hist};

    pub const REQUEST_DURATION: HistogramSpec = hist("gen_ai.server.request.duration", "s", "Generative AI server request duration.", B::GenAiRequestDuration);
    pub const TIME_TO_FIRST_TOKEN: HistogramSpec = hist("gen_ai.server.time_to_first_token", "s", "Time to generate the first token for successful responses.", B::GenAiTtft);
    pub const TIME_PER_OUTPUT_TOKEN: HistogramSpec = hist("gen_ai.server.time_per_output_token", "s", "Time per output token generated after the first token for successful responses.", B::GenAiTimePerOutputToken);
}

/// HTTP semantic-convention instruments (stable), no prefix.
#[rustfmt::skip]
pub mod http {
    use super::BucketFamily as B;
    use super::{HistogramSpec, Spec, hist, spec};

    pub const REQUEST_DURATION: HistogramSpec = hist("http.server.request.duration", "s", "Duration of HTTP server requests, until the response body is sent.", B::HttpDuration);
    pub const ACTIVE_REQUESTS: Spec = spec("http.server.active_requests", "{request}", "Number of active HTTP server requests.");
    pub const REQUEST_BODY_SIZE: HistogramSpec = hist("http.server.request.body.size", "By", "Size of HTTP server request bodies.", B::HttpBodySize);
    pub const RESPONSE_BODY_SIZE: HistogramSpec = hist("http.server.response.body.size", "By", "Size of HTTP server response bodies.", B::HttpBodySize);
}

/// The `reason` values of `admission_rejections_total` (series created at start).
pub const ADMISSION_REJECTION_REASONS: [&str; 2] = ["queue_full", "too_long"];

/// The `engine` label of every engine series: vLLM numbers its engine cores from 0 and
/// kiln runs one engine per process.
pub const ENGINE_INDEX: &str = "0";

/// `gen_ai.provider.name`: kiln serves its own models.
pub const GEN_AI_PROVIDER: &str = "kiln";

/// Semconv-advised buckets for `http.server.request.duration`.
pub const HTTP_DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
/// Body sizes: semconv advises none; powers of 4 from 64 B to 16 MiB cover a short JSON
/// error to a long streamed completion.
pub const HTTP_BODY_SIZE_BUCKETS: &[f64] = &[
    0.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0,
];
/// Semconv-advised buckets for `gen_ai.server.request.duration`.
pub const GENAI_REQUEST_DURATION_BUCKETS: &[f64] = &[
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
/// Semconv-advised buckets for `gen_ai.server.time_to_first_token`.
pub const GENAI_TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
/// Semconv-advised buckets for `gen_ai.server.time_per_output_token`.
pub const GENAI_TPOT_BUCKETS: &[f64] = &[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5];

/// The model context length the default token-count buckets stop at (SmolLM2's 8192).
pub const DEFAULT_MAX_MODEL_LEN: u64 = 8192;

/// The configurable engine bucket families (`telemetry.buckets.*`); defaults are vLLM's.
/// A family left out of the config keeps its default (token counts for
/// `DEFAULT_MAX_MODEL_LEN`; build from `vllm(max_model_len)` to follow the model).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HistogramBuckets {
    pub ttft: Vec<f64>,
    pub itl: Vec<f64>,
    pub request_latency: Vec<f64>,
    pub token_counts: Vec<f64>,
    pub params_n: Vec<f64>,
    pub iteration_tokens: Vec<f64>,
}

impl Default for HistogramBuckets {
    fn default() -> Self {
        Self::vllm(DEFAULT_MAX_MODEL_LEN)
    }
}

impl HistogramBuckets {
    /// vLLM's buckets; token counts go 1, 2, 5, 10, 20, 50, … up to `max_model_len`.
    pub fn vllm(max_model_len: u64) -> Self {
        Self {
            ttft: vec![
                0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                80.0, 160.0, 640.0, 2560.0,
            ],
            itl: vec![
                0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                80.0,
            ],
            request_latency: vec![
                0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
                960.0, 1920.0, 7680.0,
            ],
            token_counts: one_two_five_buckets(max_model_len),
            params_n: vec![1.0, 2.0, 5.0, 10.0, 20.0],
            iteration_tokens: vec![
                1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
            ],
        }
    }

    /// Refuses empty, unsorted, duplicate or non-finite lists, naming the family: the SDK
    /// would otherwise drop the boundaries with only an internal log line.
    pub fn validate(&self) -> Result<(), BucketError> {
        let families = [
            ("ttft", &self.ttft),
            ("itl", &self.itl),
            ("request_latency", &self.request_latency),
            ("token_counts", &self.token_counts),
            ("params_n", &self.params_n),
            ("iteration_tokens", &self.iteration_tokens),
        ];
        for (family, bounds) in families {
            if bounds.is_empty() {
                return Err(BucketError {
                    family,
                    problem: "is empty",
                });
            }
            if bounds.iter().any(|b| !b.is_finite()) {
                return Err(BucketError {
                    family,
                    problem: "has a non-finite value",
                });
            }
            if bounds.windows(2).any(|w| w[0] >= w[1]) {
                return Err(BucketError {
                    family,
                    problem: "is not strictly increasing",
                });
            }
        }
        Ok(())
    }

    /// The boundaries of one family.
    pub fn bounds(&self, family: BucketFamily) -> Vec<f64> {
        match family {
            BucketFamily::Ttft => self.ttft.clone(),
            BucketFamily::Itl => self.itl.clone(),
            BucketFamily::RequestLatency => self.request_latency.clone(),
            BucketFamily::TokenCounts => self.token_counts.clone(),
            BucketFamily::ParamsN => self.params_n.clone(),
            BucketFamily::IterationTokens => self.iteration_tokens.clone(),
            BucketFamily::GenAiRequestDuration => GENAI_REQUEST_DURATION_BUCKETS.to_vec(),
            BucketFamily::GenAiTtft => GENAI_TTFT_BUCKETS.to_vec(),
            BucketFamily::GenAiTimePerOutputToken => GENAI_TPOT_BUCKETS.to_vec(),
            BucketFamily::HttpDuration => HTTP_DURATION_BUCKETS.to_vec(),
            BucketFamily::HttpBodySize => HTTP_BODY_SIZE_BUCKETS.to_vec(),
        }
    }
}

/// A bucket family that the SDK would reject.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("telemetry.buckets.{family} {problem}")]
pub struct BucketError {
    pub family: &'static str,
    pub problem: &'static str,
}

/// 1, 2, 5 × powers of ten, every value ≤ `max` (vLLM's `build_1_2_5_buckets`).
pub fn one_two_five_buckets(max: u64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut exponent: u64 = 1;
    loop {
        for m in [1u64, 2, 5] {
            match m.checked_mul(exponent) {
                Some(v) if v <= max => out.push(v as f64),
                _ => return out,
            }
        }
        exponent = match exponent.checked_mul(10) {
            Some(e) => e,
            None => return out,
        };
    }
}

/// Engine instruments, built with the configured prefix.
pub(super) struct EngineInstruments {
    pub num_requests_running: Gauge<u64>,
    pub num_requests_waiting: Gauge<u64>,
    pub num_requests_swapped: Gauge<u64>,
    pub kv_cache_usage_perc: Gauge<f64>,
    pub gpu_cache_usage_perc: Gauge<f64>,
    pub cpu_cache_usage_perc: Gauge<f64>,
    pub avg_prompt_throughput: Gauge<f64>,
    pub avg_generation_throughput: Gauge<f64>,
    pub cache_config_info: Gauge<u64>,
    pub prompt_tokens: Counter<u64>,
    pub generation_tokens: Counter<u64>,
    pub request_success: Counter<u64>,
    pub num_preemptions: Counter<u64>,
    pub prefix_cache_queries: Counter<u64>,
    pub prefix_cache_hits: Counter<u64>,
    pub admission_rejections: Counter<u64>,
    pub engine_restarts: Counter<u64>,
    pub time_to_first_token: Histogram<f64>,
    pub inter_token_latency: Histogram<f64>,
    pub time_per_output_token: Histogram<f64>,
    pub e2e_request_latency: Histogram<f64>,
    pub request_queue_time: Histogram<f64>,
    pub request_prefill_time: Histogram<f64>,
    pub request_decode_time: Histogram<f64>,
    pub request_inference_time: Histogram<f64>,
    pub request_prompt_tokens: Histogram<u64>,
    pub request_generation_tokens: Histogram<u64>,
    pub request_params_max_tokens: Histogram<u64>,
    pub request_max_num_generation_tokens: Histogram<u64>,
    pub request_params_n: Histogram<u64>,
    pub iteration_tokens: Histogram<u64>,
}

pub(super) struct GenAiInstruments {
    pub request_duration: Histogram<f64>,
    pub time_to_first_token: Histogram<f64>,
    pub time_per_output_token: Histogram<f64>,
}

pub(super) struct HttpInstruments {
    pub request_duration: Histogram<f64>,
    pub active_requests: UpDownCounter<i64>,
    pub request_body_size: Histogram<u64>,
    pub response_body_size: Histogram<u64>,
}

/// What `Instruments::new` needs besides the meter.
#[derive(Debug, Clone)]
pub struct InstrumentsConfig<'a> {
    /// Prepended to engine names: `vllm:` or a lint-clean one such as `kiln_`.
    pub engine_prefix: &'a str,
    /// The configured model name: `model_name` and the GenAI model attributes.
    pub model_name: &'a str,
    pub buckets: &'a HistogramBuckets,
    /// `--kv-cache-metrics`: the KV-block residency histograms exist.
    pub kv_cache_metrics: bool,
    /// `--enable-mfu-metrics`: the estimated FLOPs and bytes counters exist.
    pub mfu_metrics: bool,
}

/// All instruments plus the attribute sets reused on every record (built once, so the hot
/// path allocates nothing for the common labels).
pub struct Instruments {
    pub(super) engine: EngineInstruments,
    pub(super) gen_ai: GenAiInstruments,
    pub(super) http: HttpInstruments,
    pub(super) prompt_source: super::prompt_source::PromptSourceInstruments,
    pub(super) instrumentator: super::instrumentator::InstrumentatorInstruments,
    pub(super) flagged: super::flagged::FlaggedInstruments,
    pub(super) structured: super::structured::StructuredOutputInstruments,
    pub(super) token_load: super::token_load::TokenLoadInstruments,
    pub(super) exemplars: super::exemplars::LatencyExemplars,
    /// `[model_name, engine]`: the labels of every engine series, as vLLM's.
    pub(super) model: [KeyValue; 2],
    /// `[model_name, engine, finished_reason]`, indexed by `reason_index`.
    pub(super) by_reason: [[KeyValue; 3]; 4],
    /// GenAI operation, provider, request and response model, indexed by `operation_index`.
    pub(super) gen_ai_base: [[KeyValue; 4]; 2],
}

/// Index into `Instruments::gen_ai_base`.
pub(super) fn operation_index(operation: Operation) -> usize {
    match operation {
        Operation::Chat => 0,
        Operation::TextCompletion => 1,
    }
}

/// Index into `Instruments::by_reason`.
pub(super) fn reason_index(reason: FinishReason) -> usize {
    match reason {
        FinishReason::Stop => 0,
        FinishReason::Length => 1,
        FinishReason::Abort => 2,
        FinishReason::Error => 3,
    }
}

/// The exposed base name of an engine instrument under `prefix`. vLLM's names are kept
/// verbatim under a prefix with a colon (`vllm:`). Under a lint-clean prefix (`kiln_`) the
/// three names `promtool check metrics` objects to are spelled its way: the throughput
/// gauges spell their unit out ("no abbreviated units") and the `iteration_tokens_total`
/// histogram drops `_total` ("non-counter metrics should not have a _total suffix").
pub fn engine_metric_name(prefix: &str, name: &str) -> String {
    if prefix.contains(':') {
        return format!("{prefix}{name}");
    }
    if let Some(stem) = name.strip_suffix("_toks_per_s") {
        return format!("{prefix}{stem}_tokens_per_second");
    }
    if name == "iteration_tokens_total" {
        return format!("{prefix}iteration_tokens");
    }
    format!("{prefix}{name}")
}

impl Instruments {
    /// Creates every instrument on `meter`. Buckets must have passed `validate`.
    pub fn new(meter: &Meter, cfg: &InstrumentsConfig<'_>) -> Self {
        let b = cfg.buckets;
        let p = cfg.engine_prefix;
        let name = |s: &Spec| engine_metric_name(p, s.name);
        let gauge_u64 = |s: Spec| {
            meter
                .u64_gauge(name(&s))
                .with_unit(s.unit)
                .with_description(s.description)
                .build()
        };
        let gauge_f64 = |s: Spec| {
            meter
                .f64_gauge(name(&s))
                .with_unit(s.unit)
                .with_description(s.description)
                .build()
        };
        let counter = |s: Spec| {
            meter
                .u64_counter(name(&s))
                .with_unit(s.unit)
                .with_description(s.description)
                .build()
        };
        let hist_f64 = |h: HistogramSpec, prefix: &str| {
            meter
                .f64_histogram(engine_metric_name(prefix, h.spec.name))
                .with_unit(h.spec.unit)
                .with_description(h.spec.description)
                .with_boundaries(b.bounds(h.buckets))
                .build()
        };
        let hist_u64 = |h: HistogramSpec, prefix: &str| {
            meter
                .u64_histogram(engine_metric_name(prefix, h.spec.name))
                .with_unit(h.spec.unit)
                .with_description(h.spec.description)
                .with_boundaries(b.bounds(h.buckets))
                .build()
        };
        use engine as e;
        let engine = EngineInstruments {
            num_requests_running: gauge_u64(e::NUM_REQUESTS_RUNNING),
            num_requests_waiting: gauge_u64(e::NUM_REQUESTS_WAITING),
            num_requests_swapped: gauge_u64(e::NUM_REQUESTS_SWAPPED),
            kv_cache_usage_perc: gauge_f64(e::KV_CACHE_USAGE_PERC),
            gpu_cache_usage_perc: gauge_f64(e::GPU_CACHE_USAGE_PERC),
            cpu_cache_usage_perc: gauge_f64(e::CPU_CACHE_USAGE_PERC),
            avg_prompt_throughput: gauge_f64(e::AVG_PROMPT_THROUGHPUT),
            avg_generation_throughput: gauge_f64(e::AVG_GENERATION_THROUGHPUT),
            cache_config_info: gauge_u64(e::CACHE_CONFIG_INFO),
            prompt_tokens: counter(e::PROMPT_TOKENS),
            generation_tokens: counter(e::GENERATION_TOKENS),
            request_success: counter(e::REQUEST_SUCCESS),
            num_preemptions: counter(e::NUM_PREEMPTIONS),
            prefix_cache_queries: counter(e::PREFIX_CACHE_QUERIES),
            prefix_cache_hits: counter(e::PREFIX_CACHE_HITS),
            admission_rejections: counter(e::ADMISSION_REJECTIONS),
            engine_restarts: meter
                .u64_counter(kiln::ENGINE_RESTARTS.name)
                .with_unit(kiln::ENGINE_RESTARTS.unit)
                .with_description(kiln::ENGINE_RESTARTS.description)
                .build(),
            time_to_first_token: hist_f64(e::TIME_TO_FIRST_TOKEN, p),
            inter_token_latency: hist_f64(e::INTER_TOKEN_LATENCY, p),
            time_per_output_token: hist_f64(e::TIME_PER_OUTPUT_TOKEN, p),
            e2e_request_latency: hist_f64(e::E2E_REQUEST_LATENCY, p),
            request_queue_time: hist_f64(e::REQUEST_QUEUE_TIME, p),
            request_prefill_time: hist_f64(e::REQUEST_PREFILL_TIME, p),
            request_decode_time: hist_f64(e::REQUEST_DECODE_TIME, p),
            request_inference_time: hist_f64(e::REQUEST_INFERENCE_TIME, p),
            request_prompt_tokens: hist_u64(e::REQUEST_PROMPT_TOKENS, p),
            request_generation_tokens: hist_u64(e::REQUEST_GENERATION_TOKENS, p),
            request_params_max_tokens: hist_u64(e::REQUEST_PARAMS_MAX_TOKENS, p),
            request_max_num_generation_tokens: hist_u64(e::REQUEST_MAX_NUM_GENERATION_TOKENS, p),
            request_params_n: hist_u64(e::REQUEST_PARAMS_N, p),
            iteration_tokens: hist_u64(e::ITERATION_TOKENS, p),
        };
        let gen_ai = GenAiInstruments {
            request_duration: hist_f64(gen_ai::REQUEST_DURATION, ""),
            time_to_first_token: hist_f64(gen_ai::TIME_TO_FIRST_TOKEN, ""),
            time_per_output_token: hist_f64(gen_ai::TIME_PER_OUTPUT_TOKEN, ""),
        };
        let http = HttpInstruments {
            request_duration: hist_f64(http::REQUEST_DURATION, ""),
            active_requests: meter
                .i64_up_down_counter(http::ACTIVE_REQUESTS.name)
                .with_unit(http::ACTIVE_REQUESTS.unit)
                .with_description(http::ACTIVE_REQUESTS.description)
                .build(),
            request_body_size: hist_u64(http::REQUEST_BODY_SIZE, ""),
            response_body_size: hist_u64(http::RESPONSE_BODY_SIZE, ""),
        };
        // Arc-backed values: cloning an attribute on the hot path copies a pointer.
        let model_name: Arc<str> = Arc::from(cfg.model_name);
        let model = [
            KeyValue::new("model_name", model_name.clone()),
            KeyValue::new("engine", ENGINE_INDEX),
        ];
        let with_reason = |r: FinishReason| {
            [
                model[0].clone(),
                model[1].clone(),
                KeyValue::new("finished_reason", r.as_str()),
            ]
        };
        let by_reason = [
            with_reason(FinishReason::Stop),
            with_reason(FinishReason::Length),
            with_reason(FinishReason::Abort),
            with_reason(FinishReason::Error),
        ];
        let gen_ai_attrs = |op: Operation| {
            [
                KeyValue::new("gen_ai.operation.name", op.as_str()),
                KeyValue::new("gen_ai.provider.name", GEN_AI_PROVIDER),
                KeyValue::new("gen_ai.request.model", model_name.clone()),
                KeyValue::new("gen_ai.response.model", model_name.clone()),
            ]
        };
        let prompt_source = super::prompt_source::PromptSourceInstruments::new(meter, cfg, &model);
        Self {
            engine,
            gen_ai,
            http,
            prompt_source,
            instrumentator: super::instrumentator::InstrumentatorInstruments::new(meter),
            flagged: super::flagged::FlaggedInstruments::new(meter, cfg),
            structured: super::structured::StructuredOutputInstruments::new(meter, &model),
            token_load: super::token_load::TokenLoadInstruments::new(meter, cfg.engine_prefix),
            exemplars: super::exemplars::LatencyExemplars::new(cfg),
            model,
            by_reason,
            gen_ai_base: [gen_ai_attrs(Operation::Chat), gen_ai_attrs(Operation::TextCompletion)],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_two_five_stops_at_max() {
        assert_eq!(one_two_five_buckets(1), vec![1.0]);
        assert_eq!(one_two_five_buckets(60), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
        let b = one_two_five_buckets(8192);
        assert_eq!(b.first(), Some(&1.0));
        assert_eq!(b.last(), Some(&5000.0));
        assert_eq!(b.len(), 12);
        assert_eq!(one_two_five_buckets(0), Vec::<f64>::new());
        assert!(one_two_five_buckets(u64::MAX).len() > 50);
    }

    #[test]
    fn default_buckets_validate_and_bad_ones_name_the_family() {
        assert_eq!(HistogramBuckets::default().validate(), Ok(()));
        let mut b = HistogramBuckets {
            itl: vec![0.1, 0.05],
            ..HistogramBuckets::default()
        };
        let err = b.validate().unwrap_err();
        assert_eq!(err.to_string(), "telemetry.buckets.itl is not strictly increasing");
        b.itl = vec![];
        assert_eq!(b.validate().unwrap_err().family, "itl");
        b.itl = vec![f64::NAN];
        assert_eq!(b.validate().unwrap_err().problem, "has a non-finite value");
    }

    #[test]
    fn buckets_deserialize_from_config() {
        let json = serde_json::to_value(HistogramBuckets::vllm(100)).unwrap();
        let back: HistogramBuckets = serde_json::from_value(json).unwrap();
        assert_eq!(back.token_counts, vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]);
    }
}
