//! A Hugging Face model folder's tokenizer: `tokenizer.json`, with BOS insertion and special
//! tokens from `tokenizer_config.json`, `config.json` and `generation_config.json`.

use std::path::Path;

use serde_json::Value;
use tokenizers::Tokenizer;

use super::bos::set_bos;
use super::error::TokenizerError;
use super::special_tokens::SpecialTokens;

/// Loads a Hugging Face `tokenizer.json`.
pub fn load_tokenizer_json(path: &Path) -> Result<Tokenizer, TokenizerError> {
    Tokenizer::from_file(path).map_err(|e| TokenizerError::Load {
        path: path.to_path_buf(),
        what: "tokenizer.json",
        message: e.to_string(),
    })
}

/// The folder's tokenizer and special tokens. `tokenizer_config.json`'s `add_bos_token`, when
/// present, decides BOS insertion (as transformers rebuilds the post-processor from it);
/// otherwise `tokenizer.json`'s post-processor stands.
pub fn hf_folder_tokenizer(dir: &Path) -> Result<(Tokenizer, SpecialTokens), TokenizerError> {
    let mut tokenizer = load_tokenizer_json(&dir.join("tokenizer.json"))?;
    let special = special_tokens_from_hf_config(dir, &tokenizer);
    let add_bos = read_json(dir, "tokenizer_config.json").and_then(|c| c.get("add_bos_token")?.as_bool());
    if let Some(add_bos) = add_bos {
        let bos = special
            .bos
            .filter(|_| add_bos)
            .and_then(|id| Some((tokenizer.id_to_token(id)?, id)));
        set_bos(&mut tokenizer, bos.as_ref().map(|(t, id)| (t.as_str(), *id))).map_err(|message| {
            TokenizerError::Build {
                path: dir.to_path_buf(),
                message,
            }
        })?;
    }
    Ok((tokenizer, special))
}

/// Best effort: `tokenizer_config.json` (`bos_token`, `eos_token`), `config.json`
/// (`bos_token_id`, `eos_token_id`) and `generation_config.json` (`eos_token_id`, an id or a
/// list: every entry stops generation). Missing or unreadable configs are skipped.
pub fn special_tokens_from_hf_config(dir: &Path, tokenizer: &Tokenizer) -> SpecialTokens {
    let tok_config = read_json(dir, "tokenizer_config.json");
    let config = read_json(dir, "config.json");
    let generation = read_json(dir, "generation_config.json");
    let id_of = |text: &str| tokenizer.token_to_id(text);
    // tokenizer_config names the token (a string or {"content": ...}); config.json gives
    // ids (an int or, for multi-EOS models, a list whose first entry is the main one).
    let from_configs = |name: &str| {
        let by_text = tok_config.as_ref().and_then(|c| {
            let v = c.get(format!("{name}_token"))?;
            id_of(v.as_str().or_else(|| v.get("content")?.as_str())?)
        });
        by_text.or_else(|| ids(config.as_ref()?.get(format!("{name}_token_id"))?).first().copied())
    };
    let mut special = SpecialTokens::build(
        from_configs("bos"),
        from_configs("eos"),
        |id| tokenizer.id_to_token(id),
        id_of,
    );
    for file in [&config, &generation] {
        if let Some(eos) = file.as_ref().and_then(|c| c.get("eos_token_id")) {
            special.add_end_ids(ids(eos));
        }
    }
    special
}

/// An id or a list of ids.
fn ids(value: &Value) -> Vec<u32> {
    let one = |v: &Value| v.as_u64().and_then(|id| u32::try_from(id).ok());
    match value.as_array() {
        Some(list) => list.iter().filter_map(one).collect(),
        None => one(value).into_iter().collect(),
    }
}

fn read_json(dir: &Path, name: &str) -> Option<Value> {
    let text = std::fs::read_to_string(dir.join(name)).ok()?;
    serde_json::from_str(&text)
        .inspect_err(|e| tracing::warn!(file = name, error = %e, "ignoring unparsable config"))
        .ok()
}
