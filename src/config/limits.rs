//! `[limits]`: what one request may ask for, so that no body fans out or costs without bound.

use serde::{Deserialize, Serialize};

use super::{ConfigError, invalid};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
#[command(next_help_heading = "Request limits")]
pub struct LimitsConfig {
    /// Most sequences one body may start (prompts × n).
    #[arg(long, env = "KILN_MAX_CHOICES_PER_REQUEST")]
    pub max_choices_per_request: usize,
    /// Most bytes of a request's stop strings together (each is searched on every token).
    #[arg(long, env = "KILN_MAX_STOP_BYTES")]
    pub max_stop_bytes: usize,
    /// Longest stop_token_ids list.
    #[arg(long, env = "KILN_MAX_STOP_TOKEN_IDS")]
    pub max_stop_token_ids: usize,
    /// Most bytes of prompt text (all prompts, or all chat message contents) in one request.
    #[arg(long, env = "KILN_MAX_PROMPT_BYTES")]
    pub max_prompt_bytes: usize,
    /// Most bytes of a request's output constraint (JSON schema, regex, grammar, choices).
    #[arg(long, env = "KILN_MAX_STRUCTURED_OUTPUT_BYTES")]
    pub max_structured_output_bytes: usize,
    /// Most prompt-logprob entries one request may ask for, each computed, decoded and
    /// written: prompt tokens × (prompt_logprobs + 1) × n (echo with logprobs counts as
    /// prompt_logprobs).
    #[arg(long, env = "KILN_MAX_PROMPT_LOGPROB_ENTRIES")]
    pub max_prompt_logprob_entries: usize,
    /// Seconds a constraint may take to compile before the request gets 400.
    #[arg(
        long = "grammar-compile-timeout",
        env = "KILN_GRAMMAR_COMPILE_TIMEOUT",
        value_name = "SECS"
    )]
    pub grammar_compile_timeout_s: f64,
    /// Compiled grammars kept for reuse.
    #[arg(long, env = "KILN_GRAMMAR_CACHE_SIZE")]
    pub grammar_cache_size: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_choices_per_request: 128,
            max_stop_bytes: 1024,
            max_stop_token_ids: 64,
            max_prompt_bytes: 1 << 20,
            max_structured_output_bytes: 64 << 10,
            max_prompt_logprob_entries: 1 << 20,
            grammar_compile_timeout_s: 5.0,
            grammar_cache_size: 256,
        }
    }
}

impl LimitsConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (key, value) in [
            ("limits.max_choices_per_request", self.max_choices_per_request),
            ("limits.max_stop_bytes", self.max_stop_bytes),
            ("limits.max_stop_token_ids", self.max_stop_token_ids),
            ("limits.max_prompt_bytes", self.max_prompt_bytes),
            ("limits.max_structured_output_bytes", self.max_structured_output_bytes),
            ("limits.max_prompt_logprob_entries", self.max_prompt_logprob_entries),
            ("limits.grammar_cache_size", self.grammar_cache_size),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be at least 1"));
            }
        }
        let timeout = self.grammar_compile_timeout_s;
        if !(timeout > 0.0 && timeout.is_finite()) {
            return Err(invalid(
                "limits.grammar_compile_timeout_s",
                "must be a positive number of seconds",
            ));
        }
        Ok(())
    }
}
