//! The engine without HTTP: prefill and decode tokens per second at batch sizes 1, 8 and 32
//! and at one stream deep into a long context, the model's achieved GFLOP/s against the
//! matmul rate measured in the same run, and where a one-stream decode step goes (bytes per
//! token against the memory bandwidth measured in the same run).
//!
//! ```text
//! cargo run --release --features testing --example bench_engine -- --model PATH [--output-json FILE]
//! ```

use clap::Parser;

#[path = "common/engine_bench.rs"]
mod engine_bench;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: engine_bench::Args,
}

fn main() -> anyhow::Result<()> {
    engine_bench::run(Cli::parse().args)
}
