//! One validated `Config`. Each setting is declared once, as a field of its section
//! (`server.rs`, `model.rs`, `engine.rs`, …): the field's name is its config-file key, its
//! `#[arg]` names its flag and its `KILN_*` variable, its doc comment is its help, and the
//! section's `Default` holds its default. Precedence: built-in defaults < config file
//! (`--config`) < environment (`KILN_…`) < command-line flags (clap merges the last two;
//! `cli::ServeArgs::resolve` puts them over the file). This module imports no subsystem:
//! subsystems read their section, or a type declared here. A section is `XxxConfig`, or
//! `XxxSettings` where a subsystem's own configuration has that name
//! (`model::config::ModelConfig`, `stats::exporter::TelemetryConfig`,
//! `scheduler::SchedulerConfig`).

mod bytes;
mod choices;
pub mod cli;
mod engine;
pub mod kv_events;
mod limits;
mod lora;
mod model;
pub mod scheduler;
pub mod security;
mod server;
mod telemetry;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use bytes::parse_bytes;
pub use choices::{
    Activations, CpuAffinity, CpuKernels, KvCacheDtype, PreemptionMode, PrefixCachingHashAlgo, ToolCallParser,
};
pub use engine::EngineConfig;
pub use kv_events::KvEventsConfig;
pub use limits::LimitsConfig;
pub use lora::{LoraConfig, LoraModule};
pub use model::ModelSettings;
pub use scheduler::SchedulerSettings;
pub use security::SecurityConfig;
pub use server::ServerConfig;
pub use telemetry::{DEFAULT_TRACES_QUEUE_SIZE, TelemetrySettings};

/// Every setting of `kiln serve`, one section of the config file per field.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    #[command(flatten)]
    pub server: ServerConfig,
    #[command(flatten)]
    pub model: ModelSettings,
    #[command(flatten)]
    pub engine: EngineConfig,
    #[command(flatten)]
    pub limits: LimitsConfig,
    #[command(flatten)]
    pub security: SecurityConfig,
    #[command(flatten)]
    pub telemetry: TelemetrySettings,
    /// vLLM's KV-cache events, as its JSON, e.g. '{"enable_kv_cache_events": true,
    /// "publisher": "zmq", "endpoint": "tcp://*:5557", "topic": "kv@pod@model"}'.
    #[arg(long = "kv-events-config", env = "KILN_KV_EVENTS_CONFIG", value_name = "JSON",
          value_parser = KvEventsConfig::from_json)]
    pub kv_events: KvEventsConfig,
    #[command(flatten)]
    pub scheduler: SchedulerSettings,
    #[command(flatten)]
    pub lora: LoraConfig,
}

/// A configuration value was refused; the message names the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("invalid value for `{key}`: {message}")]
    Invalid { key: &'static str, message: String },
    #[error("command line: {0}")]
    Flags(#[from] clap::Error),
}

/// The error for a bad value of `key` (a key of the config file, or a variable's name).
pub fn invalid(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.into(),
    }
}

impl Config {
    /// Reads a TOML file on top of the defaults.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::File {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }

    /// Checks every value a section can check by itself; the first bad one is reported with
    /// its key. (`server::resolve` adds the checks that need a subsystem: the CPU's kernels,
    /// the metric prefix, the OTLP values and the `OTEL_*` variables.)
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.server.validate()?;
        self.model.validate()?;
        self.engine.validate()?;
        self.limits.validate()?;
        self.telemetry.validate()?;
        self.security.validate()?;
        self.kv_events.validate()?;
        self.scheduler.validate()?;
        self.lora.validate()?;
        Ok(())
    }

    /// KV cache bytes from `engine.kv_cache_memory`; an error naming the key, never 0 for a
    /// value that does not parse.
    pub fn kv_cache_bytes(&self) -> Result<u64, ConfigError> {
        self.engine.kv_cache_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_defaults_match_the_built_in_ones() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/default.toml");
        let config = Config::from_file(&path).expect("config/default.toml parses");
        assert_eq!(config, Config::default());
        config.validate().expect("defaults are valid");
    }

    /// `config/default.toml` holds exactly the keys there are, each with its built-in
    /// default, and the comment above each key names its flag; each flag reads `KILN_<FLAG>`.
    #[test]
    fn default_toml_documents_every_key_with_its_default_flag_and_variable() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/default.toml");
        let text = std::fs::read_to_string(&path).expect("config/default.toml");
        let documented: toml::Table = toml::from_str(&text).expect("parses");
        let built_in = toml::Table::try_from(Config::default()).expect("serialises");
        for (name, section) in &built_in {
            let keys = section.as_table().expect("a section");
            let file = documented.get(name).and_then(toml::Value::as_table);
            let file = file.unwrap_or_else(|| panic!("default.toml lacks [{name}]"));
            for (key, value) in keys {
                assert_eq!(file.get(key), Some(value), "default.toml: {name}.{key}");
            }
            for key in file.keys() {
                assert!(keys.contains_key(key), "default.toml: {name}.{key} is no setting");
            }
        }
        assert_eq!(documented.len(), built_in.len(), "default.toml has a section too many");
        let lines: Vec<&str> = text.lines().collect();
        let flags = <Config as clap::Args>::augment_args_for_update(clap::Command::new("kiln"));
        for arg in flags.get_arguments() {
            let id = arg.get_id().as_str();
            let long = arg.get_long().unwrap_or_else(|| panic!("{id} has a flag"));
            let env = arg
                .get_env()
                .and_then(|e| e.to_str())
                .unwrap_or_else(|| panic!("{id}: a variable"));
            let want = match long {
                "otlp-header" => "KILN_OTLP_HEADERS".to_string(),
                _ => format!("KILN_{}", long.to_uppercase().replace('-', "_")),
            };
            assert_eq!(env, want, "--{long}");
            let at = lines
                .iter()
                .position(|l| l.starts_with(&format!("{id} =")) || *l == format!("[{id}]"))
                .unwrap_or_else(|| panic!("default.toml has no key or section {id}"));
            assert!(
                comment_of(&lines, at).contains(&format!("--{long}")),
                "default.toml: the comment of {id} names --{long}"
            );
        }
    }

    /// The comment a key line belongs to: the lines of `#` above it, past the keys between
    /// (keys that share one comment); for a section header, the comment below it.
    fn comment_of(lines: &[&str], at: usize) -> String {
        let comment = |l: &&&str| l.starts_with('#');
        if lines[at].starts_with('[') {
            return lines[at + 1..].iter().take_while(comment).copied().collect();
        }
        let above = lines[..at]
            .iter()
            .rev()
            .skip_while(|l| l.contains(" = ") && !l.starts_with('#'));
        above.take_while(comment).copied().collect()
    }

    #[test]
    fn bad_values_name_their_key() {
        let mut c = Config::default();
        c.engine.block_size = 3;
        assert!(c.validate().unwrap_err().to_string().contains("engine.block_size"));
        let mut c = Config::default();
        c.engine.kv_cache_memory = "lots".into();
        assert!(c.validate().unwrap_err().to_string().contains("engine.kv_cache_memory"));
    }

    #[test]
    fn unknown_keys_in_a_file_are_refused_with_their_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[engine]\nmax_num_seq = 4\n").expect("write");
        let err = Config::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("max_num_seq"), "{err}");
    }
}
