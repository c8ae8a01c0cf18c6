//! `POST /v1/completions`: prompts as text or token ids, wording in the legacy completions
//! format.

use std::collections::HashMap;

use actix_web::{HttpRequest, HttpResponse, web};
use bytes::Bytes;
use tokenizers::Tokenizer;

use super::errors::ApiError;
use super::generation::{ChoiceDelta, TokenDetail};
use super::json_body::JsonBody;
use super::limits::PromptSize;
use super::openai_types::{
    CompletionChoice, CompletionChunk, CompletionLogprobs, CompletionRequest, CompletionResponse, PromptInput,
    TopLogprobMap, Usage, finite_logprob,
};
use super::pipeline::{Delivery, Endpoint, ResponseFormat, ResponseHead, serve};
use super::prompt::tokenize;
use super::prompt_echo::wire_prompt_logprobs;
use super::request_log::RequestLog;
use super::sse::{ChunkFormat, sse_data};
use super::structured_output::ConstraintFields;
use super::{AppState, ServedModel};
use crate::engine::sampling_params::SamplingParams;
use crate::engine::types::Operation;

pub async fn create_completion(
    req: HttpRequest,
    state: web::Data<AppState>,
    JsonBody(body): JsonBody<CompletionRequest>,
) -> Result<HttpResponse, ApiError> {
    super::worker_contract::dp_rank::check(&req, body.data_parallel_rank)?;
    serve::<Completions>(&state, body, RequestLog::of(&req)).await
}

/// The completions endpoint's part of the pipeline.
pub struct Completions;

impl Endpoint for Completions {
    type Request = CompletionRequest;
    type Format = CompletionFormat;
    const ID_PREFIX: &'static str = "cmpl";
    const OPERATION: Operation = Operation::TextCompletion;
    const PROMPT_PARAM: &'static str = "prompt";

    fn requested_model(request: &CompletionRequest) -> Option<&str> {
        request.model.as_deref()
    }

    fn sampling_params(request: &CompletionRequest) -> Result<SamplingParams, ApiError> {
        request.sampling_params()
    }

    fn constraint_fields(request: &CompletionRequest) -> ConstraintFields<'_> {
        request.constraint_fields()
    }

    fn max_tokens_param(_request: &CompletionRequest) -> &'static str {
        "max_tokens"
    }

    fn prompt_size(request: &CompletionRequest) -> PromptSize {
        let (prompts, text_bytes) = match &request.prompt {
            PromptInput::Text(text) => (1, text.len()),
            PromptInput::TextBatch(texts) => (texts.len(), texts.iter().map(String::len).sum()),
            PromptInput::Tokens(_) => (1, 0),
            PromptInput::TokenBatch(batch) => (batch.len(), 0),
        };
        PromptSize { prompts, text_bytes }
    }

    fn delivery(request: &CompletionRequest) -> Delivery {
        Delivery::from_request(request.stream, request.stream_options.as_ref())
    }

    fn format(_request: &CompletionRequest, head: ResponseHead, _model: &ServedModel) -> CompletionFormat {
        CompletionFormat {
            head,
            offsets: HashMap::new(),
        }
    }

    async fn prompts(request: CompletionRequest, model: &ServedModel) -> Result<Vec<Vec<u32>>, ApiError> {
        let suffix = request.suffix.filter(|s| !s.is_empty());
        let request_prompt = match suffix {
            Some(suffix) => fill_in_the_middle(&model.tokenizer, request.prompt, &suffix)?,
            None => request.prompt,
        };
        let prompts = match request_prompt {
            PromptInput::Text(text) => tokenize(&model.tokenizer, vec![text]).await?,
            PromptInput::TextBatch(texts) => tokenize(&model.tokenizer, texts).await?,
            PromptInput::Tokens(ids) => vec![ids],
            PromptInput::TokenBatch(batch) => batch,
        };
        if prompts.is_empty() {
            return Err(ApiError::invalid("prompt", "`prompt` must not be empty"));
        }
        Ok(prompts)
    }
}

/// The fill-in-the-middle tokens of StarCoder-style vocabularies.
const FIM_TOKENS: [&str; 3] = ["<fim_prefix>", "<fim_suffix>", "<fim_middle>"];

/// Whether the vocabulary has every fill-in-the-middle token, so `suffix` can be served.
pub fn has_fim_tokens(tokenizer: &Tokenizer) -> bool {
    FIM_TOKENS.iter().all(|t| tokenizer.token_to_id(t).is_some())
}

/// `suffix`: text prompts in the model's fill-in-the-middle format
/// (`<fim_prefix>{prompt}<fim_suffix>{suffix}<fim_middle>`); a model without those tokens
/// (the default SmolLM2 has none) cannot serve it, so it is refused rather than ignored.
fn fill_in_the_middle(tokenizer: &Tokenizer, prompt: PromptInput, suffix: &str) -> Result<PromptInput, ApiError> {
    if !has_fim_tokens(tokenizer) {
        return Err(ApiError::invalid(
            "suffix",
            "`suffix` needs a model with fill-in-the-middle tokens; the served model has none",
        ));
    }
    let [prefix_token, suffix_token, middle_token] = FIM_TOKENS;
    let wrap = |text: String| format!("{prefix_token}{text}{suffix_token}{suffix}{middle_token}");
    match prompt {
        PromptInput::Text(text) => Ok(PromptInput::Text(wrap(text))),
        PromptInput::TextBatch(texts) => Ok(PromptInput::TextBatch(texts.into_iter().map(wrap).collect())),
        PromptInput::Tokens(_) | PromptInput::TokenBatch(_) => {
            Err(ApiError::invalid("suffix", "`suffix` is served with text prompts only"))
        }
    }
}

/// The legacy parallel-array logprobs. Each position's `top_logprobs` holds the chosen token
/// too (up to `logprobs` + 1 entries; `logprobs: 0` gives the chosen one alone), and
/// `text_offset` counts characters from `start_offset`, as OpenAI and vLLM send them.
fn completion_logprobs(tokens: &[TokenDetail], start_offset: u32) -> CompletionLogprobs {
    let mut offset = start_offset;
    let mut out = CompletionLogprobs::default();
    for t in tokens {
        out.tokens.push(t.text.clone());
        // NaN: the first token of an echoed prompt, which has no logprob (null, as OpenAI).
        let scored = !t.logprob.is_nan();
        out.token_logprobs.push(scored.then(|| finite_logprob(t.logprob)));
        out.top_logprobs.push(scored.then(|| top_with_chosen(t)));
        out.text_offset.push(offset);
        offset += text_chars(&t.text);
    }
    out
}

/// The top alternatives, and the chosen token after them when it is not among them.
fn top_with_chosen(token: &TokenDetail) -> TopLogprobMap {
    let mut top: Vec<(String, f32)> = token.top.iter().map(|(s, l)| (s.clone(), finite_logprob(*l))).collect();
    if !top.iter().any(|(s, _)| *s == token.text) {
        top.push((token.text.clone(), finite_logprob(token.logprob)));
    }
    TopLogprobMap(top)
}

/// A text's length in characters, the unit of `text_offset`.
fn text_chars(text: &str) -> u32 {
    text.chars().count() as u32
}

pub struct CompletionFormat {
    head: ResponseHead,
    /// Per choice: characters of text sent so far (for `text_offset`).
    offsets: HashMap<u32, u32>,
}

impl CompletionFormat {
    fn choice(&self, index: u32, delta: &ChoiceDelta, text: String, start_offset: u32) -> CompletionChoice {
        CompletionChoice {
            index,
            text,
            logprobs: (!delta.tokens.is_empty()).then(|| completion_logprobs(&delta.tokens, start_offset)),
            finish_reason: delta.finish_reason(),
            metrics: self.head.metrics(delta),
            prompt_logprobs: delta.prompt_logprobs.as_deref().map(wire_prompt_logprobs),
        }
    }

    fn chunk(&self, choices: Vec<CompletionChoice>) -> CompletionChunk {
        let h = &self.head;
        CompletionChunk::new(h.id.clone(), h.created, h.model.clone(), choices)
    }
}

impl ChunkFormat for CompletionFormat {
    fn opening(&mut self, _index: u32) -> Option<Bytes> {
        None
    }

    fn delta(&mut self, index: u32, delta: &ChoiceDelta, usage: Option<Usage>) -> Option<Bytes> {
        let offset = self.offsets.get(&index).copied().unwrap_or(0);
        let choice = self.choice(index, delta, delta.text.clone(), offset);
        let sent: u32 = delta.tokens.iter().map(|t| text_chars(&t.text)).sum();
        *self.offsets.entry(index).or_default() += sent;
        let mut chunk = self.chunk(vec![choice]);
        chunk.usage = usage;
        Some(sse_data(&chunk))
    }

    fn usage(&mut self, usage: Usage) -> Bytes {
        let mut chunk = self.chunk(Vec::new());
        chunk.usage = Some(usage);
        sse_data(&chunk)
    }
}

impl ResponseFormat for CompletionFormat {
    fn response(self, choices: Vec<(u32, ChoiceDelta)>, usage: Usage) -> serde_json::Result<Vec<u8>> {
        let choices = choices
            .into_iter()
            .map(|(index, mut delta)| {
                let text = std::mem::take(&mut delta.text);
                self.choice(index, &delta, text, 0)
            })
            .collect();
        let h = self.head;
        serde_json::to_vec(&CompletionResponse::new(h.id, h.created, h.model, choices, usage))
    }
}
