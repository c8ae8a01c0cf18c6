//! `POST /v1/chat/completions`: messages rendered with the model's own chat template, wording
//! in the chat format (a role chunk opens each streamed choice), tool calls read back from
//! the text (see [`super::tool_calls`]).

use std::collections::HashMap;

use bytes::Bytes;

use super::generation::{ChoiceDelta, TokenDetail};
use super::openai_types::{
    ChatChoice, ChatChunkChoice, ChatCompletionChunk, ChatCompletionRequest, ChatCompletionResponse, ChatDelta,
    ChatLogprobs, ChatTokenLogprob, ChatTopLogprob, Usage, finite_logprob,
};
use super::pipeline::{Endpoint, ResponseFormat, ResponseHead};
use super::prompt_echo::wire_prompt_logprobs;
use super::sse::{ChunkFormat, sse_data};
use super::tool_calls::{ToolOutput, ToolStream, shape_output};
use super::validation::ChatOutput;
use crate::engine::types::{FinishReason, Operation};

/// The chat endpoint's part of the pipeline (its rules: `validation::chat`).
pub struct Chat;

impl Endpoint for Chat {
    type Request = ChatCompletionRequest;
    type Format = ChatFormat;
    const ID_PREFIX: &'static str = "chatcmpl";
    const OPERATION: Operation = Operation::Chat;

    fn format(output: ChatOutput, head: ResponseHead) -> ChatFormat {
        ChatFormat {
            head,
            logprobs: output.logprobs,
            tools: output.tools,
            streams: HashMap::new(),
        }
    }
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

pub struct ChatFormat {
    head: ResponseHead,
    /// `logprobs: true`: a whole response carries `logprobs` even when no token came.
    logprobs: bool,
    /// How the text is read for tool calls.
    tools: ToolOutput,
    /// Each streamed choice's reader, by index.
    streams: HashMap<u32, ToolStream>,
}

/// `stop` becomes `tool_calls` when the choice's calls say so; the engine's metrics keep
/// `stop`, as vLLM's do.
fn finish_reason(delta: &ChoiceDelta, tool_calls_finish: bool) -> Option<String> {
    match delta.end {
        Some(end) if tool_calls_finish && end.reason == FinishReason::Stop => Some("tool_calls".to_owned()),
        _ => delta.finish_reason(),
    }
}

impl ChatFormat {
    fn chunk(&self, choices: Vec<ChatChunkChoice>) -> ChatCompletionChunk {
        let h = &self.head;
        ChatCompletionChunk::new(h.id.clone(), h.created, h.model.clone(), choices)
    }
}

impl ChunkFormat for ChatFormat {
    fn opening(&mut self, index: u32) -> Option<Bytes> {
        let delta = ChatDelta {
            role: Some("assistant".into()),
            content: Some(String::new()),
            tool_calls: None,
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

    fn delta(&mut self, index: u32, delta: &ChoiceDelta, usage: Option<Usage>) -> Option<Bytes> {
        let stream = self
            .streams
            .entry(index)
            .or_insert_with(|| ToolStream::new(self.tools.clone()));
        let mut piece = stream.push(&delta.text);
        if delta.end.is_some() {
            piece.append(stream.finish());
        }
        let finish_reason = finish_reason(delta, stream.tool_calls_finish());
        let logprobs = (!delta.tokens.is_empty()).then(|| chat_logprobs(&delta.tokens));
        if piece.content.is_empty() && piece.calls.is_empty() && logprobs.is_none() && finish_reason.is_none() {
            return None;
        }
        let choice = ChatChunkChoice {
            index,
            delta: ChatDelta {
                role: None,
                content: (!piece.content.is_empty()).then_some(piece.content),
                tool_calls: (!piece.calls.is_empty()).then_some(piece.calls),
            },
            logprobs,
            finish_reason,
            metrics: self.head.metrics(delta),
        };
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

impl ResponseFormat for ChatFormat {
    fn response(self, choices: Vec<(u32, ChoiceDelta)>, usage: Usage) -> serde_json::Result<Vec<u8>> {
        let prompt_logprobs = choices
            .iter()
            .find_map(|(_, delta)| delta.prompt_logprobs.as_deref())
            .map(wire_prompt_logprobs);
        let choices = choices
            .into_iter()
            .map(|(index, mut delta)| {
                let shaped = shape_output(&self.tools, std::mem::take(&mut delta.text));
                ChatChoice {
                    index,
                    logprobs: self.logprobs.then(|| chat_logprobs(&delta.tokens)),
                    finish_reason: finish_reason(&delta, shaped.tool_calls_finish),
                    metrics: self.head.metrics(&delta),
                    message: shaped.message,
                }
            })
            .collect();
        let h = self.head;
        let mut response = ChatCompletionResponse::new(h.id, h.created, h.model, choices, usage);
        response.prompt_logprobs = prompt_logprobs;
        serde_json::to_vec(&response)
    }
}
