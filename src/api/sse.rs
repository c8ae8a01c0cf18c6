//! Server-sent events for the streaming endpoints: the `data:` framing, and the stream that
//! merges choices as their tokens arrive, turns each delta into a chunk, adds an optional
//! usage chunk, then `[DONE]`. That stream runs on an output thread ([`OutputPool`]): the
//! chunks' JSON (a delta with 20 alternatives a token is kilobytes) is written there, and
//! the HTTP worker only forwards the bytes. When the client goes away actix drops the body,
//! the output thread sees it and drops the choices, which aborts them in the engine.

use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use actix_web::{HttpResponse, ResponseError as _};
use bytes::Bytes;
use futures_util::stream::{self, Stream, StreamExt};
use serde::Serialize;

use tokio::sync::mpsc;

use super::errors::ApiError;
use super::generation::{ChoiceDelta, ChoiceStream, cached_prompt_tokens};
use super::openai_types::Usage;
use super::output_pool::OutputPool;
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

/// Chunks formatted ahead of the client: enough to keep the socket busy, few enough that a
/// client that stops reading holds little (the stall watch ends it).
const CHUNKS_AHEAD: usize = 64;

/// Formats one endpoint's stream chunks (on an output thread).
pub trait ChunkFormat: Unpin + Send + 'static {
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

/// The SSE response for `choices`, formatted on an output thread. A client that stops
/// taking chunks for `stall_timeout` is taken as gone (see [`watch_stalls`]).
pub fn sse_response<F: ChunkFormat>(
    choices: Vec<ChoiceStream>,
    prompt: PromptUsage,
    usage_chunks: UsageChunks,
    stall_timeout: Duration,
    format: F,
) -> HttpResponse {
    let handles = choices.iter().map(ChoiceStream::abort_handle).collect();
    let indices = choices.iter().map(|c| c.index).collect();
    let failure = StreamFailure::default();
    let seen = failure.clone();
    let merged =
        stream::select_all(choices.into_iter().map(|c| Box::pin(choice_items(c)))).inspect(move |(_, item)| {
            if let Err(error) = item {
                seen.set(error.status_code().as_u16());
            }
        });
    let body = formatted_on_output_thread(sse_chunks(indices, merged, prompt, usage_chunks, format));
    let mut response = HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .streaming(watch_stalls(Box::pin(body), handles, stall_timeout));
    response.extensions_mut().insert(failure);
    response
}

/// Set when a stream ends with an error event after its 200 was sent: the error's status
/// code. The HTTP metrics middleware reads it from the response's extensions once the body
/// has ended, for `request_failure_total{stage="streaming"}`.
#[derive(Debug, Clone, Default)]
pub struct StreamFailure(Arc<AtomicU16>);

impl StreamFailure {
    fn set(&self, code: u16) {
        self.0.store(code, Ordering::Relaxed);
    }

    /// The error's status code, if the stream failed.
    pub fn code(&self) -> Option<u16> {
        Some(self.0.load(Ordering::Relaxed)).filter(|code| *code != 0)
    }
}

/// A body that forwards `chunks`, made on an output thread.
fn formatted_on_output_thread(
    chunks: impl Stream<Item = Bytes> + Send + 'static,
) -> impl Stream<Item = Result<Bytes, actix_web::Error>> + Unpin + 'static {
    let (tx, rx) = mpsc::channel(CHUNKS_AHEAD);
    OutputPool::shared().spawn(forward(chunks, tx));
    Box::pin(stream::unfold(rx, |mut rx| async move {
        let chunk = rx.recv().await?;
        Some((Ok::<_, actix_web::Error>(chunk), rx))
    }))
}

/// Sends `chunks` to the response body until they end or the body is dropped (the client
/// left); then `chunks`, and the choices in it, are dropped at once, which aborts them.
async fn forward(chunks: impl Stream<Item = Bytes>, tx: mpsc::Sender<Bytes>) {
    let mut chunks = std::pin::pin!(chunks);
    loop {
        let next = tokio::select! {
            next = chunks.next() => next,
            () = tx.closed() => return,
        };
        let Some(chunk) = next else {
            return;
        };
        if tx.send(chunk).await.is_err() {
            return;
        }
    }
}

/// The stream's chunks: openings for the choices `indices`, a chunk per delta as `merged`
/// brings them, the usage chunk when asked, then the end marker (an error event first when a
/// choice failed). Lazy: nothing is formatted until it is polled.
fn sse_chunks<F: ChunkFormat>(
    indices: Vec<u32>,
    merged: impl Stream<Item = Item> + Unpin,
    prompt: PromptUsage,
    usage_chunks: UsageChunks,
    format: F,
) -> impl Stream<Item = Bytes> {
    // (completion tokens, cached prompt tokens) so far.
    let state = (merged, format, (0usize, 0usize), Some(indices), false);
    stream::unfold(
        state,
        move |(mut merged, mut format, mut counts, opening, done)| async move {
            if done {
                return None;
            }
            if let Some(indices) = opening {
                let chunks: Vec<Bytes> = indices.into_iter().filter_map(|i| format.opening(i)).collect();
                return Some((chunks, (merged, format, counts, None, false)));
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
                    let chunks: Vec<Bytes> = format.delta(index, &delta, usage).into_iter().collect();
                    Some((chunks, (merged, format, counts, None, false)))
                }
                Some((_, Err(error))) => {
                    tracing::warn!(%error, "stream ended by an engine error");
                    let chunk = sse_data(&error.body());
                    let chunks = std::iter::once(chunk).chain(format.done()).collect();
                    Some((chunks, (merged, format, counts, None, true)))
                }
                None => {
                    let mut tail = Vec::new();
                    if usage_chunks.closing {
                        let usage = Usage::new(prompt.tokens as u32, counts.0 as u32).with_cached(counts.1 as u32);
                        tail.push(format.usage(usage));
                    }
                    tail.extend(format.done());
                    Some((tail, (merged, format, counts, None, true)))
                }
            }
        },
    )
    .flat_map(stream::iter)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use serde_json::json;

    use super::*;

    #[test]
    fn sse_framing() {
        assert_eq!(&sse_data(&json!({"a": 1}))[..], b"data: {\"a\":1}\n\n");
        assert_eq!(&sse_done()[..], b"data: [DONE]\n\n");
    }

    /// Records the thread each chunk is formatted on.
    struct WhereFormatted(Arc<Mutex<Vec<String>>>);

    impl WhereFormatted {
        fn note(&self) {
            let name = std::thread::current().name().unwrap_or("unnamed").to_owned();
            self.0.lock().expect("lock").push(name);
        }
    }

    impl ChunkFormat for WhereFormatted {
        fn opening(&mut self, index: u32) -> Option<Bytes> {
            self.note();
            Some(Bytes::from(format!("open {index}")))
        }

        fn delta(&mut self, _index: u32, delta: &ChoiceDelta, _usage: Option<Usage>) -> Option<Bytes> {
            self.note();
            Some(Bytes::from(delta.text.clone()))
        }

        fn usage(&mut self, usage: Usage) -> Bytes {
            self.note();
            Bytes::from(format!("usage {}", usage.completion_tokens))
        }
    }

    #[test]
    fn chunks_are_formatted_on_an_output_thread_and_the_body_only_forwards_them() {
        let threads = Arc::new(Mutex::new(Vec::new()));
        let items = stream::iter((0..3u32).map(|i| {
            let delta = ChoiceDelta {
                text: format!("t{i}"),
                ..ChoiceDelta::default()
            };
            (i % 2, Ok(delta))
        }));
        let prompt = PromptUsage {
            tokens: 1,
            choices_per_prompt: 1,
        };
        let usage = UsageChunks {
            closing: true,
            continuous: false,
        };
        let chunks = sse_chunks(vec![0, 1], items, prompt, usage, WhereFormatted(Arc::clone(&threads)));
        // The body is polled here, as an HTTP worker polls it.
        let body: Vec<Bytes> = futures_executor::block_on(
            formatted_on_output_thread(chunks)
                .map(|chunk| chunk.expect("bytes"))
                .collect(),
        );
        let expected = ["open 0", "open 1", "t0", "t1", "t2", "usage 0", "data: [DONE]\n\n"];
        assert_eq!(body, expected.map(|s| Bytes::from(s.to_owned())));
        let threads = threads.lock().expect("lock");
        assert_eq!(threads.len(), 6, "{threads:?}");
        assert!(
            threads.iter().all(|name| name.starts_with("kiln-output-")),
            "formatted on {threads:?}"
        );
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
