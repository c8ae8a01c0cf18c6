//! `POST /v1/completions`: prompts as text or token ids, wording in the legacy completions
//! format.

use std::collections::HashMap;

use bytes::Bytes;

use super::generation::{ChoiceDelta, TokenDetail};
use super::openai_types::{
    CompletionChoice, CompletionChunk, CompletionLogprobs, CompletionRequest, CompletionResponse, TopLogprobMap, Usage,
    finite_logprob,
};
use super::pipeline::{Endpoint, ResponseFormat, ResponseHead};
use super::prompt_echo::wire_prompt_logprobs;
use super::sse::{ChunkFormat, sse_data};
use crate::engine::types::Operation;

/// The completions endpoint's part of the pipeline (its rules: `validation::completions`).
pub struct Completions;

impl Endpoint for Completions {
    type Request = CompletionRequest;
    type Format = CompletionFormat;
    const ID_PREFIX: &'static str = "cmpl";
    const OPERATION: Operation = Operation::TextCompletion;

    fn format(_output: (), head: ResponseHead) -> CompletionFormat {
        CompletionFormat {
            head,
            offsets: HashMap::new(),
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
