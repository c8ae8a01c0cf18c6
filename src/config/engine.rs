//! `[engine]`: the KV cache, the batch, preemption, supervision and the CPU kernels.

use serde::{Deserialize, Serialize};

use super::bytes::parse_bytes;
use super::choices::{Activations, CpuAffinity, CpuKernels, KvCacheDtype, PreemptionMode, PrefixCachingHashAlgo};
use super::{ConfigError, invalid};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
#[command(next_help_heading = "Engine")]
pub struct EngineConfig {
    /// Tokens per KV-cache block (a power of two).
    #[arg(long, env = "KILN_BLOCK_SIZE")]
    pub block_size: usize,
    /// Memory for the KV cache, e.g. 1GiB; sets the number of blocks (vLLM's
    /// --kv-cache-memory-bytes is the same flag).
    #[arg(long, env = "KILN_KV_CACHE_MEMORY", visible_alias = "kv-cache-memory-bytes")]
    pub kv_cache_memory: String,
    /// How K and V are stored: auto (float16), bfloat16, float16 (half of float32's memory) or float32.
    #[arg(long, env = "KILN_KV_CACHE_DTYPE", value_enum)]
    pub kv_cache_dtype: KvCacheDtype,
    /// Use exactly this many KV blocks per engine (0: derive from --kv-cache-memory).
    #[arg(long, env = "KILN_NUM_GPU_BLOCKS_OVERRIDE")]
    pub num_gpu_blocks_override: usize,
    /// Engines behind the one API server (vLLM's data parallelism): each with its own
    /// scheduler, executor thread, KV cache and share of the CPU cores; the weights are shared.
    /// vLLM's `-dp N` is accepted too (`cli::vllm_short_flags`).
    #[arg(long, env = "KILN_DATA_PARALLEL_SIZE")]
    pub data_parallel_size: usize,
    /// With several engines: auto pins each engine's thread pool to its share of the CPUs
    /// (one engine per NUMA node where there are several), off leaves the threads unpinned.
    #[arg(long, env = "KILN_CPU_AFFINITY", value_enum)]
    pub cpu_affinity: CpuAffinity,
    /// Most sequences in one batch.
    #[arg(long, env = "KILN_MAX_NUM_SEQS")]
    pub max_num_seqs: usize,
    /// Most tokens (prefill + decode) in one step; long prompts are prefilled in chunks.
    #[arg(long, env = "KILN_MAX_NUM_BATCHED_TOKENS")]
    pub max_num_batched_tokens: usize,
    /// Longest prompt + completion (0: the model's context length).
    #[arg(long, env = "KILN_MAX_MODEL_LEN")]
    pub max_model_len: usize,
    /// Requests allowed to wait before new ones get 429.
    #[arg(long, env = "KILN_MAX_WAITING")]
    pub max_waiting: usize,
    /// What happens to a running request when KV blocks run out.
    #[arg(long, env = "KILN_PREEMPTION_MODE", value_enum)]
    pub preemption_mode: PreemptionMode,
    /// Host memory in GiB for the swap pool (preemption mode swap).
    #[arg(long = "swap-space", env = "KILN_SWAP_SPACE", value_name = "GIB")]
    pub swap_space_gib: f64,
    /// Reuse the KV blocks of prompts that start like an earlier one: bare, or `=true` /
    /// `=false` (default true, as vLLM v1: its cost without reuse is within noise).
    #[arg(long, env = "KILN_ENABLE_PREFIX_CACHING", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub enable_prefix_caching: bool,
    /// The prefix cache's block hash: sha256_cbor (vLLM's, seeded by PYTHONHASHSEED),
    /// sha256_cbor_64bit, kiln, or auto (sha256_cbor with KV events, so that routers can
    /// recompute it; else kiln).
    #[arg(long, env = "KILN_PREFIX_CACHING_HASH_ALGO", value_enum)]
    pub prefix_caching_hash_algo: PrefixCachingHashAlgo,
    /// Schedule each step while the one before runs, so the executor never waits for the
    /// scheduler (true or false; default true).
    #[arg(long, env = "KILN_ASYNC_SCHEDULING", action = clap::ArgAction::Set)]
    pub async_scheduling: bool,
    /// Executor restarts (after a panic) allowed without a successful step in between; one
    /// more marks the engine dead and kiln exits non-zero.
    #[arg(long, env = "KILN_MAX_ENGINE_RESTARTS")]
    pub max_engine_restarts: u32,
    /// Seconds one engine step may run before kiln declares it hung and exits (0: never).
    #[arg(long = "step-timeout", env = "KILN_STEP_TIMEOUT", value_name = "SECS")]
    pub step_timeout_s: f64,
    /// CPU kernels: auto is the best this CPU runs, detected at start.
    #[arg(long, env = "KILN_CPU_KERNELS", value_enum)]
    pub cpu_kernels: CpuKernels,
    /// Activations in the many-token CPU matmuls: f32 (default) or int8 (8-bit, integer dot
    /// products; faster, not bit-parity with the reference).
    #[arg(long, env = "KILN_CPU_ACTIVATIONS", value_enum)]
    pub cpu_activations: Activations,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            block_size: 16,
            kv_cache_memory: "1GiB".into(),
            kv_cache_dtype: KvCacheDtype::Auto,
            num_gpu_blocks_override: 0,
            data_parallel_size: 1,
            cpu_affinity: CpuAffinity::Auto,
            max_num_seqs: 32,
            max_num_batched_tokens: 2048,
            max_model_len: 0,
            max_waiting: 1024,
            preemption_mode: PreemptionMode::Recompute,
            swap_space_gib: 4.0,
            enable_prefix_caching: true,
            prefix_caching_hash_algo: PrefixCachingHashAlgo::Auto,
            async_scheduling: true,
            max_engine_restarts: 3,
            step_timeout_s: 300.0,
            cpu_kernels: CpuKernels::Auto,
            cpu_activations: Activations::F32,
        }
    }
}

impl EngineConfig {
    /// KV cache bytes from `engine.kv_cache_memory`; an error naming the key, never 0 for a
    /// value that does not parse.
    pub fn kv_cache_bytes(&self) -> Result<u64, ConfigError> {
        parse_bytes(&self.kv_cache_memory).map_err(|m| invalid("engine.kv_cache_memory", m))
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=1024).contains(&self.block_size) || !self.block_size.is_power_of_two() {
            return Err(invalid(
                "engine.block_size",
                "must be a power of two between 1 and 1024",
            ));
        }
        self.kv_cache_bytes()?;
        if !(1..=64).contains(&self.data_parallel_size) {
            return Err(invalid("engine.data_parallel_size", "must be between 1 and 64"));
        }
        if self.max_num_seqs == 0 {
            return Err(invalid("engine.max_num_seqs", "must be at least 1"));
        }
        if self.max_num_batched_tokens < self.max_num_seqs {
            return Err(invalid(
                "engine.max_num_batched_tokens",
                format!("must be at least max_num_seqs ({})", self.max_num_seqs),
            ));
        }
        if !(self.swap_space_gib >= 0.0 && self.swap_space_gib.is_finite()) {
            return Err(invalid("engine.swap_space_gib", "must be a number of GiB, 0 or more"));
        }
        if self.max_waiting == 0 {
            return Err(invalid("engine.max_waiting", "must be at least 1"));
        }
        if !(self.step_timeout_s >= 0.0 && self.step_timeout_s.is_finite()) {
            return Err(invalid(
                "engine.step_timeout_s",
                "must be a number of seconds, 0 or more",
            ));
        }
        // burn's float tensors hold no 8-bit float type, so the CUDA build (whose KV cache is
        // burn tensors read by burn ops) has no fp8 cache; the CPU build's kernels read bytes.
        if cfg!(feature = "cuda") && self.kv_cache_dtype == KvCacheDtype::Fp8 {
            return Err(invalid(
                "engine.kv_cache_dtype",
                "fp8 is CPU-only: the CUDA build keeps K/V in burn float tensors, which have no \
                 8-bit type; use float16 or bfloat16",
            ));
        }
        Ok(())
    }
}
