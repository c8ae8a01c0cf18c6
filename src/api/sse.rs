//! Server-sent events for both streaming endpoints: the `data:` framing, and the stream that
//! merges choices as their tokens arrive, turns each delta into a chunk, adds an optional
//! usage chunk, then `[DONE]`. When the client goes away actix drops this stream, which drops
//! the choices and so aborts them in the engine.

use std::time::Duration;

use actix_web::HttpResponse;
use bytes::Bytes;
use futures_util::stream::{self, SelectAll, Stream, StreamExt};
use serde::Serialize;

use super::errors::ApiError;
use super::generation::{ChoiceDelta, ChoiceStream, cached_prompt_tokens};
use super::openai_types::Usage;
use super::stall_watch::watch_stalls;

/// The stream terminator OpenAI clients wait for.
pub const SSE_DONE: &[u8] = b"data: [DONE]\n\n";

/// [`SSE_DONE`] as a body chunk.
pub fn sse_done() -> Bytes {
    Bytes::from_static(SSE_DONE)
}

/// One server-sent event, `data: {json}\n\n`. Serializing our own types cannot fail; if a
/// future type could, the stream gets an error event instead of a panic mid-response.
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

/// Formats one endpoint's stream chunks.
pub trait ChunkFormat: Unpin + 'static {
    /// A chunk sent before any token of a choice (chat sends the role), if any.
    fn opening(&mut self, index: u32) -> Option<Bytes>;
    /// One choice's new output, with its usage so far when every chunk carries one; `None`
    /// when there is nothing to send yet (text held back).
    fn delta(&mut self, index: u32, delta: &ChoiceDelta, usage: Option<Usage>) -> Option<Bytes>;
    /// The closing usage chunk (`stream_options.include_usage`).
    fn usage(&mut self, usage: Usage) -> Bytes;
    /// The stream's end marker: `[DONE]` for the chat and completions APIs.
    fn done(&mut self) -> Option<Bytes> {
        Some(sse_done())
    }
}

type Item = (u32, Result<ChoiceDelta, ApiError>);

fn choice_items(choice: ChoiceStream) -> impl Stream<Item = Item> {
    stream::unfold(choice, |mut c| async move {
        let next = c.next().await?;
        Some(((c.index, next), c))
    })
}

/// A body's prompt tokens (each prompt once) and choices per prompt, for its usage chunk.
#[derive(Debug, Clone, Copy)]
pub struct PromptUsage {
    pub tokens: usize,
    pub choices_per_prompt: u32,
}

/// The SSE response for `choices`. A client that stops taking chunks for `stall_timeout` is
/// taken as gone (see [`watch_stalls`]).
pub fn sse_response<F: ChunkFormat>(
    choices: Vec<ChoiceStream>,
    prompt: PromptUsage,
    usage_chunks: UsageChunks,
    stall_timeout: Duration,
    mut format: F,
) -> HttpResponse {
    let handles = choices.iter().map(ChoiceStream::abort_handle).collect();
    let opening: Vec<Result<Bytes, actix_web::Error>> =
        choices.iter().filter_map(|c| format.opening(c.index)).map(Ok).collect();
    let merged: SelectAll<_> = stream::select_all(choices.into_iter().map(|c| Box::pin(choice_items(c))));
    // (completion tokens, cached prompt tokens) so far.
    let state = (merged, format, (0usize, 0usize), false);
    let body = stream::unfold(state, move |(mut merged, mut format, mut counts, done)| async move {
        if done {
            return None;
        }
        match merged.next().await {
            Some((index, Ok(delta))) => {
                if let Some(end) = &delta.end {
                    counts.0 += end.usage.completion_tokens;
                    let ends = std::iter::once((index, end.usage.cached_prompt_tokens));
                    counts.1 += cached_prompt_tokens(ends, prompt.choices_per_prompt);
                }
                let usage = usage_chunks.continuous.then(|| {
                    let (prompt_tokens, completion_tokens) = delta.tokens_so_far;
                    Usage::new(prompt_tokens as u32, completion_tokens as u32)
                });
                let chunks = format.delta(index, &delta, usage).into_iter().map(Ok).collect();
                Some((chunks, (merged, format, counts, false)))
            }
            Some((_, Err(error))) => {
                tracing::warn!(%error, "stream ended by an engine error");
                let chunk = sse_data(&error.body());
                let chunks = std::iter::once(chunk).chain(format.done()).map(Ok).collect();
                Some((chunks, (merged, format, counts, true)))
            }
            None => {
                let mut tail = Vec::new();
                if usage_chunks.closing {
                    let usage = Usage::new(prompt.tokens as u32, counts.0 as u32).with_cached(counts.1 as u32);
                    tail.push(Ok(format.usage(usage)));
                }
                tail.extend(format.done().map(Ok));
                Some((tail, (merged, format, counts, true)))
            }
        }
    })
    .flat_map(stream::iter);
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .streaming(watch_stalls(
            Box::pin(stream::iter(opening).chain(body)),
            handles,
            stall_timeout,
        ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn sse_framing() {
        assert_eq!(&sse_data(&json!({"a": 1}))[..], b"data: {\"a\":1}\n\n");
        assert_eq!(&sse_done()[..], b"data: [DONE]\n\n");
    }
}

/// Where a stream reports usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UsageChunks {
    /// A closing chunk with the body's usage (`include_usage`).
    pub closing: bool,
    /// Every chunk with its choice's usage so far (vLLM's `continuous_usage_stats`, which
    /// counts only with `include_usage`, as in vLLM).
    pub continuous: bool,
}
