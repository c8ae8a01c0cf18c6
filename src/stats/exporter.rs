//! Wires the telemetry to Prometheus: one `SdkMeterProvider` (counters and gauges), read on
//! demand by the `opentelemetry-prometheus` collector, and the `HistogramStore` (every
//! histogram) as a collector of its own, both in one `prometheus::Registry` (plus the process
//! collector), rendered by `render_metrics` for `GET /metrics`. OTLP push readers join
//! through `build_telemetry_with_readers`: they share the provider (counters and gauges) and
//! read the same store for the histograms (`otlp_push`), so nothing is recorded twice.

use std::sync::Arc;

use opentelemetry::KeyValue;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkError;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use prometheus::Registry;
use serde::{Deserialize, Serialize};

use super::boxed_reader::BoxedReader;
use super::buckets::{BucketError, HistogramBuckets};
use super::builder::InstrumentsConfig;
use super::exposition::{ExpositionFormat, encode};
use super::histogram_store::{HistogramSnapshot, HistogramStore, StoreCollector};
use super::instruments::Instruments;
use super::push_histograms::{HistogramAggregation, PushReader, PushedHistograms};
use super::service_resource::service_resource;

/// `Content-Type` of `GET /metrics` (Prometheus text format 0.0.4).
pub const METRICS_CONTENT_TYPE: &str = ExpositionFormat::PrometheusText.content_type();

/// The instrumentation scope name (not exported as labels: scope info is off).
const METER_NAME: &str = "kiln";

/// The KV-cache facts exposed by `cache_config_info`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheConfigInfo {
    pub block_size: u64,
    pub num_gpu_blocks: u64,
    pub num_cpu_blocks: u64,
    pub enable_prefix_caching: bool,
    /// The longest sequence (prompt plus output) one request may have; with the cache's
    /// size in tokens it gives `kv_cache_max_concurrency`.
    pub max_model_len: u64,
    /// `--kv-cache-dtype` as set (vLLM's label shows the setting: `auto`, `bfloat16`, ...).
    pub cache_dtype: String,
}

impl CacheConfigInfo {
    /// Tokens the device KV cache holds when full (vLLM's `kv_cache_size_tokens`).
    pub fn kv_cache_size_tokens(&self) -> u64 {
        self.num_gpu_blocks * self.block_size
    }

    /// How many requests of the full context length fit in the cache at once (vLLM's
    /// `kv_cache_max_concurrency`, a fraction).
    pub fn kv_cache_max_concurrency(&self) -> f64 {
        if self.max_model_len == 0 {
            return 0.0;
        }
        self.kv_cache_size_tokens() as f64 / self.max_model_len as f64
    }
}

/// Everything the stats layer needs from `Config`'s telemetry section.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    /// Off: no provider, no instruments, an empty registry; the stats actor still runs.
    pub enabled: bool,
    /// Prepended to engine metric names (`vllm:` default, `kiln_` also fine).
    pub engine_prefix: String,
    /// The `model_name` label and GenAI model attributes (configured, never client-chosen).
    pub model_name: String,
    /// `service.name`; `OTEL_SERVICE_NAME` overrides it.
    pub service_name: String,
    /// `service.instance.id`; empty means "pid@hostname".
    pub service_instance_id: String,
    pub buckets: HistogramBuckets,
    pub cache_info: CacheConfigInfo,
    /// `--kv-cache-metrics`: expose the KV-block residency histograms.
    pub kv_cache_metrics: bool,
    /// `--enable-mfu-metrics`: expose the estimated FLOPs and bytes counters.
    pub mfu_metrics: bool,
    /// How the push readers get the histograms (`--otlp-histogram-aggregation`).
    pub push_histograms: HistogramAggregation,
    /// Engines behind the server (`--data-parallel-size`); `cache_info` is each one's.
    pub engines: usize,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            engine_prefix: "vllm:".to_owned(),
            model_name: "default".to_owned(),
            service_name: "kiln".to_owned(),
            service_instance_id: String::new(),
            buckets: HistogramBuckets::default(),
            cache_info: CacheConfigInfo::default(),
            kv_cache_metrics: false,
            mfu_metrics: false,
            push_histograms: HistogramAggregation::Explicit,
            engines: 1,
        }
    }
}

/// The stats layer's errors; each names the config key or the step that failed.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error(transparent)]
    Buckets(#[from] BucketError),
    #[error("telemetry.engine_prefix {prefix:?} is not a Prometheus name prefix ([a-zA-Z_:][a-zA-Z0-9_:]*)")]
    Prefix { prefix: String },
    #[error("telemetry.model_name must not be empty")]
    ModelName,
    #[error("building the prometheus exporter: {0}")]
    Exporter(#[source] OTelSdkError),
    #[error("registering a collector in the prometheus registry: {0}")]
    Registry(#[from] prometheus::Error),
    #[error("shutting down the meter provider: {0}")]
    Shutdown(#[source] OTelSdkError),
}

/// The built telemetry: the registry `/metrics` renders, the provider (kept for flush and
/// shutdown), the instruments the stats actor records into and the exemplars it keeps for
/// them. `provider` and `instruments` are `None` when telemetry is disabled.
pub struct Telemetry {
    pub registry: Registry,
    pub provider: Option<SdkMeterProvider>,
    pub instruments: Option<Arc<Instruments>>,
    pub exemplars: Arc<HistogramStore>,
}

impl Telemetry {
    /// Flushes push readers (OTLP) and stops them; call once at shutdown.
    pub fn shutdown(&self) -> Result<(), TelemetryError> {
        for provider in self.providers() {
            provider.shutdown().map_err(TelemetryError::Shutdown)?;
        }
        Ok(())
    }

    /// The meter provider, if telemetry is on: observable instruments (export counters,
    /// engine health) are registered on it, and push readers read it.
    pub fn providers(&self) -> impl Iterator<Item = &SdkMeterProvider> {
        self.provider.iter()
    }
}

/// `build_telemetry_with_readers` without push readers (Prometheus pull only).
pub fn build_telemetry(cfg: &TelemetryConfig) -> Result<Telemetry, TelemetryError> {
    build_telemetry_with_readers(cfg, Vec::new())
}

/// Builds the provider with the Prometheus reader and `push_readers` (`build_otlp_reader`),
/// and the histogram store's collector; the push readers read the histograms from the store.
pub fn build_telemetry_with_readers(
    cfg: &TelemetryConfig,
    push_readers: Vec<Box<dyn PushReader>>,
) -> Result<Telemetry, TelemetryError> {
    let registry = Registry::new();
    if !cfg.enabled {
        return Ok(Telemetry {
            registry,
            provider: None,
            instruments: None,
            exemplars: Arc::default(),
        });
    }
    validate(cfg)?;

    // The SDK's families reach `/metrics` through `SdkWithoutHistograms`: histograms are the
    // store's to expose.
    let sdk_registry = Registry::new();
    let prometheus_reader = opentelemetry_prometheus::exporter()
        .with_registry(sdk_registry.clone())
        // No otel_scope_* labels on every series: one meter, nothing to tell apart.
        .scope_info_enabled(false)
        .build()
        .map_err(TelemetryError::Exporter)?;
    #[cfg(target_os = "linux")]
    registry.register(Box::new(prometheus::process_collector::ProcessCollector::for_self()))?;

    registry.register(Box::new(SdkWithoutHistograms::new(sdk_registry)))?;

    // Shared: the provider holds each reader, and the store is handed to it once built.
    let push_readers: Vec<Arc<dyn PushReader>> = push_readers.into_iter().map(Arc::from).collect();
    let mut builder = SdkMeterProvider::builder()
        .with_resource(resource(cfg))
        .with_reader(prometheus_reader);
    for reader in &push_readers {
        builder = builder.with_reader(BoxedReader(reader.clone()));
    }
    let provider = builder.build();
    let instruments = instruments_on(&provider, cfg);
    for reader in &push_readers {
        reader.read_histograms_from(PushedHistograms {
            store: instruments.exemplar_store.clone(),
            aggregation: cfg.push_histograms,
        });
    }
    registry.register(Box::new(StoreCollector::new(instruments.exemplar_store.clone())))?;
    Ok(Telemetry {
        registry,
        provider: Some(provider),
        exemplars: instruments.exemplar_store.clone(),
        instruments: Some(Arc::new(instruments)),
    })
}

/// The SDK's families as its Prometheus exporter writes them, less any histogram (none is
/// an SDK instrument; kept as a guard so `/metrics` never shows one twice).
struct SdkWithoutHistograms {
    sdk: Registry,
    desc: prometheus::core::Desc,
}

impl SdkWithoutHistograms {
    fn new(sdk: Registry) -> Self {
        let desc = prometheus::core::Desc::new(
            "kiln_sdk_instruments".to_owned(),
            "The OpenTelemetry SDK's counters and gauges.".to_owned(),
            Vec::new(),
            Default::default(),
        )
        .expect("a valid constant name");
        Self { sdk, desc }
    }
}

impl prometheus::core::Collector for SdkWithoutHistograms {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let mut families = self.sdk.gather();
        families.retain(|f| f.get_field_type() != prometheus::proto::MetricType::HISTOGRAM);
        families
    }
}

/// The instruments on `provider`'s meter, every series created at its start value.
fn instruments_on(provider: &SdkMeterProvider, cfg: &TelemetryConfig) -> Instruments {
    let meter = provider.meter(METER_NAME);
    let instruments = Instruments::new(
        &meter,
        &InstrumentsConfig {
            engine_prefix: &cfg.engine_prefix,
            model_name: &cfg.model_name,
            buckets: &cfg.buckets,
            kv_cache_metrics: cfg.kv_cache_metrics,
            mfu_metrics: cfg.mfu_metrics,
            engines: cfg.engines,
        },
    );
    for engine in &instruments.engines {
        record_cache_config(&instruments, &engine.model, &cfg.cache_info);
        let tokens = cfg.cache_info.kv_cache_size_tokens();
        instruments.token_load.record_capacity(&engine.model, tokens);
    }
    instruments.record_initial();
    instruments
}

/// Renders the registry in the Prometheus text format (`METRICS_CONTENT_TYPE`) with kiln's
/// own writer (`exposition`: bucket bounds spelled as vLLM's `le="1.0"`).
pub fn render_metrics(registry: &Registry) -> Result<String, TelemetryError> {
    Ok(encode(
        &registry.gather(),
        ExpositionFormat::PrometheusText,
        &HistogramSnapshot::default(),
    ))
}

/// The one rule for an engine metric prefix: the start of a Prometheus name,
/// `[a-zA-Z_:][a-zA-Z0-9_:]*`. The configuration checks it at start, before anything loads.
pub fn is_metric_name_prefix(prefix: &str) -> bool {
    prefix
        .chars()
        .enumerate()
        .all(|(i, c)| c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit()))
}

fn validate(cfg: &TelemetryConfig) -> Result<(), TelemetryError> {
    cfg.buckets.validate()?;
    if !is_metric_name_prefix(&cfg.engine_prefix) {
        return Err(TelemetryError::Prefix {
            prefix: cfg.engine_prefix.clone(),
        });
    }
    if cfg.model_name.is_empty() {
        return Err(TelemetryError::ModelName);
    }
    Ok(())
}

/// The resource of every export (`service_resource`).
pub fn resource(cfg: &TelemetryConfig) -> Resource {
    service_resource(&cfg.service_name, &cfg.service_instance_id)
}

/// `cache_config_info` is an info metric: value 1, facts in the labels, set once.
fn record_cache_config(instruments: &Instruments, model: &[KeyValue; 2], info: &CacheConfigInfo) {
    instruments.engine.cache_config_info.record(
        1,
        &[
            model[0].clone(),
            model[1].clone(),
            KeyValue::new("block_size", info.block_size.to_string()),
            KeyValue::new("num_gpu_blocks", info.num_gpu_blocks.to_string()),
            KeyValue::new("num_cpu_blocks", info.num_cpu_blocks.to_string()),
            KeyValue::new("enable_prefix_caching", info.enable_prefix_caching.to_string()),
            KeyValue::new("cache_dtype", info.cache_dtype.clone()),
            KeyValue::new("kv_cache_size_tokens", info.kv_cache_size_tokens().to_string()),
            KeyValue::new(
                "kv_cache_max_concurrency",
                super::exposition::python_float_repr(info.kv_cache_max_concurrency()),
            ),
        ],
    );
}

/// Helpers shared by the stats tests: read series out of a rendered exposition.
#[cfg(test)]
pub(crate) mod test_support {
    use super::*;
    use crate::engine::intervals::RequestIntervals;
    use crate::engine::types::{FinishReason, Operation};
    use crate::stats::data::FinishedRequestStats;

    pub(crate) fn config(prefix: &str) -> TelemetryConfig {
        TelemetryConfig {
            engine_prefix: prefix.to_owned(),
            model_name: "smollm2".to_owned(),
            service_name: "kiln-test".to_owned(),
            service_instance_id: "instance-1".to_owned(),
            cache_info: CacheConfigInfo {
                block_size: 16,
                num_gpu_blocks: 1024,
                num_cpu_blocks: 256,
                enable_prefix_caching: true,
                max_model_len: 8192,
                cache_dtype: "auto".to_owned(),
            },
            ..TelemetryConfig::default()
        }
    }

    /// Sample lines of the series named exactly `name` (`name{…} v` or `name v`).
    pub(crate) fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
            .collect()
    }

    /// The value of the one sample of `name` whose labels contain every `labels` pair.
    pub(crate) fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let matching: Vec<f64> = samples(text, name)
            .into_iter()
            .filter(|l| labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect();
        assert!(matching.len() <= 1, "{name} {labels:?} is ambiguous");
        matching.first().copied()
    }

    pub(crate) fn finished(reason: FinishReason, generated: u64) -> FinishedRequestStats {
        let started = generated > 0;
        FinishedRequestStats {
            finish_reason: reason,
            operation: Operation::Chat,
            error_type: (reason == FinishReason::Error).then_some("executor_error"),
            prompt_tokens: 10,
            generation_tokens: generated,
            max_tokens: 64,
            n: 1,
            num_preemptions: 0,
            intervals: RequestIntervals {
                e2e_s: 1.25,
                queue_s: Some(0.05),
                time_to_first_token_s: started.then_some(0.2),
                prefill_s: started.then_some(0.15),
                decode_s: started.then_some(1.0),
                inference_s: started.then_some(1.15),
                time_per_output_token_s: (generated > 1).then(|| 1.0 / (generated - 1) as f64),
            },
            trace: None,
            constraint_kind: None,
            lora: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;
    use crate::engine::types::FinishReason;
    use crate::stats::data::{IterationStats, SchedulerStats};

    const GAUGES: &[&str] = &[
        "num_requests_running",
        "num_requests_waiting",
        "num_requests_swapped",
        "kv_cache_usage_perc",
        "gpu_cache_usage_perc",
        "cpu_cache_usage_perc",
        "avg_prompt_throughput_toks_per_s",
        "avg_generation_throughput_toks_per_s",
        "cache_config_info",
    ];
    const COUNTERS: &[&str] = &[
        "prompt_tokens_total",
        "generation_tokens_total",
        "request_success_total",
        "num_preemptions_total",
        "prefix_cache_queries_total",
        "prefix_cache_hits_total",
        "admission_rejections_total",
    ];
    const HISTOGRAMS: &[&str] = &[
        "time_to_first_token_seconds",
        "inter_token_latency_seconds",
        "request_time_per_output_token_seconds",
        "e2e_request_latency_seconds",
        "request_queue_time_seconds",
        "request_prefill_time_seconds",
        "request_decode_time_seconds",
        "request_inference_time_seconds",
        "request_prompt_tokens",
        "request_generation_tokens",
        "request_params_max_tokens",
        "request_max_num_generation_tokens",
        "request_params_n",
        "request_num_preemptions",
        "iteration_tokens_total",
    ];

    fn busy_step() -> (SchedulerStats, IterationStats) {
        let scheduler = SchedulerStats {
            num_running: 2,
            num_waiting: 1,
            kv_cache_usage: 0.5,
            ..Default::default()
        };
        let iteration = IterationStats {
            num_prompt_tokens: 10,
            num_generation_tokens: 5,
            num_batched_tokens: 15,
            num_prefill_tokens_computed: 10,
            num_prompt_tokens_cached: 0,
            prefill_kv_computed_tokens: vec![10],
            time_to_first_token_s: vec![0.2.into()],
            inter_token_latency_s: vec![0.03.into(), 0.04.into()],
            finished: vec![finished(FinishReason::Stop, 5)],
            ..Default::default()
        };
        (scheduler, iteration)
    }

    fn render_after_busy_step(prefix: &str) -> String {
        let t = build_telemetry(&config(prefix)).unwrap();
        let (s, i) = busy_step();
        t.instruments.as_ref().unwrap().record_step_for_test(&s, &i);
        render_metrics(&t.registry).unwrap()
    }

    #[test]
    fn every_engine_metric_renders_with_its_type_and_model_label() {
        for prefix in ["vllm:", "kiln_"] {
            let text = render_after_busy_step(prefix);
            let families = [(GAUGES, "gauge"), (COUNTERS, "counter"), (HISTOGRAMS, "histogram")];
            for (names, kind) in families {
                for name in names {
                    let full = crate::stats::family::engine_metric_name(prefix, name);
                    assert!(
                        text.contains(&format!("# TYPE {full} {kind}\n")),
                        "missing `# TYPE {full} {kind}` in\n{text}"
                    );
                    let series = if kind == "histogram" {
                        format!("{full}_bucket")
                    } else {
                        full.clone()
                    };
                    let lines = samples(&text, &series);
                    assert!(!lines.is_empty(), "no samples for {series}");
                    assert!(
                        lines.iter().all(|l| l.contains("model_name=\"smollm2\"")),
                        "{series} without model_name"
                    );
                    // Admission happens before an engine is chosen (vLLM PR #55812).
                    let engine = *name != "admission_rejections_total";
                    assert!(
                        lines.iter().all(|l| l.contains("engine=\"0\"") == engine),
                        "{series}: engine label {engine}"
                    );
                }
            }
            assert!(!text.contains("otel_scope_"), "scope labels leaked");
        }
    }

    #[test]
    fn colon_names_survive_exactly() {
        let text = render_after_busy_step("vllm:");
        assert_eq!(
            value(&text, "vllm:num_requests_running", &[("model_name", "smollm2")]),
            Some(2.0)
        );
        assert_eq!(value(&text, "vllm:kv_cache_usage_perc", &[]), Some(0.5));
        assert_eq!(value(&text, "vllm:gpu_cache_usage_perc", &[]), Some(0.5));
        assert!(text.contains("vllm:time_to_first_token_seconds_bucket{"));
        assert!(text.contains("vllm:prompt_tokens_total{"));
        assert!(!text.contains("vllm_num_requests_running"));
    }

    #[test]
    fn buckets_cache_info_target_info_process_and_semconv() {
        let text = render_after_busy_step("vllm:");
        let ttft = "vllm:time_to_first_token_seconds_bucket";
        assert!(value(&text, ttft, &[("le", "0.001")]).is_some());
        assert!(value(&text, ttft, &[("le", "2560.0")]).is_some());
        assert_eq!(samples(&text, ttft).len(), 23, "22 bounds + +Inf");
        let tokens = "vllm:request_prompt_tokens_bucket";
        assert_eq!(value(&text, tokens, &[("le", "5000.0")]), Some(1.0));
        assert!(value(&text, tokens, &[("le", "10000.0")]).is_none());
        let info = samples(&text, "vllm:cache_config_info");
        assert_eq!(info.len(), 1);
        for label in [
            "block_size=\"16\"",
            "num_gpu_blocks=\"1024\"",
            "num_cpu_blocks=\"256\"",
            "enable_prefix_caching=\"true\"",
            // vLLM's: 1024 blocks of 16 tokens, and how many 8192-token requests they hold.
            "kv_cache_size_tokens=\"16384\"",
            "kv_cache_max_concurrency=\"2.0\"",
        ] {
            assert!(info[0].contains(label), "{label} missing in {}", info[0]);
        }
        assert!(info[0].ends_with(" 1"));
        let target = samples(&text, "target_info");
        assert_eq!(target.len(), 1, "{text}");
        for label in [
            "service_name=\"kiln-test\"",
            concat!("service_version=\"", env!("CARGO_PKG_VERSION"), "\""),
            "service_instance_id=\"instance-1\"",
        ] {
            assert!(target[0].contains(label), "{label} missing in {}", target[0]);
        }
        assert!(text.contains("# TYPE process_resident_memory_bytes gauge"));
        assert!(text.contains("# TYPE process_cpu_seconds_total counter"));
        let genai = "gen_ai_server_request_duration_seconds_count";
        let labels = [("gen_ai_operation_name", "chat"), ("gen_ai_provider_name", "kiln")];
        assert_eq!(value(&text, genai, &labels), Some(1.0));
        assert!(text.contains("# TYPE gen_ai_server_time_to_first_token_seconds histogram"));
        assert!(text.contains("# TYPE gen_ai_server_time_per_output_token_seconds histogram"));
    }

    #[test]
    fn idle_server_already_shows_gauges_and_zero_counters() {
        let t = build_telemetry(&config("vllm:")).unwrap();
        let text = render_metrics(&t.registry).unwrap();
        assert_eq!(value(&text, "vllm:num_requests_waiting", &[]), Some(0.0));
        for reason in ["stop", "length", "abort", "error"] {
            let labels = [("finished_reason", reason)];
            assert_eq!(value(&text, "vllm:request_success_total", &labels), Some(0.0));
        }
        let labels = [("reason", "queue_full")];
        assert_eq!(value(&text, "vllm:admission_rejections_total", &labels), Some(0.0));
    }

    #[test]
    fn disabled_renders_nothing() {
        let cfg = TelemetryConfig {
            enabled: false,
            ..config("vllm:")
        };
        let t = build_telemetry(&cfg).unwrap();
        assert!(t.instruments.is_none() && t.provider.is_none());
        assert_eq!(render_metrics(&t.registry).unwrap(), "");
        t.shutdown().unwrap();
    }

    #[test]
    fn bad_config_is_refused_with_the_key() {
        let err = build_telemetry(&config("vllm-")).err().unwrap();
        assert!(err.to_string().contains("telemetry.engine_prefix"), "{err}");
        let mut cfg = config("kiln_");
        cfg.buckets.ttft = vec![1.0, 1.0];
        let err = build_telemetry(&cfg).err().unwrap();
        assert_eq!(err.to_string(), "telemetry.buckets.ttft is not strictly increasing");
    }
}
