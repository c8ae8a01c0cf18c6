//! Response bodies and stream chunks of the completions, chat and models APIs. They derive
//! `Deserialize` too, so tests and clients can parse them.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::logprobs::{ChatLogprobs, CompletionLogprobs};
use super::prompt_logprobs::PromptLogprobMap;
use super::tools::{DeltaToolCall, ToolCall};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub total_tokens: u32,
    #[serde(default)]
    pub prompt_tokens_details: PromptTokensDetails,
}

/// OpenAI's breakdown of the prompt tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PromptTokensDetails {
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: u32,
}

impl Usage {
    pub fn new(prompt_tokens: u32, completion_tokens: u32) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens.saturating_add(completion_tokens),
            prompt_tokens_details: PromptTokensDetails::default(),
        }
    }

    /// With `cached` of the prompt tokens served from the prefix cache.
    pub fn with_cached(mut self, cached: u32) -> Self {
        self.prompt_tokens_details.cached_tokens = cached;
        self
    }
}

/// Per-request figures (seconds), the same intervals the histograms observe, so a bill and
/// a dashboard always agree.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RequestMetrics {
    /// scheduled − queued.
    pub queue_s: Option<f64>,
    /// first token − arrival.
    pub time_to_first_token_s: Option<f64>,
    /// last token − first token.
    pub decode_s: Option<f64>,
    /// (last token − first token) / (generated − 1): the mean inter-token latency.
    pub mean_inter_token_latency_s: Option<f64>,
    /// finished − arrival.
    pub e2e_s: f64,
    /// Generated tokens / end-to-end time.
    pub output_tokens_per_s: f64,
}

/// `finish_reason` and `logprobs` are always serialized, `null` while
/// unknown, because OpenAI sends them that way and some clients index them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CompletionChoice {
    pub index: u32,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    /// `"stop"` or `"length"` (engine `FinishReason::as_str`).
    pub finish_reason: Option<String>,
    /// vLLM extension, with `prompt_logprobs`: per prompt position, `null` for the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<Vec<Option<PromptLogprobMap>>>,
    /// kiln extension (`--enable-per-request-metrics`): this choice's timings, defined
    /// exactly as the engine's histograms define them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<RequestMetrics>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CompletionResponse {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    pub usage: Usage,
}

impl CompletionResponse {
    pub const OBJECT: &'static str = "text_completion";

    pub fn new(id: String, created: u64, model: String, choices: Vec<CompletionChoice>, usage: Usage) -> Self {
        Self {
            id,
            object: Self::OBJECT.to_owned(),
            created,
            model,
            choices,
            usage,
        }
    }
}

/// One streamed completions event; `usage` appears on the final usage chunk (with empty
/// `choices`) when `stream_options.include_usage` is set, and on every chunk with vLLM's
/// `continuous_usage_stats`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CompletionChunk {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

impl CompletionChunk {
    pub fn new(id: String, created: u64, model: String, choices: Vec<CompletionChoice>) -> Self {
        Self {
            id,
            object: CompletionResponse::OBJECT.to_owned(),
            created,
            model,
            choices,
            usage: None,
        }
    }
}

/// `content` is `null` when a tool call took the whole output (as OpenAI sends it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatResponseMessage {
    pub role: String,
    pub content: Option<String>,
    /// The calls the model made; absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
}

impl ChatResponseMessage {
    pub fn assistant(content: String) -> Self {
        Self {
            role: "assistant".to_owned(),
            content: Some(content),
            tool_calls: Vec::new(),
        }
    }

    /// An assistant turn that called tools, with the text before the calls if any.
    pub fn with_tool_calls(content: Option<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self {
            role: "assistant".to_owned(),
            content,
            tool_calls,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatChoice {
    pub index: u32,
    pub message: ChatResponseMessage,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<String>,
    /// kiln extension (`--enable-per-request-metrics`): this choice's timings, defined
    /// exactly as the engine's histograms define them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<RequestMetrics>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatCompletionResponse {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: Usage,
    /// vLLM extension, with `prompt_logprobs`: per prompt position, `null` for the first
    /// (one prompt for every choice, so once per response, as in vLLM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<Vec<Option<PromptLogprobMap>>>,
}

impl ChatCompletionResponse {
    pub const OBJECT: &'static str = "chat.completion";

    pub fn new(id: String, created: u64, model: String, choices: Vec<ChatChoice>, usage: Usage) -> Self {
        Self {
            id,
            object: Self::OBJECT.to_owned(),
            created,
            model,
            choices,
            usage,
            prompt_logprobs: None,
        }
    }
}

/// The incremental part of a chat chunk: `role` on the first chunk of a
/// choice, `content` on the ones that carry text, both absent on the last.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Pieces of tool calls (see [`DeltaToolCall`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<DeltaToolCall>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatChunkChoice {
    pub index: u32,
    pub delta: ChatDelta,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<String>,
    /// kiln extension (`--enable-per-request-metrics`): this choice's timings, defined
    /// exactly as the engine's histograms define them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<RequestMetrics>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatCompletionChunk {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChunkChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

impl ChatCompletionChunk {
    pub const OBJECT: &'static str = "chat.completion.chunk";

    pub fn new(id: String, created: u64, model: String, choices: Vec<ChatChunkChoice>) -> Self {
        Self {
            id,
            object: Self::OBJECT.to_owned(),
            created,
            model,
            choices,
            usage: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ModelCard {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub owned_by: String,
    /// vLLM's: what the served name stands for: the name itself for the base model, a LoRA
    /// adapter's folder for an adapter.
    pub root: String,
    /// vLLM's: the base model a LoRA adapter runs on (`null` for the base model).
    pub parent: Option<String>,
    pub max_model_len: u32,
}

impl ModelCard {
    pub fn new(id: String, created: u64, max_model_len: u32) -> Self {
        Self {
            root: id.clone(),
            id,
            object: "model".to_owned(),
            created,
            owned_by: "kiln".to_owned(),
            parent: None,
            max_model_len,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ModelList {
    pub object: String,
    pub data: Vec<ModelCard>,
}

impl ModelList {
    pub fn new(data: Vec<ModelCard>) -> Self {
        Self {
            object: "list".to_owned(),
            data,
        }
    }
}
