//! Server-sent events for both streaming endpoints: choices are merged as their tokens
//! arrive, each delta becomes a chunk, an optional usage chunk follows, then `[DONE]`.
//! When the client goes away actix drops this stream, which drops the choices and so
//! aborts them in the engine.

use actix_web::HttpResponse;
use bytes::Bytes;
use futures_util::stream::{self, SelectAll, Stream, StreamExt};

use super::errors::ApiError;
use super::generation::{ChoiceDelta, ChoiceStream};
use super::openai_types::{Usage, sse_data, sse_done};

/// Formats one endpoint's chunks.
pub trait ChunkFormat: Unpin + 'static {
    /// A chunk sent before any token of a choice (chat sends the role), if any.
    fn opening(&mut self, index: u32) -> Option<Bytes>;
    fn delta(&mut self, index: u32, delta: &ChoiceDelta) -> Bytes;
    fn usage(&mut self, usage: Usage) -> Bytes;
}

type Item = (u32, Result<ChoiceDelta, ApiError>);

fn choice_items(choice: ChoiceStream) -> impl Stream<Item = Item> {
    stream::unfold(choice, |mut c| async move {
        let next = c.next().await?;
        Some(((c.index, next), c))
    })
}

/// The SSE response for `choices`; `prompt_tokens` counts each prompt once.
pub fn sse_response<F: ChunkFormat>(
    choices: Vec<ChoiceStream>,
    prompt_tokens: usize,
    include_usage: bool,
    mut format: F,
) -> HttpResponse {
    let opening: Vec<Result<Bytes, actix_web::Error>> =
        choices.iter().filter_map(|c| format.opening(c.index)).map(Ok).collect();
    let merged: SelectAll<_> = stream::select_all(choices.into_iter().map(|c| Box::pin(choice_items(c))));
    let state = (merged, format, 0usize, false);
    let body = stream::unfold(
        state,
        move |(mut merged, mut format, mut completion, done)| async move {
            if done {
                return None;
            }
            match merged.next().await {
                Some((index, Ok(delta))) => {
                    if let Some(end) = &delta.end {
                        completion += end.usage.completion_tokens;
                    }
                    let chunk = format.delta(index, &delta);
                    Some((vec![Ok(chunk)], (merged, format, completion, false)))
                }
                Some((_, Err(error))) => {
                    tracing::warn!(%error, "stream ended by an engine error");
                    let chunk = sse_data(&error.body());
                    Some((vec![Ok(chunk), Ok(sse_done())], (merged, format, completion, true)))
                }
                None => {
                    let mut tail = Vec::new();
                    if include_usage {
                        tail.push(Ok(format.usage(Usage::new(prompt_tokens as u32, completion as u32))));
                    }
                    tail.push(Ok(sse_done()));
                    Some((tail, (merged, format, completion, true)))
                }
            }
        },
    )
    .flat_map(stream::iter);
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .streaming(stream::iter(opening).chain(body))
}
