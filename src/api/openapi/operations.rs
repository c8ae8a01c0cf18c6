//! One `#[utoipa::path]` per route of `api::routes`: what each accepts and answers. The
//! functions are markers for the derive (the handlers live beside the route table); the tests
//! check these operations against the table and a real server. While the model loads, every
//! route but `/live` answers 503 (see `server::loading`); with API keys, every route but
//! `api::auth::OPEN_PATHS` may answer 401.

#![allow(dead_code)]

use std::collections::BTreeMap;

use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};
use utoipa::{IntoResponses, PartialSchema};

use crate::api::errors::ErrorBody;
use crate::api::openai_types::{
    ChatCompletionRequest, ChatCompletionResponse, CompletionRequest, CompletionResponse, DetokenizeRequest,
    DetokenizeResponse, ModelList, TokenizeRequest, TokenizeResponse,
};
use crate::api::responses::ResponsesRequest;
use crate::api::service_types::{Load, Readiness, VersionInfo};

/// One server-sent event of a streamed response, as OpenAPI 3.1 describes a stream: one schema
/// per event.
#[derive(utoipa::ToSchema)]
pub struct ServerSentEvent {
    /// A chunk as JSON (`CompletionChunk` or `ChatCompletionChunk`), or `[DONE]` after the last.
    pub data: String,
}

/// The refusals of every operation that reads a body: a missing or wrong key, another model,
/// a body too slow or too large.
pub struct BodyRefusals;

impl IntoResponses for BodyRefusals {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        [
            ("401", "No API key or a wrong one (when the server has keys)"),
            ("404", "`model` is not the served model"),
            ("408", "The body arrived too slowly"),
            ("413", "The body is over the size limit"),
        ]
        .into_iter()
        .map(|(status, description)| (status.to_owned(), error(description).build().into()))
        .collect()
    }
}

/// The refusals of every generation operation: those of a body, and the engine's.
pub struct GenerationRefusals;

impl IntoResponses for GenerationRefusals {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        let retry_after = HeaderBuilder::new()
            .schema(Some(u32::schema()))
            .description(Some("Seconds to wait"))
            .build();
        let mut responses = BodyRefusals::responses();
        responses.extend([
            (
                "429".to_owned(),
                error("The queue is full; retry after `Retry-After` seconds")
                    .header("Retry-After", retry_after)
                    .build()
                    .into(),
            ),
            (
                "500".to_owned(),
                error("The engine failed (chat, Responses: or the chat template did)")
                    .build()
                    .into(),
            ),
            (
                "503".to_owned(),
                error("The model is loading (with `Retry-After`) or the engine is not running")
                    .build()
                    .into(),
            ),
        ]);
        responses
    }
}

/// A response with an OpenAI error body.
fn error(description: &str) -> ResponseBuilder {
    let body = ContentBuilder::new()
        .schema(Some(Ref::from_schema_name("ErrorBody")))
        .build();
    ResponseBuilder::new()
        .description(description)
        .content("application/json", body)
}

#[utoipa::path(
    post,
    path = "/v1/completions",
    tag = "openai",
    request_body(
        content = CompletionRequest,
        content_type = "application/json",
        examples(
            ("text" = (summary = "A text prompt, greedy", value = json!({
                "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0
            }))),
            ("token ids" = (summary = "Two prompts as token ids, two choices each", value = json!({
                "prompt": [[1, 2, 3], [4, 5]], "max_tokens": 4, "n": 2, "seed": 7,
                "logprobs": 2, "stop": ["\n"]
            }))),
            ("streamed" = (summary = "Streamed, with a final usage chunk", value = json!({
                "prompt": ["Hello", "Goodbye"], "max_tokens": 4, "stream": true,
                "stream_options": {"include_usage": true}
            })))
        )
    ),
    responses(
        (status = 200, description = "The completion; with `stream: true`, server-sent events of \
            `CompletionChunk`s ending with `data: [DONE]`",
            content(
                (CompletionResponse = "application/json"),
                (ServerSentEvent = "text/event-stream")
            )),
        (status = 400, description = "A parameter is invalid (`param` names it), or the prompt \
            and `max_tokens` exceed the context", body = ErrorBody),
        GenerationRefusals
    )
)]
pub fn create_completion() {}

#[utoipa::path(
    post,
    path = "/v1/chat/completions",
    tag = "openai",
    request_body(
        content = ChatCompletionRequest,
        content_type = "application/json",
        examples(
            ("chat" = (summary = "A short chat, greedy", value = json!({
                "messages": [
                    {"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Say hello."}
                ],
                "max_completion_tokens": 8, "temperature": 0
            }))),
            ("content parts" = (summary = "Text parts, logprobs", value = json!({
                "model": null,
                "messages": [{"role": "user", "content": [
                    {"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}
                ]}],
                "max_tokens": 4, "logprobs": true, "top_logprobs": 2, "seed": 1
            }))),
            ("streamed" = (summary = "Streamed, with a final usage chunk", value = json!({
                "messages": [{"role": "user", "content": "Hi"}],
                "max_completion_tokens": 4, "stream": true,
                "stream_options": {"include_usage": true}
            }))),
            ("tool result" = (summary = "A tool call's result sent back, a named function \
                forced (`tool_choice: \"auto\"` needs --enable-auto-tool-choice)", value = json!({
                "messages": [
                    {"role": "user", "content": "Weather in Oslo?"},
                    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
                ],
                "tools": [{"type": "function", "function": {"name": "get_weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
                "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                "parallel_tool_calls": false, "max_completion_tokens": 16
            })))
        )
    ),
    responses(
        (status = 200, description = "The chat completion; with `stream: true`, server-sent \
            events of `ChatCompletionChunk`s ending with `data: [DONE]`",
            content(
                (ChatCompletionResponse = "application/json"),
                (ServerSentEvent = "text/event-stream")
            )),
        (status = 400, description = "A parameter or message is invalid (`param` names it), or \
            the messages and `max_completion_tokens` exceed the context", body = ErrorBody),
        GenerationRefusals
    )
)]
pub fn create_chat_completion() {}

#[utoipa::path(
    post,
    path = "/v1/responses",
    tag = "openai",
    request_body(
        content = ResponsesRequest,
        content_type = "application/json",
        examples(
            ("text" = (summary = "Instructions and a string input", value = json!({
                "instructions": "Answer in one word.", "input": "The capital of France?",
                "max_output_tokens": 8, "temperature": 0
            }))),
            ("tool" = (summary = "A forced function call, streamed", value = json!({
                "input": "Weather in Paris?", "stream": true,
                "tools": [{"type": "function", "name": "get_weather", "parameters": {
                    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}],
                "tool_choice": {"type": "function", "name": "get_weather"}
            })))
        )
    ),
    responses(
        (status = 200, description = "The response object (stateless: `store` is false); with \
            `stream: true`, the Responses API's server-sent events from `response.created` to \
            `response.completed` (its response's `status` `incomplete` when cut)",
            content(
                (Object = "application/json"),
                (ServerSentEvent = "text/event-stream")
            )),
        (status = 400, description = "A parameter is invalid (`param` names it), or \
            `previous_response_id` was sent (no responses are kept)", body = ErrorBody),
        GenerationRefusals
    )
)]
pub fn create_response() {}

#[utoipa::path(
    post,
    path = "/tokenize",
    tag = "vllm",
    request_body(
        content = TokenizeRequest,
        content_type = "application/json",
        examples(
            ("text" = (summary = "A text prompt, with token strings", value = json!({
                "prompt": "Hello world", "return_token_strs": true
            }))),
            ("chat" = (summary = "Messages through the chat template", value = json!({
                "messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true
            })))
        )
    ),
    responses(
        (status = 200, description = "The prompt's token ids, as generation would see them", body = TokenizeResponse),
        (status = 400, description = "A parameter or message is invalid (`param` names it)", body = ErrorBody),
        BodyRefusals,
        (status = 500, description = "The chat template failed", body = ErrorBody),
        (status = 503, description = "The model is loading (with `Retry-After`)", body = ErrorBody)
    )
)]
pub fn tokenize() {}

#[utoipa::path(
    post,
    path = "/detokenize",
    tag = "vllm",
    request_body(
        content = DetokenizeRequest,
        content_type = "application/json",
        examples(("tokens" = (summary = "Token ids back to text", value = json!({"tokens": [1, 2, 3]}))))
    ),
    responses(
        (status = 200, description = "The tokens' text", body = DetokenizeResponse),
        (status = 400, description = "A token id is outside the vocabulary", body = ErrorBody),
        BodyRefusals,
        (status = 503, description = "The model is loading (with `Retry-After`)", body = ErrorBody)
    )
)]
pub fn detokenize() {}

#[utoipa::path(
    get,
    path = "/v1/models",
    tag = "openai",
    responses(
        (status = 200, description = "The served model", body = ModelList),
        (status = 401, description = "No API key or a wrong one (when the server has keys)", body = ErrorBody),
        (status = 503, description = "The model is loading (with `Retry-After`)", body = ErrorBody)
    )
)]
pub fn list_models() {}

#[utoipa::path(
    get,
    path = "/health",
    tag = "service",
    responses(
        (status = 200, description = "Loaded, and an engine serves now or after a restart; each \
            engine's state", body = Readiness),
        (status = 503, description = "Loading, every engine dead for good, or an engine does not answer",
            body = ErrorBody)
    )
)]
pub fn health() {}

#[utoipa::path(
    get,
    path = "/ready",
    tag = "service",
    responses(
        (status = 200, description = "An engine is ready for new requests; each engine's state",
            body = Readiness),
        (status = 503, description = "Loading, or every engine restarting, draining or dead", body = Readiness)
    )
)]
pub fn ready() {}

#[utoipa::path(
    get,
    path = "/tokenizer_info",
    tag = "vllm",
    responses(
        (status = 200, description = "The tokenizer's configuration as `tokenizer_config.json` spells \
            it, with `tokenizer_class` (routed only with `--enable-tokenizer-info-endpoint`)",
            body = Object),
        (status = 401, description = "No API key or a wrong one (when the server has keys)", body = ErrorBody),
        (status = 503, description = "The model is loading (with `Retry-After`)", body = ErrorBody)
    )
)]
pub fn tokenizer_info() {}

#[utoipa::path(
    get,
    path = "/version",
    tag = "service",
    responses(
        (status = 200, description = "kiln's version", body = VersionInfo),
        (status = 503, description = "The model is loading (with `Retry-After`)", body = ErrorBody)
    )
)]
pub fn version() {}

#[utoipa::path(
    get,
    path = "/load",
    tag = "service",
    responses(
        (status = 200, description = "The engines' load: the total, and each engine's", body = Load),
        (status = 503, description = "The model is loading (with `Retry-After`) or the engine is \
            not running", body = ErrorBody)
    )
)]
pub fn load() {}

#[utoipa::path(
    get,
    path = "/metrics",
    tag = "service",
    responses(
        (status = 200, description = "Prometheus text exposition (version 0.0.4)",
            body = String, content_type = "text/plain"),
        (status = 500, description = "The metrics could not be rendered", body = ErrorBody),
        (status = 503, description = "The model is loading (with `Retry-After`)", body = ErrorBody)
    )
)]
pub fn metrics() {}

#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "service",
    responses(
        (status = 200, description = "This document", body = Object, content_type = "application/json"),
        (status = 401, description = "No API key or a wrong one (when the server has keys)", body = ErrorBody),
        (status = 503, description = "The model is loading (with `Retry-After`)", body = ErrorBody)
    )
)]
pub fn openapi_json() {}
