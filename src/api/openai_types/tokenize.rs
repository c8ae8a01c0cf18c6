//! Bodies of vLLM's `POST /tokenize` and `POST /detokenize`, with vLLM's field names and
//! defaults, so clients written against vLLM work unchanged.

use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::OneOfBuilder;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use super::schemas;
use super::{ChatMessageIn, ToolDefinition};
use crate::api::json_body::RequestBody;

/// `/tokenize` with a text prompt.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TokenizeCompletionRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub prompt: String,
    /// Let the tokenizer add its special tokens (vLLM's default: true).
    #[serde(default)]
    pub add_special_tokens: Option<bool>,
    /// Also return each token's vocabulary string.
    #[serde(default)]
    pub return_token_strs: Option<bool>,
}

/// `/tokenize` with chat messages, rendered by the chat template as the chat endpoint does.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TokenizeChatRequest {
    #[serde(default)]
    pub model: Option<String>,
    #[schema(min_items = 1)]
    pub messages: Vec<ChatMessageIn>,
    /// Append the template's assistant header (default true).
    #[serde(default)]
    pub add_generation_prompt: Option<bool>,
    /// End the prompt inside the last message so generation continues it (default false;
    /// not with `add_generation_prompt: true`).
    #[serde(default)]
    pub continue_final_message: Option<bool>,
    /// The model's BOS when the template did not render it (default true, as the chat
    /// endpoint does; vLLM's default is false).
    #[serde(default)]
    pub add_special_tokens: Option<bool>,
    #[serde(default)]
    pub return_token_strs: Option<bool>,
    /// Functions the chat template sees, as in a chat request (vLLM's field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<ToolDefinition>>,
    /// Refused like the chat endpoint's: the server renders only its own template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = schemas::refused_chat_template)]
    pub chat_template: Option<serde_json::Value>,
}

/// The body of `/tokenize`: a body with `messages` is a chat request, otherwise a text one.
#[derive(Debug, Clone, PartialEq)]
pub enum TokenizeRequest {
    Completion(TokenizeCompletionRequest),
    Chat(TokenizeChatRequest),
}

impl PartialSchema for TokenizeRequest {
    fn schema() -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(Ref::from_schema_name("TokenizeCompletionRequest"))
            .item(Ref::from_schema_name("TokenizeChatRequest"))
            .into()
    }
}

impl ToSchema for TokenizeRequest {
    fn schemas(out: &mut Vec<(String, RefOr<Schema>)>) {
        out.push(("TokenizeCompletionRequest".into(), TokenizeCompletionRequest::schema()));
        <TokenizeCompletionRequest as ToSchema>::schemas(out);
        out.push(("TokenizeChatRequest".into(), TokenizeChatRequest::schema()));
        <TokenizeChatRequest as ToSchema>::schemas(out);
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TokenizeResponse {
    /// Number of tokens.
    pub count: u32,
    /// The served model's context length.
    pub max_model_len: u32,
    pub tokens: Vec<u32>,
    /// Each token's vocabulary string, with `return_token_strs: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_strs: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DetokenizeRequest {
    #[serde(default)]
    pub model: Option<String>,
    #[schema(schema_with = schemas::token_ids)]
    pub tokens: Vec<u32>,
}

impl RequestBody for DetokenizeRequest {}
impl RequestBody for TokenizeCompletionRequest {}
impl RequestBody for TokenizeChatRequest {}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DetokenizeResponse {
    /// The tokens' text, special tokens included (as vLLM decodes them).
    pub prompt: String,
}
