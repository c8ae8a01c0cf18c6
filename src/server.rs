//! Wiring: load the model, start the four actors, serve HTTP.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use actix::{Actor, Addr};
use actix_web::{App, HttpServer, web};
use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};

use crate::api::{self, AppState, ServedModel};
use crate::config::Config;
use crate::engine::health::EngineHealth;
use crate::executor::actor::Supervision;
use crate::executor::model_runner::ModelRunner;
use crate::executor::{Executor, start_executor};
use crate::kv_cache::capacity::context_length;
use crate::kv_cache::device_cache::CacheGeometry;
use crate::lifecycle::{ABORT_FLUSH, Drain, drain_on_signal, spawn_step_watchdog};
use crate::model::chat_template::ChatTemplate;
use crate::model::fetch::{DEFAULT_MODEL_NAME, default_cache_dir, ensure_default_model};
use crate::model::loader::{ModelFiles, open_model};
use crate::model::tokenizer::token_id_bound;
use crate::model::weights::{LoadOptions, build_llama};
use crate::model::{Backend, default_device};
use crate::scheduler::actor::SchedulerActor;
use crate::scheduler::{PreemptionMode, Scheduler, SchedulerConfig};
use crate::stats::actor::{StatsActor, StatsActorConfig};
use crate::stats::exporter::Telemetry;
use crate::stats::exporter::{
    CacheConfigInfo, METRICS_CONTENT_TYPE, TelemetryConfig, build_telemetry_with_readers, render_metrics,
};
use crate::stats::instruments::HistogramBuckets;
use crate::stats::otlp::build_otlp_reader;

/// Sets each accepted connection's kernel send buffer, when configured.
fn send_buffer_setter(bytes: usize) -> impl Fn(&dyn std::any::Any, &mut actix_web::dev::Extensions) + Send + Clone {
    move |connection, _| {
        if bytes == 0 {
            return;
        }
        if let Some(stream) = connection.downcast_ref::<actix_web::rt::net::TcpStream>()
            && let Err(e) = socket2::SockRef::from(stream).set_send_buffer_size(bytes)
        {
            tracing::warn!(error = %e, "could not set a connection's send buffer");
        }
    }
}

/// A model ready to serve: the executor and everything around it.
pub struct PreparedEngine<E: Executor> {
    pub served: ServedModel,
    pub executor: E,
    pub scheduler: SchedulerConfig,
    pub end_of_generation: Vec<u32>,
}

/// A started server.
pub struct RunningServer {
    pub addr: SocketAddr,
    pub server: actix_web::dev::Server,
    /// The separate `/metrics` listener (`telemetry.metrics_listen`), already running.
    pub metrics_addr: Option<SocketAddr>,
    pub scheduler: Addr<SchedulerActor>,
    pub stats: Addr<StatsActor>,
    /// Flushes the final OTLP export on shutdown.
    pub telemetry: Arc<Telemetry>,
    /// Liveness and readiness.
    pub health: Arc<EngineHealth>,
}

/// `kiln serve`: load, start, and serve until stopped. SIGTERM/SIGINT drain and return
/// `Ok`; an engine that dies for good (restarts exhausted, a hung step) returns an error,
/// so the process exits non-zero and its supervisor restarts it.
pub fn run_blocking(config: Config) -> anyhow::Result<()> {
    let started = Instant::now();
    let path = resolve_model_path(&config)?;
    let files = open_model(&path)?;
    let prepared = prepare_model(&config, files)?;
    tracing::info!(seconds = started.elapsed().as_secs_f64(), "model loaded");
    actix_web::rt::System::new().block_on(async move {
        let running = start(&config, prepared).await?;
        tracing::info!("serving on http://{}", running.addr);
        let handle = running.server.handle();
        actix_web::rt::spawn(drain_on_signal(Drain {
            server: handle.clone(),
            health: running.health.clone(),
            scheduler: running.scheduler.clone(),
            grace: Duration::from_secs_f64(config.server.shutdown_grace_period_s),
        }));
        let health = running.health.clone();
        let dead = tokio::select! {
            served = running.server => {
                served.context("http server")?;
                None
            }
            reason = health.wait_dead() => Some(reason),
        };
        if let Some(reason) = dead {
            handle.stop(false).await;
            running.telemetry.shutdown().ok();
            anyhow::bail!("the engine is dead: {reason}");
        }
        tracing::info!("drained; flushing telemetry");
        running.telemetry.shutdown().ok();
        Ok(())
    })
}

/// The configured model path, or the default model (fetched on first use).
pub fn resolve_model_path(config: &Config) -> anyhow::Result<PathBuf> {
    if !config.model.path.is_empty() {
        return Ok(PathBuf::from(&config.model.path));
    }
    let cache = if config.model.cache_dir.is_empty() {
        default_cache_dir()
    } else {
        PathBuf::from(&config.model.cache_dir)
    };
    Ok(ensure_default_model(&cache)?)
}

/// Puts the weights on the device, sizes the KV cache, and builds the executor.
pub fn prepare_model(config: &Config, files: ModelFiles) -> anyhow::Result<PreparedEngine<ModelRunner>> {
    let spinner = ProgressBar::new_spinner().with_message(format!(
        "loading {} ({} layers, hidden {}) onto the device",
        files.name, files.config.num_layers, files.config.hidden_size
    ));
    spinner.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    spinner.enable_steady_tick(Duration::from_millis(200));
    let device = default_device();
    let llama = build_llama::<Backend>(&files.config, files.weights.as_ref(), load_options(config), &device)?;
    spinner.finish_and_clear();

    let sizing = CacheSizing::new(config, &files.config)?;
    let geometry = CacheGeometry {
        num_layers: files.config.num_layers,
        num_blocks: sizing.num_gpu_blocks,
        block_size: config.engine.block_size,
        kv_dim: files.config.kv_dim(),
    };
    tracing::info!(
        num_blocks = sizing.num_gpu_blocks,
        block_size = config.engine.block_size,
        tokens = sizing.num_gpu_blocks * config.engine.block_size,
        mib = (sizing.num_gpu_blocks as u64 * sizing.bytes_per_block) >> 20,
        host_blocks = sizing.num_cpu_blocks,
        "KV cache"
    );
    let served_name = if config.server.served_model_name.is_empty() {
        if config.model.path.is_empty() {
            DEFAULT_MODEL_NAME.to_string()
        } else {
            files.name.clone()
        }
    } else {
        config.server.served_model_name.clone()
    };
    let executor =
        ModelRunner::new(llama, geometry, sizing.num_cpu_blocks).sampling_only_below(token_id_bound(&files.tokenizer));
    prepare_engine(config, files, served_name, executor)
}

fn load_options(config: &Config) -> LoadOptions {
    LoadOptions {
        keep_quantized: LoadOptions::default().keep_quantized && !config.model.dequantize_weights,
    }
}

/// How many KV blocks fit the device budget and the host swap pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheSizing {
    pub num_gpu_blocks: usize,
    pub num_cpu_blocks: usize,
    pub bytes_per_block: u64,
}

impl CacheSizing {
    /// From `engine.kv_cache_memory` (or the override) and `engine.swap_space_gib`, at f32.
    pub fn new(config: &Config, model: &crate::model::config::LlamaConfig) -> anyhow::Result<Self> {
        let e = &config.engine;
        let bytes_per_block = (e.block_size * model.kv_bytes_per_token(4)) as u64;
        let num_gpu_blocks = if e.num_gpu_blocks_override > 0 {
            e.num_gpu_blocks_override
        } else {
            (config.kv_cache_bytes() / bytes_per_block) as usize
        };
        anyhow::ensure!(
            num_gpu_blocks > 0,
            "engine.kv_cache_memory ({}) is smaller than one KV block ({bytes_per_block} bytes)",
            e.kv_cache_memory
        );
        let num_cpu_blocks = (e.swap_space_gib * (1u64 << 30) as f64 / bytes_per_block as f64) as usize;
        Ok(Self {
            num_gpu_blocks,
            num_cpu_blocks,
            bytes_per_block,
        })
    }
}

/// Everything but the weights: shared by the real model and test executors.
pub fn prepare_engine<E: Executor>(
    config: &Config,
    files: ModelFiles,
    served_name: String,
    executor: E,
) -> anyhow::Result<PreparedEngine<E>> {
    let CacheSizing {
        num_gpu_blocks,
        num_cpu_blocks,
        ..
    } = CacheSizing::new(config, &files.config)?;
    let context = context_length(
        config.engine.max_model_len,
        files.config.max_position_embeddings,
        num_gpu_blocks,
        config.engine.block_size,
    )?;
    if context.clamped_to_cache {
        tracing::warn!(
            model_context = files.config.max_position_embeddings,
            cache_tokens = num_gpu_blocks * config.engine.block_size,
            max_model_len = context.max_model_len,
            "the KV cache holds fewer tokens than the model's context: max_model_len is clamped to the \
             cache; raise --kv-cache-memory for longer sequences"
        );
    }
    let max_model_len = context.max_model_len;
    let special = &files.special_tokens;
    let id_bound = token_id_bound(&files.tokenizer);
    let token_text = |id: Option<u32>| id.and_then(|id| files.tokenizer.id_to_token(id)).unwrap_or_default();
    let chat_template = ChatTemplate::new(
        files
            .chat_template
            .as_deref()
            .unwrap_or(crate::model::chat_template::CHATML_TEMPLATE),
        &token_text(special.bos),
        &token_text(special.eos),
    )?;
    let created = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    Ok(PreparedEngine {
        served: ServedModel {
            name: served_name,
            tokenizer: Arc::new(files.tokenizer),
            chat_template: Arc::new(chat_template),
            max_model_len,
            token_id_bound: id_bound,
            created,
        },
        executor,
        scheduler: SchedulerConfig {
            max_num_seqs: config.engine.max_num_seqs,
            max_num_batched_tokens: config.engine.max_num_batched_tokens,
            max_model_len,
            max_waiting: config.engine.max_waiting,
            num_gpu_blocks,
            block_size: config.engine.block_size,
            num_cpu_blocks,
            preemption_mode: if config.engine.preemption_mode == "swap" {
                PreemptionMode::Swap
            } else {
                PreemptionMode::Recompute
            },
            enable_prefix_caching: config.engine.enable_prefix_caching,
            async_scheduling: config.engine.async_scheduling,
        },
        end_of_generation: files.special_tokens.end_of_generation.clone(),
    })
}

/// Starts the stats, executor and scheduler actors and the HTTP server (must run inside
/// an actix system).
pub async fn start<E: Executor>(config: &Config, prepared: PreparedEngine<E>) -> anyhow::Result<RunningServer> {
    let push_readers = match config.otlp().map_err(anyhow::Error::msg)? {
        Some(otlp) => {
            tracing::info!(endpoint = %otlp.endpoint, protocol = otlp.protocol.as_str(), "pushing metrics over OTLP");
            vec![build_otlp_reader(&otlp)?]
        }
        None => Vec::new(),
    };
    let telemetry = build_telemetry_with_readers(
        &TelemetryConfig {
            enabled: config.telemetry.enabled,
            engine_prefix: config.telemetry.engine_prefix.clone(),
            model_name: prepared.served.name.clone(),
            service_name: "kiln".into(),
            service_instance_id: uuid::Uuid::new_v4().to_string(),
            buckets: HistogramBuckets::vllm(prepared.scheduler.max_model_len as u64),
            cache_info: CacheConfigInfo {
                block_size: prepared.scheduler.block_size as u64,
                num_gpu_blocks: prepared.scheduler.num_gpu_blocks as u64,
                num_cpu_blocks: prepared.scheduler.num_cpu_blocks as u64,
                enable_prefix_caching: prepared.scheduler.enable_prefix_caching,
            },
        },
        push_readers,
    )?;
    let stats_config = StatsActorConfig {
        log_interval: Some(Duration::from_secs_f64(config.telemetry.log_interval_s)),
    };
    let stats = StatsActor::new(telemetry.instruments.clone(), stats_config).start();
    let health = Arc::new(EngineHealth::new());
    let executor = start_executor(
        prepared.executor,
        Supervision {
            health: health.clone(),
            max_restarts: config.engine.max_engine_restarts,
        },
    );
    spawn_step_watchdog(health.clone(), Duration::from_secs_f64(config.engine.step_timeout_s));
    let scheduler = Scheduler::new(prepared.scheduler, prepared.end_of_generation);
    let scheduler = SchedulerActor::new(scheduler, executor.recipient(), stats.clone()).start();
    let telemetry = Arc::new(telemetry);
    let state = web::Data::new(AppState {
        model: prepared.served,
        scheduler: scheduler.clone(),
        stats: stats.clone(),
        registry: telemetry.registry.clone(),
        per_request_metrics: config.server.enable_per_request_metrics,
        limits: config.limits.clone(),
        stream_stall_timeout: Duration::from_secs_f64(config.server.stream_stall_timeout_s),
        _telemetry: Arc::clone(&telemetry),
    });
    let body_limit = config.server.max_request_body_bytes;
    let body_timeout = web::Data::new(crate::api::body_deadline::BodyTimeout(Duration::from_secs_f64(
        config.server.request_body_timeout_s,
    )));
    let stats_for_http = stats.clone();
    let health_data = web::Data::from(health.clone());
    // Draining outlasts the grace period by the time the aborted requests' errors need.
    let shutdown_timeout = (Duration::from_secs_f64(config.server.shutdown_grace_period_s) + ABORT_FLUSH).as_secs();
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .app_data(health_data.clone())
            .app_data(crate::api::errors::json_config(body_limit))
            .app_data(web::PayloadConfig::new(body_limit))
            .app_data(body_timeout.clone())
            .configure(api::routes)
            .wrap(actix_web::middleware::from_fn(
                crate::api::load_header::endpoint_load_metrics,
            ))
            .wrap(actix_web::middleware::from_fn(crate::api::body_deadline::body_deadline))
            .wrap(actix_web::middleware::Compress::default())
            .wrap(crate::stats::http_middleware::HttpMetrics::new(stats_for_http.clone()))
    })
    .workers(2)
    // kiln drains on SIGTERM/SIGINT itself (`lifecycle::drain_on_signal`); actix's own
    // handling would stop the whole actix system.
    .disable_signals()
    .shutdown_timeout(shutdown_timeout)
    // A client that half-closes is gone (as uvicorn treats it in front of vLLM): actix then
    // drops the handler, whose choices abort in the engine. Otherwise a non-streaming
    // request whose client left would run to its end, holding its KV blocks.
    .h1_allow_half_closed(false)
    .client_request_timeout(Duration::from_secs_f64(config.server.request_head_timeout_s))
    .on_connect(send_buffer_setter(config.server.send_buffer_bytes))
    .bind((config.server.host.as_str(), config.server.port))
    .with_context(|| format!("binding {}:{}", config.server.host, config.server.port))?;
    let addr = server.addrs().first().copied().context("no bound address")?;
    let metrics_addr = match config.telemetry.metrics_listen.as_str() {
        "" => None,
        listen => Some(start_metrics_listener(listen, telemetry.registry.clone())?),
    };
    health.ready();
    Ok(RunningServer {
        addr,
        server: server.run(),
        metrics_addr,
        scheduler,
        stats,
        telemetry,
        health,
    })
}

/// A second listener that serves only `GET /metrics`, so scraping can stay off the public port.
fn start_metrics_listener(listen: &str, registry: prometheus::Registry) -> anyhow::Result<SocketAddr> {
    let server = HttpServer::new(move || {
        let registry = registry.clone();
        App::new()
            .route(
                "/metrics",
                web::get().to(move || {
                    let registry = registry.clone();
                    async move {
                        match render_metrics(&registry) {
                            Ok(text) => actix_web::HttpResponse::Ok()
                                .content_type(METRICS_CONTENT_TYPE)
                                .body(text),
                            Err(e) => actix_web::HttpResponse::InternalServerError().body(e.to_string()),
                        }
                    }
                }),
            )
            .wrap(actix_web::middleware::Compress::default())
    })
    .workers(1)
    .disable_signals()
    .bind(listen)
    .with_context(|| format!("binding telemetry.metrics_listen {listen}"))?;
    let addr = server.addrs().first().copied().context("no bound metrics address")?;
    actix_web::rt::spawn(server.run());
    tracing::info!("metrics on http://{addr}/metrics");
    Ok(addr)
}
