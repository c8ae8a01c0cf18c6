//! Wiring: load the model, start the four actors, serve HTTP.
//!
//! The public listener is bound before the model loads, so probes get answers (`/health`
//! 200, `/ready` 503 "loading") instead of refused connections while the weights load; the
//! same socket then serves the engine, and connections made in between wait in its backlog.

mod access;
pub mod http_middleware;
mod listeners;
#[cfg(feature = "testing")]
pub mod load_gate;
mod loading;
mod lora;
mod prepare;
pub mod resolve;
mod tls;

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Actor, Addr};
use actix_web::{App, HttpServer, web};
use anyhow::Context as _;

use crate::api::access_log::AccessLogSettings;
use crate::api::worker_contract::WorkerInfo;
use crate::api::{self, AppState, ServedModel};
use crate::config::{Config, CpuAffinity};
use crate::engine::server_health::ServerHealth;
use crate::executor::actor::Supervision;
use crate::executor::model_runner::ModelRunner;
use crate::executor::placement::{CpuShare, cpulist, place_engines};
use crate::executor::pooled::{Pooled, engine_pools};
use crate::executor::{Executor, start_executor};
use crate::lifecycle::{ABORT_FLUSH, Drain, drain_on_signal, spawn_step_watchdog};
use crate::model::loader::open_model;
use crate::scheduler::actor::SchedulerActor;
use crate::scheduler::{Scheduler, SchedulerConfig};
use crate::stats::actor::{StatsActor, StatsActorConfig};
use crate::stats::buckets::HistogramBuckets;
use crate::stats::custom_buckets::CustomHistogramBuckets;
use crate::stats::export_health::ExportOutcomes;
use crate::stats::exporter::Telemetry;
use crate::stats::exporter::{CacheConfigInfo, TelemetryConfig, build_telemetry_with_readers, resource};
use crate::stats::otlp_push::build_otlp_reader;
use crate::stats::span_exports::{SpanExportCounters, register_span_export_counters};
use crate::traces::Tracer;
use access::Access;
use listeners::{bind_public, listen, scheme, send_buffer_setter, start_metrics_listener};
pub use prepare::{CacheSizing, prepare_engine, prepare_model, resolve_model_path};

/// A model ready to serve: the executor and everything around it.
pub struct PreparedEngine<E: Executor> {
    pub served: ServedModel,
    /// Engine 0's executor.
    pub executor: E,
    /// Engines 1.. of a data-parallel server (`--data-parallel-size`), each with its own KV
    /// cache and the same weights; empty with one engine.
    pub other_executors: Vec<E>,
    pub scheduler: SchedulerConfig,
    pub end_of_generation: Vec<u32>,
    /// Loads adapters at run time (`--allow-runtime-lora-updating`); `None` when off.
    pub lora_loader: Option<crate::api::lora_admin::LoraLoader>,
    /// What each engine's executor memory holds, for `kiln_memory_bytes` (zeros for test
    /// executors); the weights are shared, so engine 0's count stands for them all.
    pub memory: Vec<Arc<crate::engine::memory::MemoryFootprint>>,
}

/// A started server.
pub struct RunningServer {
    pub addr: SocketAddr,
    pub server: actix_web::dev::Server,
    /// The separate `/metrics` listener (`telemetry.metrics_listen`), already running.
    pub metrics_addr: Option<SocketAddr>,
    /// Engine 0's scheduler.
    pub scheduler: Addr<SchedulerActor>,
    /// Every engine's scheduler, by index.
    pub schedulers: Vec<Addr<SchedulerActor>>,
    pub stats: Addr<StatsActor>,
    /// Flushes the final OTLP export on shutdown.
    pub telemetry: Arc<Telemetry>,
    /// Liveness and readiness: every engine's health.
    pub health: Arc<ServerHealth>,
    /// Exports request spans; `None` when tracing is off.
    pub tracer: Option<Arc<Tracer>>,
}

/// Flushes the final metric push and the queued spans (each bounded in time).
pub fn shutdown_telemetry(telemetry: &Telemetry, tracer: Option<&Arc<Tracer>>) {
    telemetry.shutdown().ok();
    if let Some(tracer) = tracer {
        tracer.shutdown(SPAN_FLUSH_TIMEOUT);
    }
}

/// How long queued spans get to reach the collector at exit.
const SPAN_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// `kiln serve`: bind, load while answering probes, start, and serve until stopped.
/// SIGTERM/SIGINT drain and return `Ok`; once every engine has died for good (restarts
/// exhausted, a hung step) it returns an error, so the process exits non-zero and its
/// supervisor restarts it. One engine of several dying leaves the others serving.
pub fn run_blocking(config: Config) -> anyhow::Result<()> {
    let listener = bind_public(&config)?;
    let access = Access::from_config(&config)?;
    access.log();
    actix_web::rt::System::new().block_on(async move {
        let health = Arc::new(ServerHealth::new(config.engine.data_parallel_size));
        let loading = loading::serve_while_loading(listener.try_clone()?, health.clone(), &access)?;
        tracing::info!(
            "loading; probes answered on {}://{}",
            scheme(&access.tls),
            listener.local_addr()?
        );
        let prepared = {
            let config = config.clone();
            actix_web::rt::task::spawn_blocking(move || load(&config))
                .await
                .context("the loading thread panicked")?
        };
        loading.stop(true).await;
        let prepared = prepared?;
        let served_scheme = scheme(&access.tls);
        let running = start_on(&config, prepared, listener, health, access).await?;
        tracing::info!("serving on {served_scheme}://{}", running.addr);
        let handle = running.server.handle();
        actix_web::rt::spawn(drain_on_signal(Drain {
            server: handle.clone(),
            health: running.health.clone(),
            schedulers: running.schedulers.clone(),
            grace: Duration::from_secs_f64(config.server.shutdown_grace_period_s),
        }));
        let health = running.health.clone();
        let dead = tokio::select! {
            served = running.server => {
                served.context("http server")?;
                None
            }
            reason = health.wait_all_dead() => Some(reason),
        };
        if let Some(reason) = dead {
            handle.stop(false).await;
            shutdown_telemetry(&running.telemetry, running.tracer.as_ref());
            anyhow::bail!("the engine is dead: {reason}");
        }
        tracing::info!("drained; flushing telemetry");
        shutdown_telemetry(&running.telemetry, running.tracer.as_ref());
        Ok(())
    })
}

/// Finds (fetching on first use), opens and prepares the model: the slow part of startup.
fn load(config: &Config) -> anyhow::Result<PreparedEngine<ModelRunner>> {
    let started = Instant::now();
    #[cfg(feature = "testing")]
    load_gate::hold_load_while_gated();
    let path = resolve_model_path(config)?;
    let prepared = prepare_model(config, open_model(&path)?)?;
    tracing::info!(seconds = started.elapsed().as_secs_f64(), "model loaded");
    Ok(prepared)
}

/// Starts the stats, executor and scheduler actors and the HTTP server on the address the
/// config names (must run inside an actix system).
pub async fn start<E: Executor>(config: &Config, prepared: PreparedEngine<E>) -> anyhow::Result<RunningServer> {
    let listener = bind_public(config)?;
    let access = Access::from_config(config)?;
    let health = Arc::new(ServerHealth::new(config.engine.data_parallel_size));
    start_on(config, prepared, listener, health, access).await
}

/// Each engine's CPU share (see `executor::placement`), logged.
fn engine_cpus(engines: usize, affinity: CpuAffinity) -> anyhow::Result<Vec<Option<CpuShare>>> {
    let shares = place_engines(engines, affinity).context("placing the engines on the CPUs")?;
    for (engine, share) in shares.iter().enumerate() {
        match share {
            Some(share) => tracing::info!(
                engine,
                numa_node = share.node,
                cpus = %cpulist::format(&share.cpus),
                "engine threads pinned"
            ),
            None if engines > 1 => tracing::info!(engine, "engine threads not pinned"),
            None => {}
        }
    }
    Ok(shares)
}

/// Starts the actors and serves HTTP on `listener` guarded by `access` (built once, before
/// the model loads); `health` (one per engine) is turned ready once serving.
async fn start_on<E: Executor>(
    config: &Config,
    prepared: PreparedEngine<E>,
    listener: TcpListener,
    health: Arc<ServerHealth>,
    access: Access,
) -> anyhow::Result<RunningServer> {
    let metric_exports = Arc::new(ExportOutcomes::default());
    let push_readers = match resolve::otlp_push(&config.telemetry)? {
        Some(otlp) => {
            tracing::info!(endpoint = %otlp.endpoint, protocol = otlp.protocol.as_str(), "pushing metrics over OTLP");
            vec![build_otlp_reader(&otlp, metric_exports.clone())?]
        }
        None => Vec::new(),
    };
    let telemetry_config = TelemetryConfig {
        enabled: config.telemetry.enabled,
        engine_prefix: config.telemetry.engine_prefix.clone(),
        model_name: prepared.served.name.clone(),
        service_name: "kiln".into(),
        service_instance_id: uuid::Uuid::new_v4().to_string(),
        // Validated with the configuration.
        buckets: CustomHistogramBuckets::parse(&config.telemetry.custom_histogram_buckets)?
            .apply(HistogramBuckets::vllm(prepared.scheduler.max_model_len as u64)),
        cache_info: CacheConfigInfo {
            block_size: prepared.scheduler.block_size as u64,
            num_gpu_blocks: prepared.scheduler.num_gpu_blocks as u64,
            num_cpu_blocks: prepared.scheduler.num_cpu_blocks as u64,
            enable_prefix_caching: prepared.scheduler.enable_prefix_caching,
            max_model_len: prepared.scheduler.max_model_len as u64,
            cache_dtype: config.engine.kv_cache_dtype.name().to_owned(),
        },
        kv_cache_metrics: prepared.scheduler.kv_block_metrics_sample > 0.0,
        mfu_metrics: prepared.scheduler.step_cost.is_some(),
        push_histograms: resolve::push_histograms(&config.telemetry, |name| std::env::var(name).ok())?,
        engines: 1 + prepared.other_executors.len(),
    };
    let telemetry = build_telemetry_with_readers(&telemetry_config, push_readers)?;
    telemetry.count_otlp_metric_exports(metric_exports);
    let engines = 1 + prepared.other_executors.len();
    anyhow::ensure!(
        engines == config.engine.data_parallel_size,
        "engine.data_parallel_size is {} but {engines} executor(s) were prepared",
        config.engine.data_parallel_size
    );
    anyhow::ensure!(health.len() == engines, "one health per engine");
    crate::stats::engine_health::register_engine_health(&telemetry, &config.telemetry.engine_prefix, health.engines());
    crate::stats::memory::register_memory(&telemetry, &prepared.memory, crate::model::DEVICE_NAME);
    let tracer = start_tracer(config, &telemetry_config, &telemetry)?;
    let stats_config = StatsActorConfig {
        log_interval: Some(Duration::from_secs_f64(config.telemetry.log_interval_s)),
    };
    let stats = StatsActor::new(telemetry.instruments.clone(), stats_config).start();
    for (index, engine) in health.engines().iter().enumerate() {
        spawn_step_watchdog(
            index,
            engine.clone(),
            Duration::from_secs_f64(config.engine.step_timeout_s),
        );
    }
    let (cache_blocks, hash_algo) = (
        prepared.scheduler.num_gpu_blocks,
        prepared.scheduler.prefix_hasher.algo(),
    );
    let executors: Vec<E> = std::iter::once(prepared.executor)
        .chain(prepared.other_executors)
        .collect();
    let cpu_shares = engine_cpus(executors.len(), config.engine.cpu_affinity)?;
    let pools = engine_pools(&cpu_shares).context("starting the engines' thread pools")?;
    let mut schedulers = Vec::with_capacity(executors.len());
    for (index, (executor, pool)) in executors.into_iter().zip(pools).enumerate() {
        let mut executor = Pooled::new(executor, pool);
        if cpu_shares[index].is_some() {
            executor.allocate_cache_on_pool();
        }
        let executor = start_executor(
            executor,
            Supervision {
                health: health.engine(index).clone(),
                max_restarts: config.engine.max_engine_restarts,
            },
        );
        let mut scheduler = Scheduler::new(prepared.scheduler.clone(), prepared.end_of_generation.clone());
        if config.lora.enable_lora {
            scheduler.serve_loras(prepared.served.adapters.list().into_iter().map(|a| (a.id, a.name)));
        }
        let mut scheduler = SchedulerActor::new(scheduler, executor.recipient(), stats.clone()).as_engine(index);
        if config.kv_events.publishes() {
            let publisher = crate::kv_events::start_publisher(&config.kv_events, index as u32)?;
            scheduler = scheduler.with_kv_events(publisher);
        }
        schedulers.push(scheduler.start());
    }
    let scheduler = schedulers[0].clone();
    let telemetry = Arc::new(telemetry);
    let state = web::Data::new(AppState {
        model: prepared.served,
        engine: crate::api::engine_handle::EngineHandle::data_parallel(schedulers.clone())
            .with_health(health.engines().to_vec()),
        stats: stats.clone(),
        registry: telemetry.registry.clone(),
        exemplars: telemetry.exemplars.clone(),
        per_request_metrics: config.server.enable_per_request_metrics,
        limits: config.limits.clone(),
        stream_stall_timeout: Duration::from_secs_f64(config.server.stream_stall_timeout_s),
        tracer: tracer.clone(),
        _telemetry: Arc::clone(&telemetry),
    });
    let worker_info = web::Data::new(WorkerInfo {
        block_size: config.engine.block_size,
        num_gpu_blocks: cache_blocks,
        max_num_seqs: config.engine.max_num_seqs,
        max_num_batched_tokens: config.engine.max_num_batched_tokens,
        max_waiting: config.engine.max_waiting,
        enable_prefix_caching: config.engine.enable_prefix_caching,
        prefix_caching_hash_algo: hash_algo.name(),
        kv_cache_dtype: config.engine.kv_cache_dtype.resolved().name(),
        kv_events_endpoint: config.kv_events.publishes().then(|| config.kv_events.endpoint.clone()),
        engine_cpus: cpu_shares,
    });
    let body_limit = config.server.max_request_body_bytes;
    let body_timeout = web::Data::new(crate::api::body_deadline::BodyTimeout(Duration::from_secs_f64(
        config.server.request_body_timeout_s,
    )));
    let lora_loader = prepared.lora_loader.map(web::Data::new);
    let stats_for_http = stats.clone();
    let health_data = web::Data::from(health.clone());
    let access_log = web::Data::new(AccessLogSettings {
        probes: config.telemetry.access_log_probes,
    });
    let keys = access.keys.clone();
    let cors = access.cors.clone();
    let metrics_here = config.telemetry.metrics_listen.is_empty();
    let tokenizer_info = config.server.enable_tokenizer_info_endpoint;
    // Draining outlasts the grace period by the time the aborted requests' errors need.
    let shutdown_timeout = (Duration::from_secs_f64(config.server.shutdown_grace_period_s) + ABORT_FLUSH).as_secs();
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .app_data(health_data.clone())
            .app_data(access_log.clone())
            .app_data(crate::api::errors::json_config(body_limit))
            .app_data(web::PayloadConfig::new(body_limit))
            .app_data(body_timeout.clone())
            .app_data(keys.clone())
            .app_data(worker_info.clone())
            .configure(|cfg| {
                if let Some(loader) = &lora_loader {
                    cfg.app_data(loader.clone());
                    api::lora_admin::routes(cfg);
                }
            })
            .configure(api::routes(metrics_here, tokenizer_info))
            .wrap(actix_web::middleware::from_fn(
                crate::api::load_header::endpoint_load_metrics,
            ))
            .wrap(actix_web::middleware::from_fn(crate::api::body_deadline::body_deadline))
            .wrap(actix_web::middleware::from_fn(crate::api::auth::require_api_key))
            .wrap(actix_web::middleware::Compress::default())
            .wrap(actix_web::middleware::from_fn(crate::api::access_log::access_log))
            .wrap(http_middleware::HttpMetrics::new(stats_for_http.clone()))
            .wrap(crate::api::cors::cors(&cors))
    })
    .workers(config.server.http_workers())
    // kiln drains on SIGTERM/SIGINT itself (`lifecycle::drain_on_signal`); actix's own
    // handling would stop the whole actix system.
    .disable_signals()
    .shutdown_timeout(shutdown_timeout)
    // A client that half-closes is gone (as uvicorn treats it in front of vLLM): actix then
    // drops the handler, whose choices abort in the engine. Otherwise a non-streaming
    // request whose client left would run to its end, holding its KV blocks.
    .h1_allow_half_closed(false)
    .client_request_timeout(Duration::from_secs_f64(config.server.request_head_timeout_s))
    .on_connect(send_buffer_setter(config.server.send_buffer_bytes));
    let server = listen(server, listener, &access.tls).context("serving the public listener")?;
    let addr = server.addrs().first().copied().context("no bound address")?;
    let metrics_addr = match config.telemetry.metrics_listen.as_str() {
        "" => None,
        listen_on => Some(start_metrics_listener(
            listen_on,
            telemetry.registry.clone(),
            telemetry.exemplars.clone(),
            access.keys.clone(),
            &access.tls,
        )?),
    };
    health.ready();
    Ok(RunningServer {
        addr,
        server: server.run(),
        metrics_addr,
        scheduler,
        schedulers,
        stats,
        telemetry,
        health,
        tracer,
    })
}

/// The span exporter when a traces endpoint is configured (flag, config or `OTEL_*`), with
/// its export-health counters on the meter; a bad setting stops startup.
fn start_tracer(
    config: &Config,
    telemetry_config: &TelemetryConfig,
    telemetry: &Telemetry,
) -> anyhow::Result<Option<Arc<Tracer>>> {
    let counters = Arc::new(SpanExportCounters::default());
    register_span_export_counters(telemetry, &counters);
    let Some(traces) = resolve::traces(&config.telemetry, |name| std::env::var(name).ok())? else {
        return Ok(None);
    };
    tracing::info!(endpoint = %traces.otlp.endpoint, protocol = traces.otlp.protocol.as_str(),
        sampler = ?traces.sampler, "exporting request spans over OTLP");
    let tracer = Tracer::start(&traces, resource(telemetry_config), counters)?;
    Ok(Some(Arc::new(tracer)))
}
