//! The instruments kiln records, grouped by family and built once from the family table
//! ([`super::family`]) by the one builder ([`super::builder`]).

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Meter, UpDownCounter};

use std::sync::Arc;

use super::builder::{InstrumentBuilder, InstrumentsConfig};
use super::family::{GEN_AI_PROVIDER, engine, gen_ai, http, kiln};
use super::histogram_store::{Histogram, HistogramStore, LatencyHistogram};
use crate::engine::types::{FinishReason, Operation};

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
    pub time_to_first_token: LatencyHistogram,
    pub inter_token_latency: LatencyHistogram,
    pub time_per_output_token: LatencyHistogram,
    pub e2e_request_latency: LatencyHistogram,
    pub request_queue_time: LatencyHistogram,
    pub request_prefill_time: LatencyHistogram,
    pub request_decode_time: LatencyHistogram,
    pub request_inference_time: LatencyHistogram,
    pub request_prompt_tokens: Histogram<u64>,
    pub request_generation_tokens: Histogram<u64>,
    pub request_params_max_tokens: Histogram<u64>,
    pub request_max_num_generation_tokens: Histogram<u64>,
    pub request_params_n: Histogram<u64>,
    pub request_num_preemptions: Histogram<u64>,
    pub iteration_tokens: Histogram<u64>,
}

pub(super) struct GenAiInstruments {
    pub request_duration: LatencyHistogram,
    pub time_to_first_token: LatencyHistogram,
    pub time_per_output_token: LatencyHistogram,
}

pub(super) struct HttpInstruments {
    pub request_duration: LatencyHistogram,
    pub active_requests: UpDownCounter<i64>,
    pub request_body_size: Histogram<u64>,
    pub response_body_size: Histogram<u64>,
}

/// All instruments plus the attribute sets reused on every record (built once, so the hot
/// path allocates nothing for the common labels).
pub struct Instruments {
    pub(super) engine: EngineInstruments,
    pub(super) gen_ai: GenAiInstruments,
    pub(super) http: HttpInstruments,
    pub(super) prompt_source: super::prompt_source::PromptSourceInstruments,
    pub(super) lora_info: super::lora_info::LoraInfo,
    pub(super) lora_adapters: super::lora_adapters::LoraAdapterInstruments,
    pub(super) instrumentator: super::instrumentator::InstrumentatorInstruments,
    pub(super) flagged: super::flagged::FlaggedInstruments,
    pub(super) structured: super::structured::StructuredOutputInstruments,
    /// Where every histogram is recorded; `/metrics` gathers and snapshots it.
    pub(super) exemplar_store: Arc<HistogramStore>,
    pub(super) step_duration: super::step_duration::StepDurationInstrument,
    pub(super) token_load: super::token_load::TokenLoadInstruments,
    pub(super) prefix_hit_rate: super::prefix_hit_rate::PrefixHitRate,
    pub(super) kv_offload: super::kv_offload::KvOffloadInstruments,
    pub(super) request_failure: super::request_failure::RequestFailureInstrument,
    /// Engine 0's `[model_name, engine]`, for series recorded outside an engine (grammar
    /// compiles in the API server; `model[0]` alone where no engine is meant).
    pub(super) model: [KeyValue; 2],
    /// Each engine's labels, by its index (`--data-parallel-size`).
    pub(super) engines: Vec<EngineLabels>,
    /// GenAI operation, provider, request and response model, indexed by `operation_index`.
    pub(super) gen_ai_base: [[KeyValue; 4]; 2],
}

/// The labels of one engine's series.
pub(super) struct EngineLabels {
    /// `[model_name, engine]`: the labels of every engine series, as vLLM's.
    pub model: [KeyValue; 2],
    /// `[model_name, engine, finished_reason]`, indexed by `reason_index`.
    pub by_reason: [[KeyValue; 3]; 4],
}

/// The one place an engine's label set is built: vLLM numbers its engine cores from 0, and
/// engine `index` of a data-parallel server is `engine="index"`.
pub(super) fn engine_labels(model_name: &Arc<str>, index: usize) -> EngineLabels {
    let model = [
        KeyValue::new("model_name", model_name.clone()),
        KeyValue::new("engine", index.to_string()),
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
    EngineLabels { model, by_reason }
}

impl Instruments {
    /// Engine `index`'s labels (engine 0's for an index the server does not run).
    pub(super) fn engine_labels(&self, index: usize) -> &EngineLabels {
        self.engines.get(index).unwrap_or(&self.engines[0])
    }
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

impl Instruments {
    /// Creates every instrument on `meter`. Buckets must have passed `validate`.
    pub fn new(meter: &Meter, cfg: &InstrumentsConfig<'_>) -> Self {
        let exemplar_store = Arc::new(HistogramStore::default());
        // Arc-backed values: cloning an attribute on the hot path copies a pointer.
        let model_name: Arc<str> = Arc::from(cfg.model_name);
        let engines: Vec<EngineLabels> = (0..cfg.engines.max(1)).map(|i| engine_labels(&model_name, i)).collect();
        let models: Vec<[KeyValue; 2]> = engines.iter().map(|e| e.model.clone()).collect();
        let model = models[0].clone();
        // Engine and kiln families carry each engine's labels from start; GenAI and HTTP
        // ones get their labels from traffic.
        let b = InstrumentBuilder::new(meter, cfg, &exemplar_store).with_initial_series(&exemplar_store, &models);
        let fixed = b.unprefixed();
        let traffic = fixed.without_initial_series();
        use engine as e;
        let engine = EngineInstruments {
            num_requests_running: b.gauge_u64(e::NUM_REQUESTS_RUNNING),
            num_requests_waiting: b.gauge_u64(e::NUM_REQUESTS_WAITING),
            num_requests_swapped: b.gauge_u64(e::NUM_REQUESTS_SWAPPED),
            kv_cache_usage_perc: b.gauge_f64(e::KV_CACHE_USAGE_PERC),
            gpu_cache_usage_perc: b.gauge_f64(e::GPU_CACHE_USAGE_PERC),
            cpu_cache_usage_perc: b.gauge_f64(e::CPU_CACHE_USAGE_PERC),
            avg_prompt_throughput: b.gauge_f64(e::AVG_PROMPT_THROUGHPUT),
            avg_generation_throughput: b.gauge_f64(e::AVG_GENERATION_THROUGHPUT),
            cache_config_info: b.gauge_u64(e::CACHE_CONFIG_INFO),
            prompt_tokens: b.counter(e::PROMPT_TOKENS),
            generation_tokens: b.counter(e::GENERATION_TOKENS),
            request_success: b.counter(e::REQUEST_SUCCESS),
            num_preemptions: b.counter(e::NUM_PREEMPTIONS),
            prefix_cache_queries: b.counter(e::PREFIX_CACHE_QUERIES),
            prefix_cache_hits: b.counter(e::PREFIX_CACHE_HITS),
            admission_rejections: b.counter(e::ADMISSION_REJECTIONS),
            engine_restarts: fixed.counter(kiln::ENGINE_RESTARTS),
            time_to_first_token: b.latency_histogram(e::TIME_TO_FIRST_TOKEN, &exemplar_store),
            inter_token_latency: b.latency_histogram(e::INTER_TOKEN_LATENCY, &exemplar_store),
            time_per_output_token: b.latency_histogram(e::TIME_PER_OUTPUT_TOKEN, &exemplar_store),
            e2e_request_latency: b.latency_histogram(e::E2E_REQUEST_LATENCY, &exemplar_store),
            request_queue_time: b.latency_histogram(e::REQUEST_QUEUE_TIME, &exemplar_store),
            request_prefill_time: b.latency_histogram(e::REQUEST_PREFILL_TIME, &exemplar_store),
            request_decode_time: b.latency_histogram(e::REQUEST_DECODE_TIME, &exemplar_store),
            request_inference_time: b.latency_histogram(e::REQUEST_INFERENCE_TIME, &exemplar_store),
            request_prompt_tokens: b.histogram_u64(e::REQUEST_PROMPT_TOKENS),
            request_generation_tokens: b.histogram_u64(e::REQUEST_GENERATION_TOKENS),
            request_params_max_tokens: b.histogram_u64(e::REQUEST_PARAMS_MAX_TOKENS),
            request_max_num_generation_tokens: b.histogram_u64(e::REQUEST_MAX_NUM_GENERATION_TOKENS),
            request_params_n: b.histogram_u64(e::REQUEST_PARAMS_N),
            request_num_preemptions: b.histogram_u64(e::REQUEST_NUM_PREEMPTIONS),
            iteration_tokens: b.histogram_u64(e::ITERATION_TOKENS),
        };
        let gen_ai = GenAiInstruments {
            request_duration: traffic.latency_histogram(gen_ai::REQUEST_DURATION, &exemplar_store),
            time_to_first_token: traffic.latency_histogram(gen_ai::TIME_TO_FIRST_TOKEN, &exemplar_store),
            time_per_output_token: traffic.latency_histogram(gen_ai::TIME_PER_OUTPUT_TOKEN, &exemplar_store),
        };
        let http = HttpInstruments {
            request_duration: traffic.latency_histogram(http::REQUEST_DURATION, &exemplar_store),
            active_requests: traffic.up_down_counter(http::ACTIVE_REQUESTS),
            request_body_size: traffic.histogram_u64(http::REQUEST_BODY_SIZE),
            response_body_size: traffic.histogram_u64(http::RESPONSE_BODY_SIZE),
        };
        let gen_ai_attrs = |op: Operation| {
            [
                KeyValue::new("gen_ai.operation.name", op.as_str()),
                KeyValue::new("gen_ai.provider.name", GEN_AI_PROVIDER),
                KeyValue::new("gen_ai.request.model", model_name.clone()),
                KeyValue::new("gen_ai.response.model", model_name.clone()),
            ]
        };
        let prompt_source = super::prompt_source::PromptSourceInstruments::new(&b);
        Self {
            engine,
            gen_ai,
            http,
            prompt_source,
            lora_info: super::lora_info::LoraInfo::new(&b),
            lora_adapters: super::lora_adapters::LoraAdapterInstruments::new(&traffic, &exemplar_store),
            instrumentator: super::instrumentator::InstrumentatorInstruments::new(&traffic, &exemplar_store),
            flagged: super::flagged::FlaggedInstruments::new(&b),
            structured: super::structured::StructuredOutputInstruments::new(&fixed, &model),
            step_duration: super::step_duration::StepDurationInstrument::new(&fixed),
            token_load: super::token_load::TokenLoadInstruments::new(&b),
            prefix_hit_rate: super::prefix_hit_rate::PrefixHitRate::new(&b),
            kv_offload: super::kv_offload::KvOffloadInstruments::new(&b),
            request_failure: super::request_failure::RequestFailureInstrument::new(&b),
            exemplar_store,
            model,
            engines,
            gen_ai_base: [gen_ai_attrs(Operation::Chat), gen_ai_attrs(Operation::TextCompletion)],
        }
    }
}
