//! The groups of request fields that several bodies share, each written once and flattened
//! into its bodies (`#[serde(flatten)]`): on the wire the bodies stay flat, as OpenAI's, and
//! the OpenAPI document merges each group back into the bodies' own properties (see
//! `api::openapi`). The `#[schema]` ranges state the rules of `api::validation`.
//!
//! serde reads a flattened group from a buffer, out of sight of the path tracker of
//! `api::json_body`, so a bad value in a group would lose its field's name; each body's
//! [`RequestBody::check_groups`] parses its groups alone then, which names it.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::schemas;
use super::{ResponseFormatParam, StopInput, StreamOptions, StructuredOutputsParam};
use crate::api::errors::ApiError;
use crate::api::json_body::{RequestBody, parse_tracked};

/// The fields of every generation body: completions, chat and Responses.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CommonFields {
    /// `None`: the served model (vLLM accepts a missing model too).
    #[serde(default)]
    pub model: Option<String>,
    /// Server-sent events as tokens arrive.
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    #[schema(minimum = 0, maximum = 2)]
    pub temperature: Option<f32>,
    #[serde(default)]
    #[schema(exclusive_minimum = 0, maximum = 1)]
    pub top_p: Option<f32>,
    /// Signed because the OpenAI client types it as a plain int; any value is a seed.
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub user: Option<String>,
    /// The data-parallel rank to serve the request (SGLang's model gateway puts it in the
    /// body; vllm-router sends `X-data-parallel-rank`). kiln runs one engine, rank 0: any
    /// other is refused, naming it.
    #[serde(default)]
    pub data_parallel_rank: Option<i64>,
}

/// The sampling, stopping and logprob knobs of completions and chat (OpenAI's and vLLM's),
/// and `stream_options`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SamplingFields {
    /// Choices per prompt.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 16)]
    pub n: Option<u32>,
    /// Only with `stream: true`.
    #[serde(default, deserialize_with = "super::structured::optional_object")]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub stop: Option<StopInput>,
    #[serde(default)]
    #[schema(minimum = -2, maximum = 2)]
    pub presence_penalty: Option<f32>,
    #[serde(default)]
    #[schema(minimum = -2, maximum = 2)]
    pub frequency_penalty: Option<f32>,
    #[serde(default)]
    #[schema(schema_with = schemas::logit_bias)]
    pub logit_bias: Option<HashMap<String, f64>>,
    // vLLM extensions.
    /// `-1` or `0` disable top-k.
    #[serde(default)]
    #[schema(minimum = -1)]
    pub top_k: Option<i32>,
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1)]
    pub min_p: Option<f32>,
    #[serde(default)]
    #[schema(exclusive_minimum = 0, maximum = 3.402_823_5e38)]
    pub repetition_penalty: Option<f32>,
    #[serde(default)]
    #[schema(schema_with = schemas::stop_token_ids)]
    pub stop_token_ids: Option<Vec<u32>>,
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// Tokens to generate before an end-of-generation or stop token or a stop string may end
    /// the choice; at most `max_tokens` (chat: `max_completion_tokens`, or `max_tokens`) when
    /// sent.
    #[serde(default)]
    #[schema(format = Int64)]
    pub min_tokens: Option<u32>,
    /// Top logprobs per prompt token (vLLM): in each choice (completions), or in the
    /// response's top-level `prompt_logprobs` (chat, not with `stream`, as in vLLM). The
    /// prompt is computed whole, not read from the prefix cache.
    #[serde(default)]
    #[schema(maximum = 20)]
    pub prompt_logprobs: Option<u32>,
}

/// The fields that constrain the output, whichever spelling the client uses: OpenAI's
/// `response_format`, vLLM's `structured_outputs` and its older `guided_*` fields.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ConstraintFields {
    /// Constrains the output: `json_object`, or `json_schema` with a schema.
    #[serde(default, deserialize_with = "super::structured::optional_object")]
    pub response_format: Option<ResponseFormatParam>,
    /// vLLM's output constraints (one of `json`, `regex`, `choice`, `grammar`, `json_object`).
    #[serde(default, deserialize_with = "super::structured::optional_object")]
    pub structured_outputs: Option<StructuredOutputsParam>,
    /// vLLM's older form of `structured_outputs.json` (an object or its JSON text).
    #[serde(default)]
    #[schema(value_type = Option<Value>)]
    pub guided_json: Option<serde_json::Value>,
    /// vLLM's older form of `structured_outputs.regex`.
    #[serde(default)]
    pub guided_regex: Option<String>,
    /// vLLM's older form of `structured_outputs.choice`.
    #[serde(default)]
    pub guided_choice: Option<Vec<String>>,
    /// vLLM's older form of `structured_outputs.grammar`.
    #[serde(default)]
    pub guided_grammar: Option<String>,
}

/// Completions and chat carry all three groups.
macro_rules! three_groups {
    ($($body:ty),+) => {$(
        impl RequestBody for $body {
            fn check_groups(text: &str) -> Result<(), ApiError> {
                parse_tracked::<CommonFields>(text)?;
                parse_tracked::<SamplingFields>(text)?;
                parse_tracked::<ConstraintFields>(text).map(drop)
            }
        }
    )+};
}

three_groups!(super::CompletionRequest, super::ChatCompletionRequest);
