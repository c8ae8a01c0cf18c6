//! `POST /v1/chat/completions`: messages rendered with the model's own chat template, wording
//! in the chat format (a role chunk opens each streamed choice), tool calls read back from
//! the text (see [`super::tool_calls`]).

use std::collections::HashMap;
use std::sync::Arc;

use actix_web::{HttpRequest, HttpResponse, web};
use bytes::Bytes;

use super::errors::ApiError;
use super::generation::{ChoiceDelta, TokenDetail};
use super::json_body::JsonBody;
use super::limits::PromptSize;
use super::openai_types::{
    ChatChoice, ChatChunkChoice, ChatCompletionChunk, ChatCompletionRequest, ChatCompletionResponse, ChatDelta,
    ChatLogprobs, ChatTokenLogprob, ChatTopLogprob, Usage, finite_logprob,
};
use super::pipeline::{Delivery, Endpoint, ResponseFormat, ResponseHead, serve};
use super::prompt::tokenize;
use super::prompt_echo::wire_prompt_logprobs;
use super::request_log::RequestLog;
use super::sse::{ChunkFormat, sse_data};
use super::structured_output::ConstraintFields;
use super::tool_calls::{
    ToolChoicePlan, ToolOutput, ToolStream, shape_output, template_messages, template_tools, tools_bytes,
};
use super::{AppState, ServedModel};
use crate::engine::sampling_params::SamplingParams;
use crate::engine::types::{FinishReason, Operation};
use crate::model::chat_template::{ChatMessage as TemplateMessage, ChatTemplate, ChatTemplateError};

pub async fn create_chat_completion(
    req: HttpRequest,
    state: web::Data<AppState>,
    JsonBody(body): JsonBody<ChatCompletionRequest>,
) -> Result<HttpResponse, ApiError> {
    super::worker_contract::dp_rank::check(&req, body.data_parallel_rank)?;
    serve::<Chat>(&state, body, RequestLog::of(&req)).await
}

/// The chat endpoint's part of the pipeline.
pub struct Chat;

impl Endpoint for Chat {
    type Request = ChatCompletionRequest;
    type Format = ChatFormat;
    const ID_PREFIX: &'static str = "chatcmpl";
    const OPERATION: Operation = Operation::Chat;
    const PROMPT_PARAM: &'static str = "messages";

    fn requested_model(request: &ChatCompletionRequest) -> Option<&str> {
        request.model.as_deref()
    }

    /// `required` and named tool choices constrain the output to valid calls.
    fn sampling_params(request: &ChatCompletionRequest) -> Result<SamplingParams, ApiError> {
        let mut params = request.sampling_params()?;
        if let Some(constraint) = ToolChoicePlan::of(request)?.constraint(request)? {
            params.structured = Some(constraint);
        }
        Ok(params)
    }

    fn check_served(request: &ChatCompletionRequest, model: &ServedModel) -> Result<(), ApiError> {
        ToolChoicePlan::of(request)?.check_served(model.tool_parser)
    }

    fn constraint_fields(request: &ChatCompletionRequest) -> ConstraintFields<'_> {
        request.constraint_fields()
    }

    /// `max_completion_tokens` wins when both are sent, as in validation.
    fn max_tokens_param(request: &ChatCompletionRequest) -> &'static str {
        if request.max_completion_tokens.is_some() {
            "max_completion_tokens"
        } else {
            "max_tokens"
        }
    }

    fn prompt_size(request: &ChatCompletionRequest) -> PromptSize {
        PromptSize {
            prompts: 1,
            text_bytes: request.content_bytes() + tools_bytes(request),
        }
    }

    fn delivery(request: &ChatCompletionRequest) -> Delivery {
        Delivery::from_request(request.stream, request.stream_options.as_ref())
    }

    fn format(request: &ChatCompletionRequest, head: ResponseHead, model: &ServedModel) -> ChatFormat {
        // `sampling_params` has refused a request whose plan does not resolve.
        let tools = ToolChoicePlan::of(request).map_or(ToolOutput::Text, |plan| plan.output(model.tool_parser));
        ChatFormat {
            head,
            logprobs: request.logprobs.unwrap_or(false),
            tools,
            streams: HashMap::new(),
        }
    }

    /// One prompt: the messages (and tools) through the chat template.
    async fn prompts(request: ChatCompletionRequest, model: &ServedModel) -> Result<Vec<Vec<u32>>, ApiError> {
        let messages = template_messages(&request.messages)?;
        let tools = template_tools(request.tools.as_deref());
        let text = render_off_the_worker(&model.chat_template, messages, tools, true).await?;
        tokenize(&model.tokenizer, vec![text]).await
    }
}

/// Renders on the blocking pool, so even a slow template (bounded by its [`RenderLimits`])
/// never holds up an HTTP worker. A template that hits a limit is the operator's problem, not
/// the client's: a 500 that says so and echoes nothing of the template.
///
/// [`RenderLimits`]: crate::model::chat_template::RenderLimits
pub(super) async fn render_off_the_worker(
    template: &Arc<ChatTemplate>,
    messages: Vec<TemplateMessage>,
    tools: Option<Vec<serde_json::Value>>,
    add_generation_prompt: bool,
) -> Result<String, ApiError> {
    let template = Arc::clone(template);
    let rendered = web::block(move || template.render_with_tools(&messages, tools.as_deref(), add_generation_prompt))
        .await
        .map_err(|_| ApiError::EngineError("the chat template task failed".into()))?;
    rendered.map_err(|e| match e {
        ChatTemplateError::LimitExceeded(limit) => ApiError::ChatTemplateFailed(format!(
            "The model's chat template exceeded its {limit} while rendering this request; the server's \
             operator must fix the template (--chat-template)."
        )),
        other => ApiError::invalid("messages", format!("the chat template refused the messages: {other}")),
    })
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
