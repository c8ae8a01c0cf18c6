//! Chat templates: the Jinja templates that models ship (`tokenizer.chat_template` in GGUF,
//! `chat_template` in `tokenizer_config.json`) rendered with minijinja, configured to behave
//! like Hugging Face's `apply_chat_template` so prompts match what the model was tuned on.

mod limits;
pub mod source;

use crate::model::gguf::GgufFile;
use limits::{CappedOutput, limit_hit};
use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error, ErrorKind, context};
use serde::{Deserialize, Serialize};

pub use limits::{RenderLimit, RenderLimits};

/// ChatML, for models that ship no template (the format SmolLM, Qwen and others use).
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}\
{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}\
{% endfor %}\
{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

const TEMPLATE_NAME: &str = "chat";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChatTemplateError {
    #[error("invalid chat template: {0}")]
    Syntax(String),
    /// The template itself rejected the conversation via `raise_exception(...)`, e.g.
    /// "Conversation roles must alternate user/assistant". The message is the template's.
    #[error("{0}")]
    Raised(String),
    #[error("chat template failed to render: {0}")]
    Render(String),
    /// The render ran into one of [`RenderLimits`]: the template is at fault, not the
    /// messages, whoever sent them.
    #[error("the chat template exceeded its {0}")]
    LimitExceeded(RenderLimit),
}

/// One chat turn as templates see it (`message['role']`, `message['content']`, and when
/// present `name`, `tool_calls`, `tool_call_id`). A `null` content arrives as `""`, as vLLM
/// renders it, so templates that concatenate `message['content']` keep working.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// An assistant turn's calls as Hugging Face templates expect them: OpenAI's shape with
    /// `function.arguments` parsed into an object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<serde_json::Value>>,
    /// The call a `tool` message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
            ..Self::default()
        }
    }
}

/// A compiled chat template plus the BOS/EOS texts templates reference as variables, and
/// the bounds each render runs within.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    limits: RenderLimits,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// Marks errors raised by the template's `raise_exception` so `render` can report the
/// template's own message rather than a generic render failure.
#[derive(Debug)]
struct Raised(String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

impl ChatTemplate {
    /// Compiles `source`; renders run within [`RenderLimits::default`].
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, ChatTemplateError> {
        let mut env = Environment::new();
        let limits = RenderLimits::default();
        limits.apply(&mut env);
        // Hugging Face renders with trim_blocks and lstrip_blocks; templates are written for it.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        // Python string/dict methods (`.strip()`, `.startswith()`, `.items()`...).
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_filter("tojson", tojson);
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(|e| ChatTemplateError::Syntax(describe(&e)))?;
        Ok(Self {
            env,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            limits,
        })
    }

    /// The same template with other bounds on each render.
    pub fn with_limits(mut self, limits: RenderLimits) -> Self {
        limits.apply(&mut self.env);
        self.limits = limits;
        self
    }

    /// The built-in ChatML template.
    pub fn chatml(bos_token: &str, eos_token: &str) -> Self {
        match Self::new(CHATML_TEMPLATE, bos_token, eos_token) {
            Ok(t) => t,
            // A constant template that does not compile is a bug caught by the unit tests.
            Err(e) => unreachable!("built-in ChatML template: {e}"),
        }
    }

    /// The GGUF's `tokenizer.chat_template` (ChatML if absent), with BOS/EOS texts looked up
    /// in its vocabulary.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self, ChatTemplateError> {
        let tokens = gguf.get_array("tokenizer.ggml.tokens").unwrap_or(&[]);
        let text = |key: &str| {
            gguf.get_u32(key)
                .and_then(|id| tokens.get(id as usize)?.as_str())
                .unwrap_or("")
        };
        let (bos, eos) = (text("tokenizer.ggml.bos_token_id"), text("tokenizer.ggml.eos_token_id"));
        match gguf.get_str("tokenizer.chat_template") {
            Some(source) => Self::new(source, bos, eos),
            None => {
                tracing::info!(path = %gguf.path().display(), "no chat template in GGUF; using ChatML");
                Ok(Self::chatml(bos, eos))
            }
        }
    }

    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String, ChatTemplateError> {
        self.render_with_tools(messages, None, add_generation_prompt)
    }

    /// [`ChatTemplate::render`] with the request's `tools` (each `{"type": "function",
    /// "function": {...}}`), bound as `tools` (`none` when absent, as Hugging Face binds it).
    pub fn render_with_tools(
        &self,
        messages: &[ChatMessage],
        tools: Option<&[serde_json::Value]>,
        add_generation_prompt: bool,
    ) -> Result<String, ChatTemplateError> {
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ChatTemplateError::Render(describe(&e)))?;
        let mut output = CappedOutput::new(self.limits.max_output_bytes);
        let context = context! {
            messages => messages,
            tools => tools,
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        };
        if let Err(e) = template.render_captured_to(context, &mut output) {
            return Err(if output.overflowed {
                ChatTemplateError::LimitExceeded(RenderLimit::OutputSize)
            } else if let Some(limit) = limit_hit(&e) {
                ChatTemplateError::LimitExceeded(limit)
            } else if let Some(message) = raised_message(&e) {
                ChatTemplateError::Raised(message)
            } else {
                ChatTemplateError::Render(describe(&e))
            });
        }
        // Every write is a whole `str`, so the bytes are UTF-8.
        String::from_utf8(output.bytes).map_err(|e| ChatTemplateError::Render(e.to_string()))
    }
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message.clone()).with_source(Raised(message)))
}

fn raised_message(err: &Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(raised) = e.downcast_ref::<Raised>() {
            return Some(raised.0.clone());
        }
        source = e.source();
    }
    None
}

/// The error with its template location, on one line for logs and HTTP error bodies.
fn describe(err: &Error) -> String {
    match (err.name(), err.line()) {
        (Some(name), Some(line)) => format!("{err} ({name} line {line})"),
        _ => err.to_string(),
    }
}

/// Python's `json.dumps(value, ensure_ascii=False)` as Hugging Face registers `tojson`:
/// `", "`/`": "` separators, no HTML escaping (minijinja's built-in escapes `<`, `>`, `&`, `'`
/// and uses compact separators, which would change tool-calling prompts). `indent` is honoured;
/// other keyword arguments are accepted and ignored.
/// Known gap: without minijinja's `preserve_order` feature, dict literals and maps built in the
/// template serialise with sorted keys (Python keeps insertion order); struct fields such as
/// `ChatMessage`'s keep declaration order.
fn tojson(value: Value, indent: Option<usize>, kwargs: Kwargs) -> Result<Value, Error> {
    let indent = match kwargs.get::<Option<usize>>("indent")? {
        Some(i) => Some(i),
        None => indent,
    };
    for ignored in ["ensure_ascii", "sort_keys", "separators"] {
        let _: Option<Value> = kwargs.get(ignored)?;
    }
    kwargs.assert_all_used()?;
    let to_err = |e: serde_json::Error| Error::new(ErrorKind::InvalidOperation, e.to_string());
    let mut out = Vec::new();
    match indent {
        Some(n) => {
            let spaces = vec![b' '; n];
            let fmt = serde_json::ser::PrettyFormatter::with_indent(&spaces);
            let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
            value.serialize(&mut ser).map_err(to_err)?;
        }
        None => {
            let mut ser = serde_json::Serializer::with_formatter(&mut out, PythonFormatter);
            value.serialize(&mut ser).map_err(to_err)?;
        }
    }
    let json = String::from_utf8(out).map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    Ok(Value::from_safe_string(json))
}

/// serde_json formatter with Python's default `json.dumps` separators.
struct PythonFormatter;

impl serde_json::ser::Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, writer: &mut W, first: bool) -> std::io::Result<()> {
        if first { Ok(()) } else { writer.write_all(b", ") }
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, writer: &mut W, first: bool) -> std::io::Result<()> {
        if first { Ok(()) } else { writer.write_all(b", ") }
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        writer.write_all(b": ")
    }
}

#[cfg(test)]
mod tests;
