//! The document as one listener of a running server serves it.

use serde_json::{Map, Value, json};
use utoipa::OpenApi;

use super::ApiDoc;
use crate::api::ServedModel;
use crate::api::auth::OPEN_PATHS;
use crate::api::openai_types::schemas::TOKEN_ID;
use crate::api::prompt::has_fim_tokens;
use crate::config::LimitsConfig;

/// The request bodies whose fields the served model and the limits bound.
pub(super) const COMPLETION: &str = "CompletionRequest";
pub(super) const CHAT: &str = "ChatCompletionRequest";
pub(super) const GENERATION_REQUESTS: [&str; 2] = [COMPLETION, CHAT];

/// The name of the bearer-key security scheme.
pub(super) const API_KEY_SCHEME: &str = "api_key";

/// What the served document depends on.
pub struct Serving<'a> {
    pub model: &'a ServedModel,
    pub limits: &'a LimitsConfig,
    /// The server has API keys: every operation off `OPEN_PATHS` requires one.
    pub api_keys: bool,
    /// Whether this listener routes a path (`/metrics` may live on a listener of its own).
    pub routes: &'a dyn Fn(&str) -> bool,
}

/// The generic document narrowed to this server: only the paths it routes; the bearer key
/// where it wants one; the model's name as the only accepted `model`; `max_tokens` below its
/// context; token ids below its vocabulary; `stop_token_ids` within the configured limit;
/// `suffix` empty for a model without fill-in-the-middle tokens.
pub fn served_document(serving: &Serving<'_>) -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_else(|_| json!({}));
    if let Some(Value::Object(paths)) = doc.get_mut("paths") {
        paths.retain(|path, _| (serving.routes)(path));
        if serving.api_keys {
            require_api_key(paths);
        }
    }
    if serving.api_keys {
        doc["components"]["securitySchemes"] = json!({
            API_KEY_SCHEME: {"type": "http", "scheme": "bearer", "description": "An API key of the server"}
        });
    }
    bound_requests(&mut doc, serving.model, serving.limits);
    doc
}

fn require_api_key(paths: &mut Map<String, Value>) {
    for (path, item) in paths.iter_mut() {
        if OPEN_PATHS.contains(&path.as_str()) {
            continue;
        }
        for operation in item.as_object_mut().into_iter().flat_map(|item| item.values_mut()) {
            operation["security"] = json!([{ API_KEY_SCHEME: [] }]);
        }
    }
}

fn bound_requests(doc: &mut Value, model: &ServedModel, limits: &LimitsConfig) {
    // A prompt holds at least one token. Chat's `max_tokens` keeps the `u32` maximum: beside
    // `max_completion_tokens` (which wins) any positive value is accepted.
    let most_tokens = json!(model.max_model_len.saturating_sub(1));
    let bounds = [
        (COMPLETION, "max_tokens", "maximum", most_tokens.clone()),
        (CHAT, "max_completion_tokens", "maximum", most_tokens),
    ]
    .into_iter()
    .chain(GENERATION_REQUESTS.into_iter().flat_map(|request| {
        [
            (request, "model", "enum", json!([model.name, null])),
            (request, "stop_token_ids", "maxItems", json!(limits.max_stop_token_ids)),
        ]
    }));
    for (request, field, keyword, value) in bounds {
        let pointer = format!("/components/schemas/{request}/properties/{field}");
        if let Some(Value::Object(schema)) = doc.pointer_mut(&pointer) {
            schema.insert(keyword.to_owned(), value);
        }
    }
    if !has_fim_tokens(&model.tokenizer) {
        let pointer = format!("/components/schemas/{COMPLETION}/properties/suffix");
        if let Some(Value::Object(schema)) = doc.pointer_mut(&pointer) {
            schema.insert("maxLength".into(), json!(0));
        }
    }
    if let Some(Value::Object(schema)) = doc.pointer_mut(&format!("/components/schemas/{TOKEN_ID}")) {
        schema.insert("maximum".into(), json!(model.token_id_bound.saturating_sub(1)));
    }
}
