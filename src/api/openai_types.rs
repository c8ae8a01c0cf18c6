//! Wire types of the OpenAI completions, chat and models APIs, shaped after
//! what the official `openai` Python client sends and parses.
//!
//! Requests keep every optional knob as `Option` so `api::validation` can
//! tell "absent" from "default" and resolve defaults in one place. Unknown
//! request fields are ignored (no `deny_unknown_fields`): clients send many
//! fields (`tools`, `response_format`, ...) that a strict server would reject.
//!
//! Responses derive `Deserialize` too so tests and clients can parse them.

use std::collections::HashMap;
use std::fmt;

use bytes::Bytes;
use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::api::errors::ApiError;

// ---------------------------------------------------------------- requests

/// `prompt` of `/v1/completions`: OpenAI accepts all four shapes.
///
/// Variant order matters for `untagged`: `[]` parses as an empty `TextBatch`
/// (rejected by validation either way).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "field `prompt` must be a string, an array of strings, an array of token ids, \
                 or an array of arrays of token ids"
)]
pub enum PromptInput {
    Text(String),
    TextBatch(Vec<String>),
    Tokens(Vec<u32>),
    TokenBatch(Vec<Vec<u32>>),
}

/// An empty text prompt, so requests can be built with `..Default::default()`
/// in tests (validation rejects it).
impl Default for PromptInput {
    fn default() -> Self {
        PromptInput::Text(String::new())
    }
}

/// `stop`: one string or a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, expecting = "field `stop` must be a string or an array of strings")]
pub enum StopInput {
    Single(String),
    Multiple(Vec<String>),
}

impl StopInput {
    /// The stop strings as a slice, whichever shape was sent.
    pub fn as_slice(&self) -> &[String] {
        match self {
            StopInput::Single(s) => std::slice::from_ref(s),
            StopInput::Multiple(v) => v,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamOptions {
    /// Send a final chunk with `usage` and empty `choices`.
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// Body of `POST /v1/completions`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletionRequest {
    /// `None`: the served model (vLLM accepts a missing model too).
    #[serde(default)]
    pub model: Option<String>,
    pub prompt: PromptInput,
    /// Defaults to 16, as OpenAI's completions endpoint does.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub n: Option<u32>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Number of top logprobs per token (`0` = only the sampled token).
    #[serde(default)]
    pub logprobs: Option<u32>,
    /// Only `false` is supported.
    #[serde(default)]
    pub echo: Option<bool>,
    #[serde(default)]
    pub stop: Option<StopInput>,
    #[serde(default)]
    pub presence_penalty: Option<f32>,
    #[serde(default)]
    pub frequency_penalty: Option<f32>,
    /// Signed because the OpenAI client types it as a plain int.
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub user: Option<String>,
    /// Accepted and range-checked, not applied.
    #[serde(default)]
    pub logit_bias: Option<HashMap<String, f64>>,
    /// Accepted when equal to `n` (or absent).
    #[serde(default)]
    pub best_of: Option<u32>,
    // vLLM extensions.
    /// `-1` or `0` disable top-k.
    #[serde(default)]
    pub top_k: Option<i32>,
    #[serde(default)]
    pub min_p: Option<f32>,
    #[serde(default)]
    pub repetition_penalty: Option<f32>,
    #[serde(default)]
    pub stop_token_ids: Option<Vec<u32>>,
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// Only `0` is supported for now.
    #[serde(default)]
    pub min_tokens: Option<u32>,
}

/// Chat roles OpenAI accepts; an unknown role is a 400 from serde.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatRole {
    System,
    Developer,
    User,
    Assistant,
    Tool,
}

impl ChatRole {
    /// The role as chat templates expect it.
    pub fn as_str(self) -> &'static str {
        match self {
            ChatRole::System => "system",
            ChatRole::Developer => "developer",
            ChatRole::User => "user",
            ChatRole::Assistant => "assistant",
            ChatRole::Tool => "tool",
        }
    }
}

/// `content` of a chat message: a string or a list of typed parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "field `content` must be a string or an array of content parts"
)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// One content part. `type` is kept as a string (not an enum) so an image or
/// audio part reaches validation and gets an error naming
/// `messages[i].content` rather than an opaque serde error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessageIn {
    pub role: ChatRole,
    /// Optional because assistant turns with tool calls carry `null`.
    #[serde(default)]
    pub content: Option<MessageContent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A message with its content flattened to text, ready for a chat template.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatMessage {
    pub role: &'static str,
    pub content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ChatMessageIn {
    /// The content as one string: text parts joined by `\n` (as vLLM does);
    /// `null` content is empty. `index` is the message's position, used to
    /// name `messages[index].content` in the error for a non-text part.
    pub fn text(&self, index: usize) -> Result<String, ApiError> {
        match &self.content {
            None => Ok(String::new()),
            Some(MessageContent::Text(s)) => Ok(s.clone()),
            Some(MessageContent::Parts(parts)) => {
                let mut texts = Vec::with_capacity(parts.len());
                for (j, part) in parts.iter().enumerate() {
                    match (part.kind.as_str(), &part.text) {
                        ("text", Some(t)) => texts.push(t.as_str()),
                        ("text", None) => {
                            return Err(ApiError::invalid(
                                format!("messages[{index}].content[{j}].text"),
                                "text content part is missing `text`",
                            ));
                        }
                        (other, _) => {
                            return Err(ApiError::invalid(
                                format!("messages[{index}].content"),
                                format!(
                                    "content part type `{other}` is not supported; \
                                     only `text` parts are"
                                ),
                            ));
                        }
                    }
                }
                Ok(texts.join("\n"))
            }
        }
    }
}

/// Body of `POST /v1/chat/completions`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub messages: Vec<ChatMessageIn>,
    /// Deprecated by OpenAI in favour of `max_completion_tokens`, which wins.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub max_completion_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub n: Option<u32>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub stop: Option<StopInput>,
    #[serde(default)]
    pub presence_penalty: Option<f32>,
    #[serde(default)]
    pub frequency_penalty: Option<f32>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub logprobs: Option<bool>,
    /// Requires `logprobs: true`.
    #[serde(default)]
    pub top_logprobs: Option<u32>,
    #[serde(default)]
    pub user: Option<String>,
    // vLLM extensions.
    /// `-1` or `0` disable top-k.
    #[serde(default)]
    pub top_k: Option<i32>,
    #[serde(default)]
    pub min_p: Option<f32>,
    #[serde(default)]
    pub repetition_penalty: Option<f32>,
    #[serde(default)]
    pub stop_token_ids: Option<Vec<u32>>,
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// Only `0` is supported for now.
    #[serde(default)]
    pub min_tokens: Option<u32>,
}

impl ChatCompletionRequest {
    /// Every message with its content flattened (see [`ChatMessageIn::text`]).
    pub fn flattened_messages(&self) -> Result<Vec<ChatMessage>, ApiError> {
        self.messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                Ok(ChatMessage {
                    role: m.role.as_str(),
                    content: m.text(i)?,
                    name: m.name.clone(),
                })
            })
            .collect()
    }
}

// --------------------------------------------------------------- responses

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub total_tokens: u32,
}

impl Usage {
    pub fn new(prompt_tokens: u32, completion_tokens: u32) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens.saturating_add(completion_tokens),
        }
    }
}

/// Logprobs below this are sent as this value: JSON has no `-inf`
/// (serde_json would write `null`, which the client cannot parse as a float).
pub const MIN_LOGPROB: f32 = -9999.0;

/// Clamps a logprob to a JSON-representable value (see [`MIN_LOGPROB`]).
pub fn finite_logprob(logprob: f32) -> f32 {
    if logprob.is_nan() {
        MIN_LOGPROB
    } else {
        logprob.max(MIN_LOGPROB)
    }
}

/// `{token: logprob}` in insertion order (most likely first, as OpenAI
/// sends it); a `HashMap` would scramble the order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TopLogprobMap(pub Vec<(String, f32)>);

impl Serialize for TopLogprobMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (token, logprob) in &self.0 {
            map.serialize_entry(token, logprob)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for TopLogprobMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MapVisitor;
        impl<'de> Visitor<'de> for MapVisitor {
            type Value = TopLogprobMap;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of token to logprob")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::with_capacity(access.size_hint().unwrap_or(0));
                while let Some(entry) = access.next_entry()? {
                    entries.push(entry);
                }
                Ok(TopLogprobMap(entries))
            }
        }
        deserializer.deserialize_map(MapVisitor)
    }
}

/// Logprobs of the legacy completions API (parallel arrays).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f32>,
    pub top_logprobs: Vec<Option<TopLogprobMap>>,
    /// Byte offset of each token in the choice's text.
    pub text_offset: Vec<u32>,
}

/// Per-request figures (seconds), the same intervals the histograms observe, so a bill and
/// a dashboard always agree.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionChoice {
    pub index: u32,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    /// `"stop"` or `"length"` (engine `FinishReason::as_str`).
    pub finish_reason: Option<String>,
    /// kiln extension (`--enable-per-request-metrics`): this choice's timings, defined
    /// exactly as the engine's histograms define them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<RequestMetrics>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

/// One streamed completions event; `usage` appears only on the final usage
/// chunk (with empty `choices`) when `stream_options.include_usage` is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

/// One top alternative of a chat token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatTopLogprob {
    pub token: String,
    pub logprob: f32,
    /// UTF-8 bytes of the token (a token can be part of a character).
    pub bytes: Option<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatTokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Option<Vec<u8>>,
    pub top_logprobs: Vec<ChatTopLogprob>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponseMessage {
    pub role: String,
    pub content: String,
}

impl ChatResponseMessage {
    pub fn assistant(content: String) -> Self {
        Self {
            role: "assistant".to_owned(),
            content,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionResponse {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: Usage,
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
        }
    }
}

/// The incremental part of a chat chunk: `role` on the first chunk of a
/// choice, `content` on the ones that carry text, both absent on the last.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub owned_by: String,
    pub max_model_len: u32,
}

impl ModelCard {
    pub fn new(id: String, created: u64, max_model_len: u32) -> Self {
        Self {
            id,
            object: "model".to_owned(),
            created,
            owned_by: "kiln".to_owned(),
            max_model_len,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

// --------------------------------------------------------------------- SSE

/// The stream terminator OpenAI clients wait for.
pub const SSE_DONE: &[u8] = b"data: [DONE]\n\n";

/// [`SSE_DONE`] as a body chunk.
pub fn sse_done() -> Bytes {
    Bytes::from_static(SSE_DONE)
}

/// One server-sent event, `data: {json}\n\n`. Serializing our own types
/// cannot fail; if a future type could, the stream gets an error event
/// instead of a panic mid-response.
pub fn sse_data(json: &impl Serialize) -> Bytes {
    let mut out = b"data: ".to_vec();
    if let Err(e) = serde_json::to_writer(&mut out, json) {
        tracing::error!(error = %e, "failed to serialize an SSE event");
        out.truncate(b"data: ".len());
        let body = ApiError::EngineError("failed to serialize a stream event".to_owned()).body();
        // An `ErrorBody` is strings and options only: this cannot fail.
        let _ = serde_json::to_writer(&mut out, &body);
    }
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

#[cfg(test)]
#[path = "openai_types_tests.rs"]
mod tests;
