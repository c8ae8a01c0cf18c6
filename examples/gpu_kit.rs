//! The one binary sent to a GPU machine, which can build nothing and fetch nothing
//! (`examples/gpu/build_bundle.sh` builds it with `--features cuda`):
//!
//! ```text
//! gpu_kit tokenizer --model MODEL.gguf --out DIR   # here: the default model's tokenizer files
//! gpu_kit bench --model DIR [bench_engine's flags] # there: parity, then the engine benchmark
//! ```

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use kiln::model::loader::open_model;
use serde_json::json;

#[path = "common/engine_bench.rs"]
mod engine_bench;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Writes `tokenizer.json`, `tokenizer_config.json` and `shapes.json` (the model's
    /// dimensions under Hugging Face's `config.json` keys) of a model (GGUF or folder) into
    /// `--out`, so a model of the same shapes and vocabulary can be made where this one is not.
    Tokenizer {
        #[arg(long)]
        model: PathBuf,
        #[arg(long)]
        out: PathBuf,
    },
    /// `bench_engine`: `--reference` checks parity first, then every speed case runs.
    Bench(engine_bench::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Tokenizer { model, out } => write_tokenizer(&model, &out),
        Command::Bench(args) => engine_bench::run(args),
    }
}

fn write_tokenizer(model: &std::path::Path, out: &std::path::Path) -> anyhow::Result<()> {
    let files = open_model(model)?;
    std::fs::create_dir_all(out)?;
    files
        .tokenizer
        .save(out.join("tokenizer.json"), false)
        .map_err(|e| anyhow::anyhow!("writing tokenizer.json: {e}"))?;
    let text = |id: Option<u32>| id.and_then(|id| files.tokenizer.id_to_token(id));
    let special = &files.special_tokens;
    let config = json!({
        "bos_token": text(special.bos),
        "eos_token": text(special.eos),
        "add_bos_token": kiln::tokenizer::adds_bos(&files.tokenizer),
        "chat_template": files.chat_template,
        "model_max_length": files.config.max_position_embeddings,
    });
    std::fs::write(
        out.join("tokenizer_config.json"),
        serde_json::to_string_pretty(&config)?,
    )?;
    let c = &files.config;
    let shapes = json!({
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads,
        "head_dim": c.head_dim,
        "rope_theta": c.rope_theta,
        "rms_norm_eps": c.rms_norm_eps,
        "max_position_embeddings": c.max_position_embeddings,
        "tie_word_embeddings": c.tie_word_embeddings,
        "bos_token_id": special.bos,
        "eos_token_id": special.eos,
    });
    std::fs::write(out.join("shapes.json"), serde_json::to_string_pretty(&shapes)?)?;
    println!(
        "{}: {} tokens, bos {:?}, eos {:?}",
        out.display(),
        files.tokenizer.get_vocab_size(true),
        text(special.bos),
        text(special.eos)
    );
    Ok(())
}
