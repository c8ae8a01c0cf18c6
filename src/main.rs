//! The `kiln` binary: `kiln serve` and `kiln fetch-model`.

use std::io::IsTerminal;
use std::process::ExitCode;

use kiln::config::cli::{Cli, Command};
use kiln::model::fetch::{default_cache_dir, ensure_default_model, ensure_named_model};

fn main() -> ExitCode {
    let cli = Cli::parse_args();
    let json = matches!(&cli.command, Command::Serve(args) if args.log_format.as_deref() == Some("json"));
    init_logging(json);
    let result = match cli.command {
        Command::Serve(args) => kiln::server::resolve::resolve(&args)
            .map_err(anyhow::Error::from)
            .and_then(kiln::server::run_blocking),
        Command::FetchModel(args) => {
            let dir = args.cache_dir.unwrap_or_else(default_cache_dir);
            match &args.model {
                Some(name) => ensure_named_model(name, &dir),
                None => ensure_default_model(&dir),
            }
            .map(|path| {
                // The path is the command's output, for scripts.
                use std::io::Write;
                let _ = writeln!(std::io::stdout(), "{}", path.display());
            })
            .map_err(anyhow::Error::from)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`): text, or one JSON object per
/// line (`--log-format json`: fields as JSON values, escaped as JSON).
fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().flatten_event(true).with_current_span(false).init();
    } else {
        builder.with_ansi(std::io::stderr().is_terminal()).init();
    }
}
