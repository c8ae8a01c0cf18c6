//! `POST /v1/completions`.

use std::time::Instant;

use actix_web::{HttpResponse, web};
use bytes::Bytes;

use super::errors::ApiError;
use super::generation::{ChoiceDelta, TokenDetail};
use super::openai_types::{
    CompletionChoice, CompletionChunk, CompletionLogprobs, CompletionRequest, CompletionResponse, PromptInput,
    TopLogprobMap, Usage, finite_logprob, sse_data,
};
use super::prompt::{check_prompt, tokenize};
use super::sse::{ChunkFormat, sse_response};
use super::{AppState, unix_now};
use crate::engine::types::Operation;

pub async fn create_completion(
    state: web::Data<AppState>,
    body: web::Json<CompletionRequest>,
) -> Result<HttpResponse, ApiError> {
    let arrival = Instant::now();
    let request = body.into_inner();
    state.check_model(request.model.as_deref())?;
    let params = request.sampling_params()?;
    let vocab = state.model.tokenizer.get_vocab_size(true);
    let prompts = match request.prompt {
        PromptInput::Text(text) => tokenize(&state.model.tokenizer, vec![text]).await?,
        PromptInput::TextBatch(texts) => tokenize(&state.model.tokenizer, texts).await?,
        PromptInput::Tokens(ids) => vec![ids],
        PromptInput::TokenBatch(batch) => batch,
    };
    if prompts.is_empty() {
        return Err(ApiError::invalid("prompt", "`prompt` must not be empty"));
    }
    for ids in &prompts {
        check_prompt(ids, vocab, "prompt")?;
    }
    let id = format!("cmpl-{}", uuid::Uuid::new_v4().simple());
    let prompt_tokens = prompts.iter().map(Vec::len).sum();
    let choices = state
        .submit_all(&id, prompts, params, Operation::TextCompletion, arrival, "prompt")
        .await?;
    let created = unix_now();
    let model = state.model.name.clone();
    if request.stream.unwrap_or(false) {
        let include_usage = request.stream_options.and_then(|o| o.include_usage).unwrap_or(false);
        let format = CompletionFormat {
            id,
            created,
            model,
            offsets: Default::default(),
            per_request_metrics: state.per_request_metrics,
        };
        return Ok(sse_response(choices, prompt_tokens, include_usage, format));
    }
    let results = futures_util::future::try_join_all(choices.into_iter().map(super::generation::collect)).await?;
    let mut completion_tokens = 0;
    let choices = results
        .into_iter()
        .map(|(index, delta)| {
            completion_tokens += delta.end.map_or(0, |e| e.usage.completion_tokens);
            let logprobs = (!delta.tokens.is_empty()).then(|| completion_logprobs(&delta.tokens, 0));
            CompletionChoice {
                index,
                text: delta.text,
                logprobs,
                finish_reason: delta.end.map(|e| e.reason.as_str().to_string()),
                metrics: delta
                    .end
                    .filter(|_| state.per_request_metrics)
                    .map(|e| e.request_metrics()),
            }
        })
        .collect();
    let usage = Usage::new(prompt_tokens as u32, completion_tokens as u32);
    Ok(HttpResponse::Ok().json(CompletionResponse::new(id, created, model, choices, usage)))
}

/// The legacy parallel-array logprobs; `text_offset` counts bytes from `start_offset`.
fn completion_logprobs(tokens: &[TokenDetail], start_offset: u32) -> CompletionLogprobs {
    let mut offset = start_offset;
    let mut out = CompletionLogprobs::default();
    for t in tokens {
        out.tokens.push(t.text.clone());
        out.token_logprobs.push(finite_logprob(t.logprob));
        out.top_logprobs.push(Some(TopLogprobMap(
            t.top.iter().map(|(s, l)| (s.clone(), finite_logprob(*l))).collect(),
        )));
        out.text_offset.push(offset);
        offset += t.text.len() as u32;
    }
    out
}

struct CompletionFormat {
    id: String,
    created: u64,
    model: String,
    /// Per choice: bytes of text sent so far (for `text_offset`).
    offsets: std::collections::HashMap<u32, u32>,
    per_request_metrics: bool,
}

impl ChunkFormat for CompletionFormat {
    fn opening(&mut self, _index: u32) -> Option<Bytes> {
        None
    }

    fn delta(&mut self, index: u32, delta: &ChoiceDelta) -> Bytes {
        let offset = self.offsets.entry(index).or_default();
        let logprobs = (!delta.tokens.is_empty()).then(|| completion_logprobs(&delta.tokens, *offset));
        *offset += delta.tokens.iter().map(|t| t.text.len() as u32).sum::<u32>();
        let choice = CompletionChoice {
            index,
            text: delta.text.clone(),
            logprobs,
            finish_reason: delta.end.map(|e| e.reason.as_str().to_string()),
            metrics: delta
                .end
                .filter(|_| self.per_request_metrics)
                .map(|e| e.request_metrics()),
        };
        sse_data(&CompletionChunk::new(
            self.id.clone(),
            self.created,
            self.model.clone(),
            vec![choice],
        ))
    }

    fn usage(&mut self, usage: Usage) -> Bytes {
        let mut chunk = CompletionChunk::new(self.id.clone(), self.created, self.model.clone(), Vec::new());
        chunk.usage = Some(usage);
        sse_data(&chunk)
    }
}
