//! LoRA adapters served beside the base model: the `[lora]` section and vLLM's flags
//! (`--enable-lora`, `--lora-modules`, `--max-loras`, `--max-lora-rank`, `--max-cpu-loras`).

use serde::{Deserialize, Serialize};

use super::{ConfigError, invalid};

/// An adapter loaded at start: the name requests give in `model`, and its PEFT folder.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LoraModule {
    pub name: String,
    pub path: String,
    /// The base model it was trained on, as the operator states it (vLLM's JSON form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_model_name: Option<String>,
}

impl LoraModule {
    /// vLLM's two spellings: `name=path`, or `{"name": .., "path": .., "base_model_name": ..}`.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let module = if text.trim_start().starts_with('{') {
            serde_json::from_str(text).map_err(|e| invalid("lora.lora_modules", format!("{text}: {e}")))?
        } else {
            let (name, path) = text
                .split_once('=')
                .ok_or_else(|| invalid("lora.lora_modules", format!("{text}: expected name=path or JSON")))?;
            LoraModule {
                name: name.to_string(),
                path: path.to_string(),
                base_model_name: None,
            }
        };
        if module.name.is_empty() || module.path.is_empty() {
            return Err(invalid("lora.lora_modules", format!("{text}: empty name or path")));
        }
        Ok(module)
    }
}

/// Each field is one setting: its key (`lora.<field>`), its flag and `KILN_*` variable
/// (`#[arg]`), its help (the doc comment) and its default (`Default`), vLLM's names.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
#[command(next_help_heading = "LoRA adapters")]
pub struct LoraConfig {
    /// Serve LoRA adapters (needed by --lora-modules).
    #[arg(long, env = "KILN_ENABLE_LORA")]
    pub enable_lora: bool,
    /// Adapters to load at start, `name=path` or JSON `{"name", "path", "base_model_name"}`
    /// (repeatable, or several after one flag); requests name them in `model`.
    #[arg(long, env = "KILN_LORA_MODULES", num_args = 1.., value_name = "NAME=PATH",
          value_parser = LoraModule::parse)]
    pub lora_modules: Vec<LoraModule>,
    /// Distinct adapters one step may run (vLLM's default 1).
    #[arg(long, env = "KILN_MAX_LORAS")]
    pub max_loras: usize,
    /// Largest adapter rank accepted (vLLM's default 16).
    #[arg(long, env = "KILN_MAX_LORA_RANK")]
    pub max_lora_rank: usize,
    /// Adapters kept in memory (0: --max-loras, vLLM's default); every start-up adapter is kept.
    #[arg(long, env = "KILN_MAX_CPU_LORAS")]
    pub max_cpu_loras: usize,
    /// Serve `POST /v1/load_lora_adapter` and `/v1/unload_lora_adapter` (vLLM's
    /// `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`); needs --enable-lora.
    #[arg(long, env = "KILN_ALLOW_RUNTIME_LORA_UPDATING")]
    pub allow_runtime_lora_updating: bool,
}

impl Default for LoraConfig {
    fn default() -> Self {
        Self {
            enable_lora: false,
            lora_modules: Vec::new(),
            max_loras: 1,
            max_lora_rank: 16,
            max_cpu_loras: 0,
            allow_runtime_lora_updating: false,
        }
    }
}

impl LoraConfig {
    /// Adapters kept in memory: the setting, or `max_loras` when it is 0.
    pub fn cpu_loras(&self) -> usize {
        if self.max_cpu_loras == 0 {
            self.max_loras
        } else {
            self.max_cpu_loras
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.lora_modules.is_empty() && !self.enable_lora {
            return Err(invalid("lora.lora_modules", "needs --enable-lora"));
        }
        if self.allow_runtime_lora_updating && !self.enable_lora {
            return Err(invalid("lora.allow_runtime_lora_updating", "needs --enable-lora"));
        }
        if self.max_loras == 0 {
            return Err(invalid("lora.max_loras", "must be at least 1"));
        }
        if self.max_lora_rank == 0 {
            return Err(invalid("lora.max_lora_rank", "must be at least 1"));
        }
        if self.max_cpu_loras != 0 && self.max_cpu_loras < self.max_loras {
            return Err(invalid("lora.max_cpu_loras", "must be at least max_loras"));
        }
        let mut names: Vec<&str> = self.lora_modules.iter().map(|m| m.name.as_str()).collect();
        names.sort_unstable();
        if let Some(pair) = names.windows(2).find(|p| p[0] == p[1]) {
            return Err(invalid(
                "lora.lora_modules",
                format!("the name {} is given twice", pair[0]),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::cli::{Cli, Command};
    use clap::Parser;

    /// The `[lora]` section from `flags`; a value the command-line parser refuses (a module
    /// that is neither `name=path` nor JSON) is an error too.
    fn resolve(flags: &[&str]) -> Result<LoraConfig, ConfigError> {
        let cli =
            Cli::try_parse_from(["kiln", "serve"].iter().chain(flags)).map_err(|e| invalid("lora", e.to_string()))?;
        let Command::Serve(args) = cli.command else {
            panic!("serve")
        };
        args.resolve(|_| Ok(())).map(|c| c.lora)
    }

    #[test]
    fn vllm_flags_and_both_module_spellings() {
        let c = resolve(&[
            "--enable-lora",
            "--lora-modules",
            "a=/x/a",
            r#"{"name": "b", "path": "/x/b", "base_model_name": "m"}"#,
            "--max-loras",
            "2",
            "--max-lora-rank",
            "8",
        ])
        .expect("valid");
        assert!(c.enable_lora);
        assert_eq!(c.lora_modules[0].name, "a");
        assert_eq!(c.lora_modules[0].path, "/x/a");
        assert_eq!(c.lora_modules[1].base_model_name.as_deref(), Some("m"));
        assert_eq!((c.max_loras, c.max_lora_rank, c.max_cpu_loras), (2, 8, 0));
    }

    #[test]
    fn defaults_are_vllms() {
        let c = resolve(&[]).expect("valid");
        assert_eq!(
            (c.enable_lora, c.max_loras, c.max_lora_rank, c.max_cpu_loras),
            (false, 1, 16, 0)
        );
    }

    #[test]
    fn bad_settings_are_refused() {
        for flags in [
            &["--lora-modules", "a=/x"][..],
            &["--enable-lora", "--lora-modules", "a"],
            &["--enable-lora", "--lora-modules", "a=/x", "a=/y"],
            &["--enable-lora", "--max-loras", "2", "--max-cpu-loras", "1"],
            &["--enable-lora", "--max-loras", "0"],
            &["--allow-runtime-lora-updating"],
        ] {
            assert!(resolve(flags).is_err(), "{flags:?} accepted");
        }
    }
}
