//! Command-line flags (vLLM's names where vLLM has one); each flag also reads `KILN_<NAME>`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use super::{Config, ConfigError};

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
    Serve(ServeArgs),
    /// Download the default model into the cache and print its path.
    FetchModel(FetchArgs),
}

#[derive(Debug, Args)]
pub struct FetchArgs {
    /// Cache folder (default: `$XDG_CACHE_HOME/kiln` or `~/.cache/kiln`).
    #[arg(long, env = "KILN_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
}

#[derive(Debug, Default, Args)]
pub struct ServeArgs {
    /// TOML config file; see config/default.toml for every key.
    #[arg(long, env = "KILN_CONFIG")]
    pub config: Option<PathBuf>,
    /// A .gguf file or a Hugging Face folder (config.json, *.safetensors, tokenizer.json).
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
    /// Requests allowed to wait before new ones get 429.
    #[arg(long, env = "KILN_MAX_WAITING")]
    pub max_waiting: Option<usize>,
    #[arg(long, env = "KILN_MAX_REQUEST_BODY_BYTES")]
    pub max_request_body_bytes: Option<usize>,
    /// Turn telemetry off (to measure its cost).
    #[arg(long, env = "KILN_DISABLE_TELEMETRY")]
    pub disable_telemetry: bool,
    /// Prefix of the engine metrics (default `vllm:`).
    #[arg(long, env = "KILN_ENGINE_PREFIX")]
    pub engine_prefix: Option<String>,
    /// Seconds between stats log lines.
    #[arg(long, env = "KILN_LOG_INTERVAL")]
    pub log_interval: Option<f64>,
}

impl ServeArgs {
    /// Defaults, then the file, then these flags (which already include `KILN_*`).
    pub fn resolve(&self) -> Result<Config, ConfigError> {
        let mut c = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        fn set<T: Clone>(target: &mut T, value: &Option<T>) {
            if let Some(v) = value {
                *target = v.clone();
            }
        }
        set(&mut c.model.path, &self.model);
        set(&mut c.model.cache_dir, &self.cache_dir);
        set(&mut c.server.served_model_name, &self.served_model_name);
        set(&mut c.server.host, &self.host);
        set(&mut c.server.port, &self.port);
        set(
            &mut c.server.max_request_body_bytes,
            &self.max_request_body_bytes,
        );
        set(&mut c.engine.block_size, &self.block_size);
        set(&mut c.engine.kv_cache_memory, &self.kv_cache_memory);
        set(
            &mut c.engine.num_gpu_blocks_override,
            &self.num_gpu_blocks_override,
        );
        set(&mut c.engine.max_num_seqs, &self.max_num_seqs);
        set(
            &mut c.engine.max_num_batched_tokens,
            &self.max_num_batched_tokens,
        );
        set(&mut c.engine.max_model_len, &self.max_model_len);
        set(&mut c.engine.max_waiting, &self.max_waiting);
        set(&mut c.telemetry.engine_prefix, &self.engine_prefix);
        set(&mut c.telemetry.log_interval_s, &self.log_interval);
        if self.disable_telemetry {
            c.telemetry.enabled = false;
        }
        c.validate()?;
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
        std::fs::write(&path, "[server]\nport = 9001\n[engine]\nmax_num_seqs = 4\n")
            .expect("write");
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
    fn a_bad_flag_value_is_refused_naming_the_key() {
        let args = ServeArgs {
            block_size: Some(5),
            ..Default::default()
        };
        let err = args.resolve().unwrap_err().to_string();
        assert!(err.contains("engine.block_size"), "{err}");
    }
}
