//! `kiln`'s command line. The settings' flags are declared with the settings themselves (the
//! sections of [`Config`]: vLLM's names where vLLM has one; each also reads `KILN_<FLAG>`);
//! `ServeArgs` adds what is no setting: the config file, the log format.

use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, FromArgMatches, Parser, Subcommand};

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

impl Cli {
    /// Parses the process's arguments, vLLM's multi-letter short flags included.
    pub fn parse_args() -> Self {
        Self::parse_from(vllm_short_flags(std::env::args_os()))
    }
}

/// vLLM's single-dash spellings that clap cannot declare (`-dp 2`, `-dp=2`), rewritten to
/// their long flags.
pub fn vllm_short_flags(args: impl IntoIterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    args.into_iter()
        .map(|arg| match arg.to_str() {
            Some("-dp") => "--data-parallel-size".into(),
            Some(a) if a.starts_with("-dp=") => format!("--data-parallel-size={}", &a[4..]).into(),
            _ => arg,
        })
        .collect()
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve a model over the OpenAI-compatible API (the default model when --model is absent).
    Serve(Box<ServeArgs>),
    /// Download a known model (default: the default model) into the cache and print its path.
    FetchModel(FetchArgs),
}

#[derive(Debug, Args)]
pub struct FetchArgs {
    /// A known model's short name: smollm2-135m (the default) or gemma3-270m.
    pub model: Option<String>,
    /// Cache folder (default: `$XDG_CACHE_HOME/kiln` or `~/.cache/kiln`).
    #[arg(long, env = "KILN_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// TOML config file; see config/default.toml for every key.
    #[arg(long, env = "KILN_CONFIG")]
    pub config: Option<PathBuf>,
    /// Log format: text or json (one JSON object per line).
    #[arg(long, env = "KILN_LOG_FORMAT", value_parser = ["text", "json"])]
    pub log_format: Option<String>,
    /// Turn prefix caching off (vLLM's spelling of --enable-prefix-caching=false).
    #[arg(long, conflicts_with = "enable_prefix_caching")]
    pub no_enable_prefix_caching: bool,
    #[command(flatten)]
    pub settings: GivenSettings,
}

/// The settings given as flags or `KILN_*` variables: clap's matches of [`Config`]'s
/// arguments without the values clap fills in itself (a bare flag's `false`), so that a
/// setting nobody gave keeps the file's value.
#[derive(Debug, Clone)]
pub struct GivenSettings(ArgMatches);

impl Args for GivenSettings {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        // "for update": no setting is required; an absent one keeps the file's value.
        Config::augment_args_for_update(cmd)
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Config::augment_args_for_update(cmd)
    }
}

impl FromArgMatches for GivenSettings {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut given = matches.clone();
        let defaulted: Vec<String> = given
            .ids()
            .map(|id| id.as_str().to_owned())
            .filter(|id| given.value_source(id) == Some(ValueSource::DefaultValue))
            .collect();
        for id in defaulted {
            given.try_clear_id(&id).expect("an id of these matches");
        }
        Ok(Self(given))
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl GivenSettings {
    /// Puts the given settings over `config`. Each `--otlp-header` replaces the header of its
    /// name only, so the file's other headers stay.
    pub fn apply(&self, config: &mut Config) -> Result<(), ConfigError> {
        let file_headers = config.telemetry.otlp_headers.clone();
        config.update_from_arg_matches(&self.0)?;
        if self.0.contains_id("otlp_headers") {
            let given = std::mem::replace(&mut config.telemetry.otlp_headers, file_headers);
            config.telemetry.set_otlp_headers(given);
        }
        Ok(())
    }
}

impl ServeArgs {
    /// Defaults, then the file, then `between` (the standard `OTEL_*` variables, which sit
    /// under kiln's own), then the flags and `KILN_*` variables; checked.
    pub fn resolve(&self, between: impl FnOnce(&mut Config) -> Result<(), ConfigError>) -> Result<Config, ConfigError> {
        let mut c = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        between(&mut c)?;
        self.settings.apply(&mut c)?;
        if self.no_enable_prefix_caching {
            c.engine.enable_prefix_caching = false;
        }
        c.security.fall_back_to_vllm_api_key(std::env::var("VLLM_API_KEY").ok());
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
        std::fs::write(&path, "[server]\nport = 9001\n[engine]\nmax_num_seqs = 4\n").expect("write");
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
        let c = args.resolve(no_otel).expect("valid");
        assert_eq!(c.server.port, 9001); // file
        assert_eq!(c.engine.max_num_seqs, 8); // flag beats file
        assert_eq!(c.engine.block_size, 16); // default
    }

    #[test]
    fn async_scheduling_is_on_by_default_and_a_flag_turns_it_off() {
        let parse = |extra: &[&str]| {
            let cli = Cli::try_parse_from(["kiln", "serve"].iter().chain(extra)).expect("parses");
            let Command::Serve(args) = cli.command else {
                panic!("serve")
            };
            args.resolve(no_otel).expect("valid").engine.async_scheduling
        };
        assert!(parse(&[]));
        assert!(!parse(&["--async-scheduling", "false"]));
        assert!(parse(&["--async-scheduling", "true"]));
    }

    #[test]
    fn prefix_caching_flags_in_vllms_spellings() {
        let parse = |extra: &[&str]| {
            let cli = Cli::try_parse_from(["kiln", "serve"].iter().chain(extra)).expect("parses");
            let Command::Serve(args) = cli.command else {
                panic!("serve")
            };
            args.resolve(no_otel).expect("valid").engine.enable_prefix_caching
        };
        assert_eq!(parse(&[]), Config::default().engine.enable_prefix_caching);
        assert!(parse(&["--enable-prefix-caching"]));
        assert!(parse(&["--enable-prefix-caching=true"]));
        assert!(!parse(&["--enable-prefix-caching=false"]));
        assert!(!parse(&["--no-enable-prefix-caching"]));
        let both = ["kiln", "serve", "--enable-prefix-caching", "--no-enable-prefix-caching"];
        assert!(Cli::try_parse_from(both).is_err());
    }

    #[test]
    fn a_bad_flag_value_is_refused_naming_the_key() {
        let err = serve(&["--block-size", "5"]).resolve(no_otel).unwrap_err().to_string();
        assert!(err.contains("engine.block_size"), "{err}");
    }

    /// A flag left out keeps the file's value, a bare flag's implicit `false` included; a
    /// flag given wins; repeated headers replace the file's header of their name only.
    #[test]
    fn only_the_flags_given_override_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kiln.toml");
        let file = "[model]\ndequantize_weights = true\n[telemetry]\nenabled = false\n\
                    otlp_headers = [\"a=1\", \"b=2\"]\n[engine]\nenable_prefix_caching = false\n";
        std::fs::write(&path, file).expect("write");
        let c = serve(&["--config", path.to_str().unwrap()])
            .resolve(no_otel)
            .expect("valid");
        assert!(c.model.dequantize_weights && !c.telemetry.enabled && !c.engine.enable_prefix_caching);
        assert_eq!(c.telemetry.otlp_headers, ["a=1", "b=2"]);
        let c = serve(&[
            "--config",
            path.to_str().unwrap(),
            "--otlp-header",
            "B=3",
            "--enable-prefix-caching",
        ])
        .resolve(no_otel)
        .expect("valid");
        assert_eq!(c.telemetry.otlp_headers, ["a=1", "B=3"]);
        assert!(c.engine.enable_prefix_caching);
        let c = serve(&["--disable-telemetry"]).resolve(no_otel).expect("valid");
        assert!(!c.telemetry.enabled);
        assert!(serve(&[]).resolve(no_otel).expect("valid").telemetry.enabled);
    }

    /// clap's checks of the whole command line: unique names, conflicts that name real
    /// flags, defaults its parsers accept.
    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn data_parallel_size_in_vllms_short_spelling() {
        for extra in [["-dp", "3"].as_slice(), &["-dp=3"], &["--data-parallel-size", "3"]] {
            let args = ["kiln", "serve"].iter().chain(extra).map(std::ffi::OsString::from);
            let cli = Cli::try_parse_from(vllm_short_flags(args)).expect("parses");
            let Command::Serve(args) = cli.command else {
                unreachable!()
            };
            assert_eq!(args.resolve(no_otel).unwrap().engine.data_parallel_size, 3, "{extra:?}");
        }
    }

    fn serve(extra: &[&str]) -> ServeArgs {
        let cli = Cli::try_parse_from(["kiln", "serve"].iter().chain(extra)).expect("parses");
        let Command::Serve(args) = cli.command else {
            panic!("serve")
        };
        *args
    }

    fn no_otel(_: &mut Config) -> Result<(), ConfigError> {
        Ok(())
    }
}
