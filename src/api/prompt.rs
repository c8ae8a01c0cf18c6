//! Prompt building for every generation endpoint: a completions prompt (text, with
//! fill-in-the-middle around `suffix`, or token ids) or chat messages through the chat
//! template, tokenised off the async threads. The validation step calls it, and checks the
//! token ids it gives (`validation::prompt`).

use std::sync::Arc;

use actix_web::web;
use tokenizers::Tokenizer;

use super::ServedModel;
use super::errors::ApiError;
use super::openai_types::{ChatMessageIn, PromptInput, ToolDefinition};
use super::tool_calls::{template_messages, template_tools};
use crate::model::chat_template::{ChatMessage as TemplateMessage, ChatTemplate, ChatTemplateError};
use crate::tokenizer::encode_prompt;

/// Where a body's prompts come from.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptSource {
    /// Completions: text or token ids, one prompt or a batch; `suffix` for fill-in-the-middle.
    Completion {
        prompt: PromptInput,
        suffix: Option<String>,
    },
    /// Chat: the messages (and the tools) through the chat template, one prompt.
    Chat {
        messages: Vec<ChatMessageIn>,
        tools: Option<Vec<ToolDefinition>>,
    },
}

impl PromptSource {
    /// The prompts as token ids, one per prompt of the body.
    pub async fn token_ids(self, model: &ServedModel) -> Result<Vec<Vec<u32>>, ApiError> {
        match self {
            PromptSource::Completion { prompt, suffix } => completion_prompts(prompt, suffix, &model.tokenizer).await,
            PromptSource::Chat { messages, tools } => {
                let messages = template_messages(&messages)?;
                let tools = template_tools(tools.as_deref());
                let text = render_off_the_worker(&model.chat_template, messages, tools, true).await?;
                tokenize(&model.tokenizer, vec![text]).await
            }
        }
    }
}

async fn completion_prompts(
    prompt: PromptInput,
    suffix: Option<String>,
    tokenizer: &Arc<Tokenizer>,
) -> Result<Vec<Vec<u32>>, ApiError> {
    let prompt = match suffix.filter(|s| !s.is_empty()) {
        Some(suffix) => fill_in_the_middle(tokenizer, prompt, &suffix)?,
        None => prompt,
    };
    let prompts = match prompt {
        PromptInput::Text(text) => tokenize(tokenizer, vec![text]).await?,
        PromptInput::TextBatch(texts) => tokenize(tokenizer, texts).await?,
        PromptInput::Tokens(ids) => vec![ids],
        PromptInput::TokenBatch(batch) => batch,
    };
    if prompts.is_empty() {
        return Err(ApiError::invalid("prompt", "`prompt` must not be empty"));
    }
    Ok(prompts)
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

/// Renders on the blocking pool, so even a slow template (bounded by its [`RenderLimits`])
/// never holds up an HTTP worker. A template that hits a limit is the operator's problem, not
/// the client's: a 500 that says so and echoes nothing of the template.
///
/// [`RenderLimits`]: crate::model::chat_template::RenderLimits
pub async fn render_off_the_worker(
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

/// Tokenises texts on the blocking pool (tokenising a long prompt takes milliseconds), with
/// the model's BOS when it asks for one (once, even if the text starts with it).
pub async fn tokenize(tokenizer: &Arc<Tokenizer>, texts: Vec<String>) -> Result<Vec<Vec<u32>>, ApiError> {
    let tokenizer = Arc::clone(tokenizer);
    web::block(move || {
        texts
            .iter()
            .map(|t| encode_prompt(&tokenizer, t, true))
            .collect::<Result<Vec<_>, _>>()
    })
    .await
    .map_err(|e| ApiError::EngineError(format!("tokeniser task failed: {e}")))?
    .map_err(|e| ApiError::InvalidParameter {
        param: "prompt".into(),
        message: format!("cannot tokenise: {e}"),
    })
}
