//! `POST /v1/chat/completions`: messages rendered with the model's own chat template.

use std::time::Instant;

use actix_web::{HttpResponse, web};
use bytes::Bytes;

use super::errors::ApiError;
use super::generation::{ChoiceDelta, TokenDetail};
use super::openai_types::{
    ChatChoice, ChatChunkChoice, ChatCompletionChunk, ChatCompletionRequest, ChatCompletionResponse, ChatDelta,
    ChatLogprobs, ChatResponseMessage, ChatTokenLogprob, ChatTopLogprob, Usage, finite_logprob, sse_data,
};
use super::prompt::{check_prompt, tokenize};
use super::sse::{ChunkFormat, sse_response};
use super::{AppState, unix_now};
use crate::engine::types::Operation;
use crate::model::chat_template::ChatMessage as TemplateMessage;

pub async fn create_chat_completion(
    state: web::Data<AppState>,
    body: web::Json<ChatCompletionRequest>,
) -> Result<HttpResponse, ApiError> {
    let arrival = Instant::now();
    let request = body.into_inner();
    state.check_model(request.model.as_deref())?;
    let params = request.sampling_params()?;
    let messages: Vec<TemplateMessage> = request
        .flattened_messages()?
        .into_iter()
        .map(|m| TemplateMessage {
            role: m.role.to_string(),
            content: m.content,
        })
        .collect();
    let text = state
        .model
        .chat_template
        .render(&messages, true)
        .map_err(|e| ApiError::invalid("messages", format!("the chat template refused the messages: {e}")))?;
    let prompt = tokenize(&state.model.tokenizer, vec![text]).await?;
    check_prompt(&prompt[0], state.model.tokenizer.get_vocab_size(true), "messages")?;
    let prompt_tokens = prompt[0].len();
    let id = format!("chatcmpl-{}", uuid::Uuid::new_v4().simple());
    let choices = state
        .submit_all(&id, prompt, params, Operation::Chat, arrival, "messages")
        .await?;
    let created = unix_now();
    let model = state.model.name.clone();
    if request.stream.unwrap_or(false) {
        let include_usage = request.stream_options.and_then(|o| o.include_usage).unwrap_or(false);
        let format = ChatFormat {
            id,
            created,
            model,
            per_request_metrics: state.per_request_metrics,
        };
        return Ok(sse_response(choices, prompt_tokens, include_usage, format));
    }
    let want_logprobs = request.logprobs.unwrap_or(false);
    let results = futures_util::future::try_join_all(choices.into_iter().map(super::generation::collect)).await?;
    let mut completion_tokens = 0;
    let choices = results
        .into_iter()
        .map(|(index, delta)| {
            completion_tokens += delta.end.map_or(0, |e| e.usage.completion_tokens);
            ChatChoice {
                index,
                logprobs: want_logprobs.then(|| chat_logprobs(&delta.tokens)),
                message: ChatResponseMessage::assistant(delta.text),
                finish_reason: delta.end.map(|e| e.reason.as_str().to_string()),
                metrics: delta
                    .end
                    .filter(|_| state.per_request_metrics)
                    .map(|e| e.request_metrics()),
            }
        })
        .collect();
    let usage = Usage::new(prompt_tokens as u32, completion_tokens as u32);
    Ok(HttpResponse::Ok().json(ChatCompletionResponse::new(id, created, model, choices, usage)))
}

fn chat_logprobs(tokens: &[TokenDetail]) -> ChatLogprobs {
    ChatLogprobs {
        content: tokens
            .iter()
            .map(|t| ChatTokenLogprob {
                token: t.text.clone(),
                logprob: finite_logprob(t.logprob),
                bytes: Some(t.text.as_bytes().to_vec()),
                top_logprobs: t
                    .top
                    .iter()
                    .map(|(s, l)| ChatTopLogprob {
                        token: s.clone(),
                        logprob: finite_logprob(*l),
                        bytes: Some(s.as_bytes().to_vec()),
                    })
                    .collect(),
            })
            .collect(),
    }
}

struct ChatFormat {
    id: String,
    created: u64,
    model: String,
    per_request_metrics: bool,
}

impl ChatFormat {
    fn chunk(&self, choices: Vec<ChatChunkChoice>) -> ChatCompletionChunk {
        ChatCompletionChunk::new(self.id.clone(), self.created, self.model.clone(), choices)
    }
}

impl ChunkFormat for ChatFormat {
    fn opening(&mut self, index: u32) -> Option<Bytes> {
        let delta = ChatDelta {
            role: Some("assistant".into()),
            content: Some(String::new()),
        };
        let choice = ChatChunkChoice {
            index,
            delta,
            logprobs: None,
            finish_reason: None,
            metrics: None,
        };
        Some(sse_data(&self.chunk(vec![choice])))
    }

    fn delta(&mut self, index: u32, delta: &ChoiceDelta) -> Bytes {
        let choice = ChatChunkChoice {
            index,
            delta: ChatDelta {
                role: None,
                content: (!delta.text.is_empty()).then(|| delta.text.clone()),
            },
            logprobs: (!delta.tokens.is_empty()).then(|| chat_logprobs(&delta.tokens)),
            finish_reason: delta.end.map(|e| e.reason.as_str().to_string()),
            metrics: delta
                .end
                .filter(|_| self.per_request_metrics)
                .map(|e| e.request_metrics()),
        };
        sse_data(&self.chunk(vec![choice]))
    }

    fn usage(&mut self, usage: Usage) -> Bytes {
        let mut chunk = self.chunk(Vec::new());
        chunk.usage = Some(usage);
        sse_data(&chunk)
    }
}
