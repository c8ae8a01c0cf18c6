//! Request bodies of the completions and chat APIs.
//!
//! Every optional knob stays an `Option` so `api::validation` can tell "absent" from
//! "default" and resolve defaults in one place; the fields several bodies share are written
//! once, in `fields`. Unknown fields are ignored (no
//! `deny_unknown_fields`): clients send many fields (`tools`, `response_format`, ...) that a
//! strict server would reject.

use serde::{Deserialize, Serialize};
use utoipa::openapi::{RefOr, schema::Schema};
use utoipa::{PartialSchema, ToSchema};

use super::fields::{CommonFields, ConstraintFields, SamplingFields};
use super::schemas;
use super::tools::{ToolCall, ToolChoice, ToolDefinition};
use crate::api::errors::ApiError;

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
impl PartialSchema for PromptInput {
    fn schema() -> RefOr<Schema> {
        schemas::prompt_input()
    }
}

impl ToSchema for PromptInput {
    fn schemas(out: &mut Vec<(String, RefOr<Schema>)>) {
        out.push((schemas::TOKEN_ID.to_owned(), schemas::token_id()));
    }
}

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

impl PartialSchema for StopInput {
    fn schema() -> RefOr<Schema> {
        schemas::stop_input()
    }
}

impl ToSchema for StopInput {}

impl StopInput {
    /// The stop strings as a slice, whichever shape was sent.
    pub fn as_slice(&self) -> &[String] {
        match self {
            StopInput::Single(s) => std::slice::from_ref(s),
            StopInput::Multiple(v) => v,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StreamOptions {
    /// Send a final chunk with `usage` and empty `choices`.
    #[serde(default)]
    pub include_usage: Option<bool>,
    /// vLLM's: with `include_usage`, every chunk also carries its choice's `usage` so far.
    #[serde(default)]
    pub continuous_usage_stats: Option<bool>,
}

/// Body of `POST /v1/completions`: its own fields and the groups it shares with chat (and
/// Responses), flattened: the wire body is flat.
// The `#[schema]` ranges state the rules of `api::validation` in the OpenAPI document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CompletionRequest {
    pub prompt: PromptInput,
    /// Defaults to 16, as OpenAI's completions endpoint does.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 4_294_967_295_u32, format = Int64)]
    pub max_tokens: Option<u32>,
    /// Number of top logprobs per token (`0` = only the sampled token).
    #[serde(default)]
    #[schema(maximum = 20)]
    pub logprobs: Option<u32>,
    /// Prepend the prompt to the choice's text (and, with `logprobs`, its tokens' logprobs).
    #[serde(default)]
    pub echo: Option<bool>,
    /// Text after the completion (fill-in-the-middle): refused for models without FIM tokens.
    #[serde(default)]
    pub suffix: Option<String>,
    /// Accepted when equal to `n` (or absent).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 16)]
    pub best_of: Option<u32>,
    #[serde(flatten)]
    #[schema(inline)]
    pub common: CommonFields,
    #[serde(flatten)]
    #[schema(inline)]
    pub sampling: SamplingFields,
    #[serde(flatten)]
    #[schema(inline)]
    pub constraints: ConstraintFields,
}

/// Chat roles OpenAI accepts; an unknown role is a 400 from serde.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
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

impl PartialSchema for MessageContent {
    fn schema() -> RefOr<Schema> {
        schemas::message_content(ContentPart::schema())
    }
}

impl ToSchema for MessageContent {}

/// One part of a message's content; only text parts are served.
// `type` is kept as a string (not an enum) so an image or audio part reaches validation and
// gets an error naming `messages[i].content` rather than an opaque serde error; the document
// states what validation accepts: a `text` part with its `text`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ContentPart {
    #[serde(rename = "type")]
    #[schema(schema_with = schemas::content_part_type)]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = String, required = true)]
    pub text: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatMessageIn {
    pub role: ChatRole,
    /// Optional because assistant turns with tool calls carry `null`.
    #[serde(default)]
    pub content: Option<MessageContent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The calls an assistant turn made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// The call a `tool` message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
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

/// Body of `POST /v1/chat/completions`: its own fields and the groups it shares with
/// completions (and Responses), flattened: the wire body is flat.
// The `#[schema]` ranges state the rules of `api::validation` in the OpenAPI document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatCompletionRequest {
    #[schema(min_items = 1)]
    pub messages: Vec<ChatMessageIn>,
    /// Deprecated by OpenAI in favour of `max_completion_tokens`, which wins.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 4_294_967_295_u32, format = Int64)]
    pub max_tokens: Option<u32>,
    /// Absent: up to the end of the context.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 4_294_967_295_u32, format = Int64)]
    pub max_completion_tokens: Option<u32>,
    #[serde(default)]
    pub logprobs: Option<bool>,
    /// Requires `logprobs: true`.
    #[serde(default)]
    #[schema(maximum = 20)]
    pub top_logprobs: Option<u32>,
    /// vLLM renders a template sent with the request; kiln never does (a template is code
    /// run on the server), so any value but `null` is refused with a 400 naming this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = schemas::refused_chat_template)]
    pub chat_template: Option<serde_json::Value>,
    /// Functions the model may call; the chat template sees them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<ToolDefinition>>,
    /// Absent: `auto` when `tools` are sent, else `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// `false`: at most one call per choice (`required`); default `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(flatten)]
    #[schema(inline)]
    pub common: CommonFields,
    #[serde(flatten)]
    #[schema(inline)]
    pub sampling: SamplingFields,
    #[serde(flatten)]
    #[schema(inline)]
    pub constraints: ConstraintFields,
}

impl ChatCompletionRequest {
    /// Bytes of text in every message's content, before the template adds its own.
    pub fn content_bytes(&self) -> usize {
        let part_bytes = |p: &ContentPart| p.text.as_ref().map_or(0, String::len);
        self.messages
            .iter()
            .map(|m| match &m.content {
                None => 0,
                Some(MessageContent::Text(s)) => s.len(),
                Some(MessageContent::Parts(parts)) => parts.iter().map(part_bytes).sum(),
            })
            .sum()
    }

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
