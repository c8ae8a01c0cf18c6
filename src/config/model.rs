//! `[model]`: which model is served and how it is read. (The model's own architecture is
//! `model::config::ModelConfig`; this is what the operator chose.)

use serde::{Deserialize, Serialize};

use super::choices::{ToolCallParser, empty_as_none, none_as_empty};
use super::{ConfigError, invalid};

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
#[command(next_help_heading = "Model")]
pub struct ModelSettings {
    /// A .gguf file, a Hugging Face folder (config.json, *.safetensors, tokenizer.json), or a
    /// known model's short name (gemma3-270m), fetched into the cache on first use; empty: the
    /// default model.
    #[arg(long = "model", env = "KILN_MODEL", value_name = "MODEL")]
    pub path: String,
    /// Where downloaded models are cached; empty: `$XDG_CACHE_HOME/kiln` or `~/.cache/kiln`.
    #[arg(long, env = "KILN_CACHE_DIR")]
    pub cache_dir: String,
    /// Widen Q4_0/Q4_1/Q8_0 weights to f32 at load instead of multiplying the packed blocks
    /// (same values; 4-6x the memory traffic per token on the CPU; CUDA always widens).
    #[arg(long, env = "KILN_DEQUANTIZE_WEIGHTS")]
    pub dequantize_weights: bool,
    /// A Jinja chat template replacing the model's: a file, or the template itself when the
    /// value contains '{', '}' or a newline (vLLM's `--chat-template`); empty: the model's.
    #[arg(long, env = "KILN_CHAT_TEMPLATE")]
    pub chat_template: String,
    /// Serve `tool_choice: "auto"` (vLLM's `--enable-auto-tool-choice`; needs
    /// --tool-call-parser).
    #[arg(long, env = "KILN_ENABLE_AUTO_TOOL_CHOICE")]
    pub enable_auto_tool_choice: bool,
    /// How `auto` tool calls are read from the model's text (vLLM's `--tool-call-parser`); the
    /// file's empty string is none.
    #[arg(long, env = "KILN_TOOL_CALL_PARSER", value_enum)]
    #[serde(deserialize_with = "empty_as_none", serialize_with = "none_as_empty")]
    pub tool_call_parser: Option<ToolCallParser>,
}

impl ModelSettings {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.enable_auto_tool_choice && self.tool_call_parser.is_none() {
            return Err(invalid(
                "model.enable_auto_tool_choice",
                "needs model.tool_call_parser (--tool-call-parser)",
            ));
        }
        Ok(())
    }
}
