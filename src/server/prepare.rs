//! From model files to a [`PreparedEngine`]: weights on the device, the KV cache sized, the
//! context length fitted to the cache, the chat template compiled.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use indicatif::{ProgressBar, ProgressStyle};

use super::PreparedEngine;
use crate::api::ServedModel;
use crate::api::adapter_catalog::AdapterCatalog;
use crate::api::lora_admin::LoraLoader;
use crate::api::tokenizer_info::{TokenizerConfigSource, tokenizer_config};
use crate::config::{Activations, Config};
use crate::executor::Executor;
use crate::executor::model_runner::ModelRunner;
use crate::grammar::{GrammarCompiler, GrammarLimits, VocabularySpec, token_env};
use crate::kernels::KernelPath;
use crate::kernels::dispatch::{int8_kernel_name, int8_vnni_on};
use crate::kernels::matmul::INT8_MIN_TOKENS;
use crate::kv_cache::block::hash::{BlockHasher, PrefixCachingHashAlgo};
use crate::kv_cache::capacity::context_length;
use crate::kv_cache::device_cache::{CacheGeometry, storage_dtype};
use crate::model::chat_template::source::choose_chat_template;
use crate::model::chat_template::{ChatTemplate, RenderLimits};
use crate::model::fetch::{DEFAULT_MODEL_NAME, default_cache_dir, ensure_default_model, ensure_model};
use crate::model::known_models::{KnownModel, known_model};
use crate::model::loader::ModelFiles;
use crate::model::weights::{LoadOptions, build_model};
use crate::model::{Backend, engine_device, engine_device_count};
use crate::scheduler::step::time::StepTimeCoefficients;
use crate::scheduler::{SchedulerConfig, StepSharing};
use crate::stats::step_cost::StepCostModel;
use crate::tokenizer::{adds_bos, token_id_bound};

/// The configured model path, a known model's short name, or the default model (a known
/// model is fetched into the cache on first use).
pub fn resolve_model_path(config: &Config) -> anyhow::Result<PathBuf> {
    let cache = || {
        if config.model.cache_dir.is_empty() {
            default_cache_dir()
        } else {
            PathBuf::from(&config.model.cache_dir)
        }
    };
    if let Some(known) = named_model(config) {
        return Ok(ensure_model(known, &cache())?);
    }
    if !config.model.path.is_empty() {
        return Ok(PathBuf::from(&config.model.path));
    }
    Ok(ensure_default_model(&cache())?)
}

/// The known model `model.path` names by its short name; a file or folder of that name wins.
fn named_model(config: &Config) -> Option<&'static KnownModel> {
    let path = &config.model.path;
    if path.is_empty() || Path::new(path).exists() {
        return None;
    }
    known_model(path)
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
    let activations = select_cpu_kernels(config)?;
    check_engine_devices(config.engine.data_parallel_size)?;
    let mut llama = build_model::<Backend>(
        &files.config,
        files.weights.as_ref(),
        load_options(config),
        &engine_device(0),
    )?;
    spinner.finish_and_clear();

    let sizing = CacheSizing::new(config, &files.config)?;
    let kv_dtype = storage_dtype(config.engine.kv_cache_dtype);
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
        dtype = config.engine.kv_cache_dtype.resolved().name(),
        "KV cache"
    );
    let served_name = if config.server.served_model_name.is_empty() {
        match named_model(config) {
            Some(known) => known.served_name.to_string(),
            None if config.model.path.is_empty() => DEFAULT_MODEL_NAME.to_string(),
            None => files.name.clone(),
        }
    } else {
        config.server.served_model_name.clone()
    };
    if served_name_is_adapter(config, &served_name) {
        anyhow::bail!("a LoRA adapter is named {served_name}, the served model's name");
    }
    llama.adapters = super::lora::load_adapters(&config.lora, &files.config, &served_name)?;
    // Each engine its own runner and KV cache, on its own device.
    let runner = |model| {
        ModelRunner::new(model, geometry, kv_dtype, sizing.num_cpu_blocks)
            .computing_activations_in(activations)
            .sampling_only_below(token_id_bound(&files.tokenizer))
            .ending_generation_on(files.special_tokens.end_of_generation.clone())
    };
    let others: Vec<ModelRunner> = (1..config.engine.data_parallel_size)
        .map(|index| engine_model(config, &files, &llama, index).map(&runner))
        .collect::<anyhow::Result<_>>()?;
    let executor = runner(llama);
    let memory = std::iter::once(&executor)
        .chain(&others)
        .map(ModelRunner::memory)
        .collect();
    let mut prepared = prepare_engine(config, files, served_name, executor)?;
    prepared.other_executors = others;
    prepared.memory = memory;
    Ok(prepared)
}

/// Refuses more engines than devices: with CUDA one device each (the count is what CUDA sees,
/// after `CUDA_VISIBLE_DEVICES`); on the CPU any number share it.
fn check_engine_devices(engines: usize) -> anyhow::Result<()> {
    if let Some(devices) = engine_device_count() {
        anyhow::ensure!(
            engines <= devices,
            "--data-parallel-size {engines} needs a CUDA device per engine, and {devices} are visible"
        );
        for index in 0..engines {
            tracing::info!(engine = index, device = ?engine_device(index), "engine device");
        }
    }
    Ok(())
}

/// Engine `index`'s model. On the CPU a clone of the first engine's: the weights are shared
/// (the model's tensors and packed matrices are reference-counted, so a clone copies no
/// weight). With CUDA the weights are loaded again onto the engine's own device.
fn engine_model(
    config: &Config,
    files: &ModelFiles,
    first: &crate::model::transformer::Model<Backend>,
    index: usize,
) -> anyhow::Result<crate::model::transformer::Model<Backend>> {
    if engine_device_count().is_none() {
        return Ok(first.clone());
    }
    let mut model = build_model::<Backend>(
        &files.config,
        files.weights.as_ref(),
        load_options(config),
        &engine_device(index),
    )?;
    model.adapters = first.adapters.clone();
    Ok(model)
}

/// Whether an adapter takes the served model's own name (requests could not tell them apart).
fn served_name_is_adapter(config: &Config, served_name: &str) -> bool {
    config.lora.lora_modules.iter().any(|m| m.name == served_name)
}

/// Sets the CPU kernels' instruction set and activations for the process, logs them with
/// what the CPU has, and returns the activations the model runs in.
fn select_cpu_kernels(config: &Config) -> anyhow::Result<Activations> {
    let path = KernelPath::chosen(config.engine.cpu_kernels).map_err(anyhow::Error::msg)?;
    crate::kernels::dispatch::set_active(path);
    let available: Vec<&str> = KernelPath::ALL
        .into_iter()
        .filter(|p| p.available())
        .map(KernelPath::name)
        .collect();
    tracing::info!(path = path.name(), ?available, "CPU kernels");
    let activations = cpu_activations(config.engine.cpu_activations, path);
    crate::kernels::dispatch::set_activations(activations);
    Ok(activations)
}

/// The activations the CPU kernels run in: int8 only where its fast kernel runs (AVX-512
/// VNNI on the AVX-512 path). Elsewhere int8 would run the portable integer kernel, the
/// reference: 30-40x slower than the f32 AVX2 kernels (docs/08, "Opt-in 8-bit activations"),
/// so the model stays in f32 with a warning.
fn cpu_activations(requested: Activations, path: KernelPath) -> Activations {
    match requested {
        Activations::F32 => {
            tracing::info!("CPU activations: f32");
            Activations::F32
        }
        Activations::Int8 if !int8_vnni_on(path) => {
            tracing::warn!(
                kernels = path.name(),
                "--cpu-activations int8 needs AVX-512 VNNI on the avx512 kernels; running f32 activations"
            );
            Activations::F32
        }
        Activations::Int8 => {
            tracing::info!(
                kernel = int8_kernel_name(path),
                min_tokens_a_step = INT8_MIN_TOKENS,
                "CPU activations: int8"
            );
            Activations::Int8
        }
    }
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
    /// One engine's share, at the size of `engine.kv_cache_dtype` (a 16-bit cache holds twice
    /// the blocks of an f32 one): `engine.kv_cache_memory` and `engine.swap_space_gib` are the
    /// server's budgets, split evenly between the `data_parallel_size` engines (on a CPU they
    /// share one memory); `num_gpu_blocks_override` is per engine, as vLLM's.
    pub fn new(config: &Config, model: &crate::model::config::ModelConfig) -> anyhow::Result<Self> {
        let e = &config.engine;
        let engines = e.data_parallel_size.max(1) as u64;
        let bytes_per_block = (e.block_size * model.kv_bytes_per_token(e.kv_cache_dtype.bytes())) as u64;
        let num_gpu_blocks = if e.num_gpu_blocks_override > 0 {
            e.num_gpu_blocks_override
        } else {
            (config.kv_cache_bytes()? / engines / bytes_per_block) as usize
        };
        anyhow::ensure!(
            num_gpu_blocks > 0,
            "engine.kv_cache_memory ({}) is smaller than one KV block ({bytes_per_block} bytes)",
            e.kv_cache_memory
        );
        let num_cpu_blocks =
            (e.swap_space_gib * (1u64 << 30) as f64 / engines as f64 / bytes_per_block as f64) as usize;
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
    let template_source = choose_chat_template(&config.model.chat_template, files.chat_template.as_deref())?;
    let chat_template = ChatTemplate::new(&template_source, &token_text(special.bos), &token_text(special.eos))?
        .with_limits(RenderLimits::for_prompt_bytes(config.limits.max_prompt_bytes));
    let created = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let step_cost = config
        .telemetry
        .enable_mfu_metrics
        .then(|| step_cost_model(config, &files));
    let tokenizer_config = tokenizer_config(&TokenizerConfigSource {
        tokenizer: &files.tokenizer,
        bos: special.bos,
        eos: special.eos,
        add_bos: adds_bos(&files.tokenizer),
        chat_template: &template_source,
        max_model_len,
    });
    let tokenizer = Arc::new(files.tokenizer);
    let grammars = grammar_compiler(config, &tokenizer, files.config.vocab_size, &special.end_of_generation);
    Ok(PreparedEngine {
        served: ServedModel {
            name: served_name,
            tokenizer,
            chat_template: Arc::new(chat_template),
            max_model_len,
            token_id_bound: id_bound,
            created,
            grammars,
            tool_parser: config
                .model
                .tool_call_parser
                .filter(|_| config.model.enable_auto_tool_choice),
            tokenizer_config: Arc::new(tokenizer_config),
            adapters: Arc::new(AdapterCatalog::new(super::lora::served_adapters(&config.lora))),
        },
        executor,
        other_executors: Vec::new(),
        scheduler: SchedulerConfig {
            max_num_seqs: config.engine.max_num_seqs,
            max_num_batched_tokens: config.engine.max_num_batched_tokens,
            max_model_len,
            max_waiting: config.engine.max_waiting,
            num_gpu_blocks,
            block_size: config.engine.block_size,
            num_cpu_blocks,
            preemption_mode: config.engine.preemption_mode,
            enable_prefix_caching: config.engine.enable_prefix_caching,
            prefix_hasher: prefix_hasher(config),
            async_scheduling: config.engine.async_scheduling,
            kv_block_metrics_sample: if config.telemetry.kv_cache_metrics {
                config.telemetry.kv_cache_metrics_sample
            } else {
                0.0
            },
            step_cost,
            sharing: StepSharing {
                max_step: config.scheduler.max_step(),
                max_num_partial_prefills: config.scheduler.max_num_partial_prefills,
                max_long_partial_prefills: config.scheduler.max_long_partial_prefills,
                long_prefill_token_threshold: config.scheduler.long_prefill_threshold(max_model_len),
                step_time_prior: StepTimeCoefficients::prior_for(&files.config),
                learn_step_time: true,
            },
            max_loras: config.lora.max_loras,
        },
        end_of_generation: files.special_tokens.end_of_generation.clone(),
        lora_loader: config.lora.allow_runtime_lora_updating.then(|| {
            LoraLoader::new(
                files.config.clone(),
                config.lora.max_lora_rank,
                config.lora.cpu_loras(),
                config.lora.lora_modules.len() as u32 + 1,
            )
        }),
        memory: vec![Arc::default()],
    })
}

/// The compiler of output constraints over the served vocabulary; `None` (logged) when the
/// vocabulary cannot be mapped to bytes, so constrained requests get 400 and the rest run.
fn grammar_compiler(
    config: &Config,
    tokenizer: &Arc<tokenizers::Tokenizer>,
    vocab_size: usize,
    end_tokens: &[u32],
) -> Option<Arc<GrammarCompiler>> {
    let spec = VocabularySpec {
        vocab_size,
        end_tokens: end_tokens.to_vec(),
    };
    let l = &config.limits;
    let limits = GrammarLimits {
        max_source_bytes: l.max_structured_output_bytes,
        compile_timeout: Duration::from_secs_f64(l.grammar_compile_timeout_s),
        cache_entries: l.grammar_cache_size,
        ..GrammarLimits::default()
    };
    match token_env(Arc::clone(tokenizer), &spec).and_then(|env| GrammarCompiler::new(&env, limits)) {
        Ok(compiler) => Some(Arc::new(compiler)),
        Err(error) => {
            tracing::warn!(%error, "structured outputs are off for this model");
            None
        }
    }
}

/// The step-cost model of `--enable-mfu-metrics`: weights counted as the executor holds them
/// (the GGUF's size when it multiplies quantised blocks, 4 bytes a parameter otherwise).
fn step_cost_model(config: &Config, files: &ModelFiles) -> StepCostModel {
    let weight_bytes = match std::fs::metadata(files.weights.path()) {
        Ok(m) if m.is_file() && !config.model.dequantize_weights => m.len() as f64,
        _ => 4.0 * StepCostModel::parameters(&files.config),
    };
    StepCostModel::new(&files.config, weight_bytes, 4)
}

/// The prefix cache's block hash: the configured one, else vLLM's `sha256_cbor` when KV
/// events are published (routers and indexers recompute vLLM's hashes from token ids), else
/// kiln's own. Seeded by `PYTHONHASHSEED` as vLLM is.
fn prefix_hasher(config: &Config) -> BlockHasher {
    let algo = config
        .engine
        .prefix_caching_hash_algo
        .resolved(config.kv_events.enable_kv_cache_events);
    let seed = std::env::var("PYTHONHASHSEED").ok();
    if seed.is_none() && algo != PrefixCachingHashAlgo::Kiln {
        tracing::warn!(
            ?algo,
            "PYTHONHASHSEED is not set: block hashes are random per process (as vLLM's), so no \
             router can recompute them; set it to the same value on every replica and router"
        );
    }
    BlockHasher::new(algo, seed.as_deref())
}
