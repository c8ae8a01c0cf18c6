//! The metric family table: every instrument kiln exports, declared once, with its name,
//! unit, description and bucket family, and the one rule that turns a name into the exposed one.
//!
//! Names, units and buckets are the contract of `shared/METRICS.md`; changing one here is a
//! breaking change for dashboards and routers. The exporter derives the exposed name: it
//! appends `_seconds` for unit `s`, `_bytes` for `By`, `_total` for counters, and turns dots
//! into underscores. Units written as `{annotation}` add no suffix, which is why the
//! token-count and ratio instruments use annotations or no unit at all (`1` would add
//! `_ratio`, `{token}/s` would add `_per_second`). Adding a family: its spec here, its
//! instrument in the struct of the file that records it (the builder in `builder.rs` builds it).

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
    KvCacheResidency,
    Preemptions,
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
    // Load in tokens (the Gateway API Inference Extension's model-server protocol).
    pub const NUM_TOKENS_WAITING: Spec = spec("num_tokens_waiting", "{token}", "Tokens the waiting requests still have to compute (prompt, and generated tokens of recompute-preempted requests).");
    pub const NUM_TOKENS_RUNNING: Spec = spec("num_tokens_running", "{token}", "Context tokens (prompt plus generated) of the requests in the running batch.");
    pub const MAX_TOKEN_CAPACITY: Spec = spec("max_token_capacity", "{token}", "Tokens the device KV cache holds when full.");
    pub const ENGINE_HEALTHY: Spec = spec("engine_healthy", "", "1 while the engine serves; 0 while it loads or restarts its executor, and once it is dead.");
    pub const CACHE_CONFIG_INFO: Spec = spec("cache_config_info", "", "Information of the KV-cache configuration (value 1).");
    // Counters (`_total` is appended by the exporter).
    pub const PROMPT_TOKENS: Spec = spec("prompt_tokens", "{token}", "Prompt tokens whose prefill completed, once per request.");
    pub const GENERATION_TOKENS: Spec = spec("generation_tokens", "{token}", "Number of generated tokens.");
    pub const REQUEST_SUCCESS: Spec = spec("request_success", "{request}", "Finished requests, by finished_reason.");
    pub const NUM_PREEMPTIONS: Spec = spec("num_preemptions", "{preemption}", "Preemptions (recompute or swap).");
    pub const PREFIX_CACHE_QUERIES: Spec = spec("prefix_cache_queries", "{token}", "Prompt tokens looked up in the prefix cache.");
    pub const PREFIX_CACHE_HITS: Spec = spec("prefix_cache_hits", "{token}", "Prompt tokens found in the prefix cache.");
    pub const REQUEST_FAILURE: Spec = spec("request_failure", "{request}", "Requests that failed in the API server, by the stage the failure surfaced in and the HTTP status code of the error.");
    // vLLM v0's gauge, still read by SGLang's model gateway (smg) for its cache view.
    pub const GPU_PREFIX_CACHE_HIT_RATE: Spec = spec("gpu_prefix_cache_hit_rate", "", "Prompt tokens found in the prefix cache / looked up, since start, 0..1 (0 before any lookup).");
    pub const ADMISSION_REJECTIONS: Spec = spec("admission_rejections", "{request}", "Requests refused at the door, by reason.");
    // vLLM's KV-offload names, for kiln's host swap pool.
    pub const KV_OFFLOAD_TOTAL_BYTES: Spec = spec("kv_offload_total_bytes", "{byte}", "Bytes of KV blocks copied between the device pool and the host swap pool, by transfer_type (GPU_to_CPU: swap-out, CPU_to_GPU: swap-in).");
    pub const KV_OFFLOAD_TOTAL_TIME: Spec = spec("kv_offload_total_time", "{second}", "Seconds spent copying KV blocks between the device pool and the host swap pool, by transfer_type.");
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
    pub const REQUEST_NUM_PREEMPTIONS: HistogramSpec = hist("request_num_preemptions", "{preemption}", "Times a finished request was preempted.", B::Preemptions);
    pub const REQUEST_PARAMS_N: HistogramSpec = hist("request_params_n", "{sequence}", "The n parameter of finished requests.", B::ParamsN);
    pub const ITERATION_TOKENS: HistogramSpec = hist("iteration_tokens_total", "{token}", "Tokens per engine step: prompt tokens computed plus tokens generated (a request's first token included).", B::IterationTokens);
}

/// kiln's own families: named `kiln_*` whatever the engine prefix, label `model_name`.
#[rustfmt::skip]
pub mod kiln {
    use super::{Spec, spec};

    pub const ENGINE_RESTARTS: Spec = spec("kiln_engine_restarts", "{restart}", "Executor restarts after a panic; each failed its step's requests and emptied the KV and prefix caches.");
    pub const UNCACHED_TOKENS_WAITING: Spec = spec("kiln_uncached_tokens_waiting", "{token}", "Of the waiting tokens, those the prefix cache would not cover if admitted now.");
    pub const STEP_DURATION: Spec = spec("kiln_step_duration", "s", "Wall time the executor spent on one engine step (forward pass and sampling).");
    pub const OTLP_METRIC_EXPORTS: Spec = spec("kiln_otlp_metric_exports", "{export}", "OTLP metric exports (pushes to the collector), by result: success or failure.");
    // The trace pipeline's export health (`span_exports.rs`), on the metrics side.
    pub const OTLP_SPAN_EXPORTS: Spec = spec("kiln_otlp_span_exports", "{export}", "OTLP span export calls (one per batch), by result.");
    pub const OTLP_SPANS_DROPPED: Spec = spec("kiln_otlp_spans_dropped", "{span}", "Spans dropped because the bounded span export queue was full.");
    // Unit `By`: exposed as `kiln_memory_bytes`; labels component and device, no model_name.
    pub const MEMORY: Spec = spec("kiln_memory", "By", "Bytes held, by component (weights, kv_cache, host_swap, scratch) and device.");
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

/// Engine families behind vLLM's flags (`--kv-cache-metrics`, `--enable-mfu-metrics`).
#[rustfmt::skip]
pub mod flagged {
    use super::{BucketFamily as B, HistogramSpec, Spec};

    pub const KV_BLOCK_LIFETIME: HistogramSpec = HistogramSpec { spec: Spec { name: "kv_block_lifetime", unit: "s", description: "KV block lifetime from allocation to eviction (sampled blocks)." }, buckets: B::KvCacheResidency };
    pub const KV_BLOCK_IDLE_BEFORE_EVICT: HistogramSpec = HistogramSpec { spec: Spec { name: "kv_block_idle_before_evict", unit: "s", description: "Time a KV block sat unused before it was evicted (sampled blocks)." }, buckets: B::KvCacheResidency };
    pub const KV_BLOCK_REUSE_GAP: HistogramSpec = HistogramSpec { spec: Spec { name: "kv_block_reuse_gap", unit: "s", description: "Time between consecutive uses of a KV block by prefix-cache hits (sampled blocks)." }, buckets: B::KvCacheResidency };
    // Unit annotations, not `By`: the exposed names already say bytes.
    pub const ESTIMATED_FLOPS: Spec = Spec { name: "estimated_flops_per_gpu", unit: "{flop}", description: "Estimated model FLOPs of the engine's steps, from their shapes." };
    pub const ESTIMATED_READ_BYTES: Spec = Spec { name: "estimated_read_bytes_per_gpu", unit: "{byte}", description: "Estimated bytes the engine's steps read (weights once a step, KV context)." };
    pub const ESTIMATED_WRITE_BYTES: Spec = Spec { name: "estimated_write_bytes_per_gpu", unit: "{byte}", description: "Estimated bytes the engine's steps wrote (new tokens' KV)." };
}

/// Where prompt KV came from and why requests wait (vLLM names, engine prefix).
#[rustfmt::skip]
pub mod prompt_source {
    use super::{BucketFamily as B, HistogramSpec, Spec};

    pub const PROMPT_TOKENS_BY_SOURCE: Spec = Spec { name: "prompt_tokens_by_source", unit: "{token}", description: "Prompt tokens whose prefill completed, by where their KV came from." };
    pub const PROMPT_TOKENS_CACHED: Spec = Spec { name: "prompt_tokens_cached", unit: "{token}", description: "Prompt tokens served from the prefix cache, once per request." };
    pub const PROMPT_TOKENS_CACHED_BY_SOURCE: Spec = Spec { name: "prompt_tokens_cached_by_source", unit: "{token}", description: "Cached prompt tokens, by the cache they came from." };
    pub const NUM_REQUESTS_WAITING_BY_REASON: Spec = Spec { name: "num_requests_waiting_by_reason", unit: "{request}", description: "Waiting requests, by why they wait (capacity: KV blocks, batch slots or budget; deferred: no slot for the LoRA adapter)." };
    pub const REQUEST_PREFILL_KV_COMPUTED_TOKENS: HistogramSpec = HistogramSpec { spec: Spec { name: "request_prefill_kv_computed_tokens", unit: "{token}", description: "Prompt tokens a request's prefill computed (prompt minus cached)." }, buckets: B::TokenCounts };
}

/// vLLM's LoRA info gauge (engine prefix), and kiln's per-adapter families (`kiln_lora_*`,
/// label `lora_name`: an adapter's name, `""` for the base model).
#[rustfmt::skip]
pub mod lora {
    use super::{BucketFamily as B, HistogramSpec, Spec};

    pub const LORA_REQUESTS_INFO: Spec = Spec { name: "lora_requests_info", unit: "", description: "Running stats on lora requests." };
    pub const REQUESTS: Spec = Spec { name: "kiln_lora_requests", unit: "{request}", description: "Requests by LoRA adapter and state (running, waiting); they sum to num_requests_running and num_requests_waiting." };
    pub const PROMPT_TOKENS: Spec = Spec { name: "kiln_lora_prompt_tokens", unit: "{token}", description: "Prompt tokens whose prefill completed, by LoRA adapter; they sum to prompt_tokens." };
    pub const GENERATION_TOKENS: Spec = Spec { name: "kiln_lora_generation_tokens", unit: "{token}", description: "Generated tokens by LoRA adapter; they sum to generation_tokens." };
    pub const TIME_TO_FIRST_TOKEN: HistogramSpec = HistogramSpec { spec: Spec { name: "kiln_lora_time_to_first_token", unit: "s", description: "Time from arrival to the first generated token, by LoRA adapter." }, buckets: B::Ttft };
    pub const E2E_REQUEST_LATENCY: HistogramSpec = HistogramSpec { spec: Spec { name: "kiln_lora_e2e_request_latency", unit: "s", description: "Time from arrival to finish, every finished request, by LoRA adapter." }, buckets: B::RequestLatency };
    pub const ADAPTER_LOADS: Spec = Spec { name: "kiln_lora_adapter_loads", unit: "{change}", description: "Run-time LoRA adapter changes, by result: loaded, failed (a load refused), unloaded." };
    pub const ADAPTER_LOAD_TIME: Spec = Spec { name: "kiln_lora_adapter_load", unit: "s", description: "Time to read and install a LoRA adapter loaded at run time, loaded or failed." };
    /// Bounds of `kiln_lora_adapter_load_seconds`: from a tiny adapter read from page cache
    /// to a large one read from a slow disk.
    pub const ADAPTER_LOAD_BUCKETS: [f64; 14] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
    /// `kiln_lora_adapter_loads_total`'s results, every one exposed from start at 0.
    pub const CHANGE_RESULTS: [&str; 3] = ["loaded", "failed", "unloaded"];
}

/// kiln's constrained-decoding families (`kiln_*`, no prefix).
#[rustfmt::skip]
pub mod structured {
    use super::Spec;

    pub const REQUESTS: Spec = Spec { name: "kiln_structured_output_requests", unit: "{request}", description: "Finished requests whose output was constrained, by constraint kind." };
    pub const INVALID: Spec = Spec { name: "kiln_structured_output_invalid", unit: "{request}", description: "Constrained requests that ended without a complete, valid output (cut by max_tokens, aborted, failed), by reason." };
    pub const COMPILE_DURATION: Spec = Spec { name: "kiln_grammar_compile_duration", unit: "s", description: "Time to compile a constraint into a grammar (cache misses only)." };
    pub const CACHE_QUERIES: Spec = Spec { name: "kiln_grammar_cache_queries", unit: "{lookup}", description: "Compiled-grammar cache lookups." };
    pub const CACHE_HITS: Spec = Spec { name: "kiln_grammar_cache_hits", unit: "{lookup}", description: "Compiled-grammar cache lookups that found the grammar." };
    pub const COMPILE_FAILURES: Spec = Spec { name: "kiln_grammar_compile_failures", unit: "{request}", description: "Constraints refused with a 400, by reason (too_large, invalid, timeout, unavailable)." };
    pub const MASK_DURATION: Spec = Spec { name: "kiln_grammar_mask_duration", unit: "s", description: "Time to compute one constrained sequence's token mask on the executor thread." };
}

/// prometheus-fastapi-instrumentator's HTTP families as vLLM exposes them (no prefix).
#[rustfmt::skip]
pub mod instrumentator {
    use super::{Spec, spec};

    pub const REQUESTS: Spec = spec("http_requests", "", "Total number of requests by method, status and handler.");
    pub const DURATION: Spec = spec("http_request_duration", "s", "Latency with only few buckets by handler.");
    pub const DURATION_HIGHR: Spec = spec("http_request_duration_highr", "s", "Latency with many buckets but no API specific labels.");
    pub const REQUEST_SIZE: Spec = spec("http_request_size", "By", "Content length of incoming requests by handler.");
    pub const RESPONSE_SIZE: Spec = spec("http_response_size", "By", "Content length of outgoing responses by handler.");
}

/// The `reason` values of `admission_rejections_total` (series created at start).
pub const ADMISSION_REJECTION_REASONS: [&str; 2] = ["queue_full", "too_long"];

/// `gen_ai.provider.name`: kiln serves its own models.
pub const GEN_AI_PROVIDER: &str = "kiln";

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
