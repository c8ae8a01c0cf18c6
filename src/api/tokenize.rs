//! vLLM's `POST /tokenize` and `POST /detokenize`: the served model's tokenizer (and, for
//! messages, its chat template) as the generation endpoints use them, so a client can count
//! and inspect tokens before sending a prompt.

use std::sync::Arc;

use actix_web::{HttpResponse, web};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use tokenizers::Tokenizer;

use super::AppState;
use super::errors::ApiError;
use super::json_body::{JsonBody, parse};
use super::openai_types::{
    DetokenizeRequest, DetokenizeResponse, TokenizeChatRequest, TokenizeRequest, TokenizeResponse,
};
use super::prompt::render_off_the_worker;
use super::tool_calls::{template_messages, template_tools};
use super::validation::{check_model, check_prompt_ids};
use crate::model::chat_template::ChatTemplate;
use crate::tokenizer::encode_prompt;

/// Which of the two shapes a body is: only `messages` tells them apart.
#[derive(Deserialize)]
struct Shape {
    #[serde(default)]
    prompt: Option<IgnoredAny>,
    #[serde(default)]
    messages: Option<IgnoredAny>,
}

impl TokenizeRequest {
    /// A body with `messages` is a chat request; one with `prompt` as well is refused.
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        let shape: Option<Shape> = serde_json::from_str(text).ok();
        match shape {
            Some(Shape {
                prompt: Some(_),
                messages: Some(_),
            }) => Err(ApiError::invalid(
                "messages",
                "send either `prompt` or `messages`, not both",
            )),
            Some(Shape { messages: Some(_), .. }) => parse(text).map(TokenizeRequest::Chat),
            _ => parse(text).map(TokenizeRequest::Completion),
        }
    }
}

pub async fn tokenize(
    state: web::Data<AppState>,
    JsonBody(body): JsonBody<Box<RawValue>>,
) -> Result<HttpResponse, ApiError> {
    let request = TokenizeRequest::parse(body.get())?;
    let model = &state.model;
    let (text, add_special_tokens, return_token_strs) = match request {
        TokenizeRequest::Completion(r) => {
            check_model(model, r.model.as_deref())?;
            (r.prompt, r.add_special_tokens.unwrap_or(true), r.return_token_strs)
        }
        TokenizeRequest::Chat(r) => {
            check_model(model, r.model.as_deref())?;
            let add_special_tokens = r.add_special_tokens.unwrap_or(true);
            let return_token_strs = r.return_token_strs;
            (
                render_chat(&model.chat_template, r).await?,
                add_special_tokens,
                return_token_strs,
            )
        }
    };
    let tokenizer = Arc::clone(&model.tokenizer);
    let (tokens, token_strs) = web::block(move || encode(&tokenizer, &text, add_special_tokens, return_token_strs))
        .await
        .map_err(|e| ApiError::EngineError(format!("tokeniser task failed: {e}")))??;
    Ok(HttpResponse::Ok().json(TokenizeResponse {
        count: tokens.len() as u32,
        max_model_len: model.max_model_len as u32,
        tokens,
        token_strs,
    }))
}

fn encode(
    tokenizer: &Tokenizer,
    text: &str,
    add_special_tokens: bool,
    return_token_strs: Option<bool>,
) -> Result<(Vec<u32>, Option<Vec<String>>), ApiError> {
    let tokens = encode_prompt(tokenizer, text, add_special_tokens)
        .map_err(|e| ApiError::invalid("prompt", format!("cannot tokenise: {e}")))?;
    let strs = return_token_strs.unwrap_or(false).then(|| {
        tokens
            .iter()
            .map(|&t| tokenizer.id_to_token(t).unwrap_or_default())
            .collect()
    });
    Ok((tokens, strs))
}

/// The messages through the chat template, as vLLM renders them for `/tokenize`.
async fn render_chat(template: &Arc<ChatTemplate>, request: TokenizeChatRequest) -> Result<String, ApiError> {
    if request.chat_template.is_some() {
        return Err(ApiError::invalid(
            "chat_template",
            "`chat_template` is not accepted in requests: the server renders only the model's \
             template or the one its operator configured",
        ));
    }
    let continue_final = request.continue_final_message.unwrap_or(false);
    let add_generation_prompt = request.add_generation_prompt.unwrap_or(true);
    if continue_final && add_generation_prompt {
        return Err(ApiError::invalid(
            "continue_final_message",
            "`continue_final_message` and `add_generation_prompt` cannot both be true",
        ));
    }
    let messages = template_messages(&request.messages)?;
    let tools = template_tools(request.tools.as_deref());
    let final_content = messages.last().map(|m| m.content.clone()).unwrap_or_default();
    let rendered = render_off_the_worker(template, messages, tools, add_generation_prompt).await?;
    if !continue_final {
        return Ok(rendered);
    }
    // As vLLM: cut the text after the last occurrence of the final message's content.
    match rendered.rfind(final_content.as_str()) {
        Some(at) if !final_content.is_empty() => Ok(rendered[..at + final_content.len()].to_owned()),
        _ => Err(ApiError::invalid(
            "continue_final_message",
            "the rendered prompt does not contain the final message's content",
        )),
    }
}

pub async fn detokenize(
    state: web::Data<AppState>,
    JsonBody(body): JsonBody<DetokenizeRequest>,
) -> Result<HttpResponse, ApiError> {
    check_model(&state.model, body.model.as_deref())?;
    check_prompt_ids(&body.tokens, state.model.token_id_bound, "tokens")?;
    let tokenizer = Arc::clone(&state.model.tokenizer);
    let prompt = web::block(move || tokenizer.decode(&body.tokens, false))
        .await
        .map_err(|e| ApiError::EngineError(format!("tokeniser task failed: {e}")))?
        .map_err(|e| ApiError::invalid("tokens", format!("cannot decode: {e}")))?;
    Ok(HttpResponse::Ok().json(DetokenizeResponse { prompt }))
}
