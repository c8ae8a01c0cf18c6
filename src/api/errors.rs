//! The API's one error type and its one mapping to HTTP.
//!
//! Every handler returns `Result<_, ApiError>`; actix turns the error into a
//! response through [`ResponseError`], so the status code, the OpenAI error
//! body and the metrics label (`error_type`) can never disagree.

use super::body_deadline::is_body_timeout;
use actix_web::error::{JsonPayloadError, PayloadError};
use actix_web::http::StatusCode;
use actix_web::http::header::{ALLOW, RETRY_AFTER, WWW_AUTHENTICATE};
use actix_web::web::JsonConfig;
use actix_web::{HttpRequest, HttpResponse, ResponseError};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// An error answered to the client in OpenAI's `{"error": {...}}` shape.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// A request field has a bad value; `param` names it (e.g. `temperature`,
    /// `messages[2].content`).
    #[error("{message}")]
    InvalidParameter { param: String, message: String },
    /// The body is not JSON, or does not match the request schema in a way
    /// that serde could not tie to one field.
    #[error("{0}")]
    MalformedJson(String),
    #[error("request body is larger than the limit of {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("The model `{0}` does not exist.")]
    ModelNotFound(String),
    /// A LoRA adapter the load and unload endpoints cannot find (vLLM's 404 `NotFoundError`),
    /// or one unloaded before the request reached the engine.
    #[error("{0}")]
    AdapterNotFound(String),
    /// Prompt plus `max_tokens` do not fit the model's context window. The error names the
    /// field at fault as the client sent it: the prompt (`prompt` or `messages`) when it alone
    /// is too long, else `max_tokens` or `max_completion_tokens`.
    #[error(
        "This model's maximum context length is {max_model_len} tokens. However, you requested \
         {} tokens ({prompt_tokens} in the {prompt_param}, {max_tokens} for the completion). \
         Please reduce the length of the {prompt_param} or completion.",
        total_tokens(.prompt_tokens, .max_tokens)
    )]
    ContextLengthExceeded {
        prompt_tokens: u32,
        max_tokens: u32,
        max_model_len: u32,
        prompt_param: &'static str,
        max_tokens_param: &'static str,
    },
    /// The waiting queue is full; the client should retry after a pause.
    #[error("The server is overloaded; retry after {retry_after_secs} seconds.")]
    Overloaded { retry_after_secs: u32 },
    /// No route matches the path.
    #[error("Invalid URL ({method} {path})")]
    NotFound { method: String, path: String },
    /// The path exists but not for this method; `allowed` lists the ones it takes, for the
    /// `Allow` header RFC 9110 requires on a 405.
    #[error("Method {method} is not allowed for {path}")]
    MethodNotAllowed {
        method: String,
        path: String,
        allowed: String,
    },
    /// The engine failed while running the request.
    #[error("{0}")]
    EngineError(String),
    /// The output constraint proved beyond the grammar engine's per-token limits during
    /// generation: the client's constraint is at fault, though it compiled.
    #[error("{0}")]
    ConstraintFailed(String),
    /// The chat template (the model's or the operator's, never the client's) hit a render
    /// limit: a server-side fault, answered with a message that names the template and no
    /// more of it.
    #[error("{0}")]
    ChatTemplateFailed(String),
    /// The server is starting or shutting down.
    #[error("{0}")]
    Unavailable(String),
    /// The client sent its request too slowly.
    #[error("{0}")]
    RequestTimeout(String),
    /// No API key, or not one of the configured keys (which is never hinted at).
    #[error("Incorrect or missing API key. Send it as `Authorization: Bearer <key>`.")]
    Unauthorized,
}

/// Prompt plus completion tokens, widened so a `max_tokens` up to `u32::MAX` (which a
/// client may send) cannot overflow the message.
fn total_tokens(prompt: &u32, completion: &u32) -> u64 {
    u64::from(*prompt) + u64::from(*completion)
}

/// The JSON body: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// OpenAI's error object; `param` and `code` are `null` when absent (the
/// Python client reads them as optional keys, and OpenAI always sends them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    pub message: String,
    /// [`ApiError::error_type`]: `invalid_request_error`, `not_found_error`,
    /// `rate_limit_exceeded`, `server_error`, `service_unavailable`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// The request field at fault, e.g. `temperature` or `messages[2].content`.
    #[schema(required = true)]
    pub param: Option<String>,
    /// A machine-readable code, e.g. `context_length_exceeded`.
    #[schema(required = true)]
    pub code: Option<String>,
}

impl ApiError {
    /// Shorthand for the most common error.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::InvalidParameter {
            param: param.into(),
            message: message.into(),
        }
    }

    /// The 404 for an unmatched route (use from `App::default_service`).
    pub fn route_not_found(req: &HttpRequest) -> Self {
        ApiError::NotFound {
            method: req.method().to_string(),
            path: req.path().to_owned(),
        }
    }

    /// Whether the error surfaced after generation started (the engine, or the constraint
    /// while decoding), not in validation or admission: `request_failure_total`'s stage.
    pub fn after_generation_started(&self) -> bool {
        matches!(self, ApiError::EngineError(_) | ApiError::ConstraintFailed(_))
    }

    /// The OpenAI `error.type`, also the `error_type` metrics label: a small
    /// closed set so label cardinality stays bounded.
    pub fn error_type(&self) -> &'static str {
        match self {
            ApiError::InvalidParameter { .. }
            | ApiError::MalformedJson(_)
            | ApiError::PayloadTooLarge { .. }
            | ApiError::ContextLengthExceeded { .. }
            | ApiError::MethodNotAllowed { .. }
            | ApiError::ConstraintFailed(_)
            | ApiError::RequestTimeout(_) => "invalid_request_error",
            ApiError::ModelNotFound(_) | ApiError::AdapterNotFound(_) | ApiError::NotFound { .. } => "not_found_error",
            ApiError::Overloaded { .. } => "rate_limit_exceeded",
            ApiError::EngineError(_) | ApiError::ChatTemplateFailed(_) => "server_error",
            ApiError::Unavailable(_) => "service_unavailable",
            ApiError::Unauthorized => "authentication_error",
        }
    }

    /// The request field at fault, if any.
    pub fn param(&self) -> Option<&str> {
        match self {
            ApiError::InvalidParameter { param, .. } => Some(param),
            ApiError::ContextLengthExceeded {
                prompt_tokens,
                max_model_len,
                prompt_param,
                max_tokens_param,
                ..
            } => Some(if prompt_tokens >= max_model_len {
                prompt_param
            } else {
                max_tokens_param
            }),
            _ => None,
        }
    }

    /// A machine-readable code for the errors OpenAI gives one to.
    pub fn code(&self) -> Option<&'static str> {
        match self {
            ApiError::ContextLengthExceeded { .. } => Some("context_length_exceeded"),
            ApiError::ModelNotFound(_) => Some("model_not_found"),
            ApiError::Overloaded { .. } => Some("rate_limit_exceeded"),
            ApiError::PayloadTooLarge { .. } => Some("payload_too_large"),
            ApiError::MethodNotAllowed { .. } => Some("method_not_allowed"),
            ApiError::Unauthorized => Some("invalid_api_key"),
            ApiError::ChatTemplateFailed(_) => Some("chat_template_error"),
            ApiError::ConstraintFailed(_) => Some("constraint_failed"),
            _ => None,
        }
    }

    /// The body sent to the client; also usable as an SSE error event once a
    /// stream has started and the status can no longer change.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                message: self.to_string(),
                kind: self.error_type().to_owned(),
                param: self.param().map(str::to_owned),
                code: self.code().map(str::to_owned),
            },
        }
    }

    /// Maps actix's JSON extractor errors; `limit` is only used for messages.
    pub fn from_json_error(err: &JsonPayloadError, limit: usize) -> Self {
        match err {
            JsonPayloadError::OverflowKnownLength { limit, .. } | JsonPayloadError::Overflow { limit } => {
                ApiError::PayloadTooLarge { limit: *limit }
            }
            JsonPayloadError::Payload(PayloadError::Overflow) => ApiError::PayloadTooLarge { limit },
            JsonPayloadError::ContentType => {
                ApiError::MalformedJson("Content-Type must be application/json".to_owned())
            }
            JsonPayloadError::Deserialize(e) => {
                let message = e.to_string();
                match (e.classify(), field_named_by_serde(&message)) {
                    (serde_json::error::Category::Data, Some(param)) => ApiError::InvalidParameter { param, message },
                    (serde_json::error::Category::Data, None) => ApiError::MalformedJson(message),
                    _ => ApiError::MalformedJson(format!("invalid JSON body: {message}")),
                }
            }
            JsonPayloadError::Payload(e) if is_body_timeout(e) => {
                ApiError::RequestTimeout(format!("{e}; send the body faster or in one piece"))
            }
            JsonPayloadError::Payload(e) => ApiError::MalformedJson(format!("could not read the request body: {e}")),
            // Only produced when serializing a response; unreachable from the
            // extractor, but mapped rather than panicking.
            other => ApiError::EngineError(other.to_string()),
        }
    }
}

/// Pulls the field name out of serde messages that carry one:
/// "missing field `model`", "duplicate field `n`", and our untagged enums'
/// `expecting` texts, which start with "field `prompt` ...".
fn field_named_by_serde(message: &str) -> Option<String> {
    ["missing field `", "duplicate field `", "field `"]
        .iter()
        .find_map(|prefix| {
            let start = message.find(prefix)? + prefix.len();
            let len = message[start..].find('`')?;
            Some(message[start..start + len].to_owned())
        })
        .filter(|name| !name.is_empty())
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::InvalidParameter { .. }
            | ApiError::MalformedJson(_)
            | ApiError::ContextLengthExceeded { .. }
            | ApiError::ConstraintFailed(_) => StatusCode::BAD_REQUEST,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::ModelNotFound(_) | ApiError::AdapterNotFound(_) | ApiError::NotFound { .. } => {
                StatusCode::NOT_FOUND
            }
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Overloaded { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::EngineError(_) | ApiError::ChatTemplateFailed(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        if status.is_server_error() {
            // `?`: an error message may carry text from the request; escaped, a CR/LF in it
            // cannot start a log line of its own.
            tracing::warn!(error = ?self.to_string(), error_type = self.error_type(), "request failed");
        }
        let mut builder = HttpResponse::build(status);
        match self {
            ApiError::Overloaded { retry_after_secs } => {
                builder.insert_header((RETRY_AFTER, retry_after_secs.to_string()));
            }
            ApiError::Unauthorized => {
                builder.insert_header((WWW_AUTHENTICATE, "Bearer"));
            }
            ApiError::MethodNotAllowed { allowed, .. } => {
                builder.insert_header((ALLOW, allowed.as_str()));
            }
            _ => {}
        }
        builder.json(self.body())
    }
}

/// The JSON extractor config for request bodies: `limit_bytes` caps the body,
/// and every extractor failure becomes an [`ApiError`] so clients get the
/// OpenAI error shape instead of actix's plain-text message.
pub fn json_config(limit_bytes: usize) -> JsonConfig {
    JsonConfig::default()
        .limit(limit_bytes)
        .error_handler(move |err, _req| ApiError::from_json_error(&err, limit_bytes).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::body::to_bytes;
    use actix_web::test::{TestRequest, call_service, init_service, read_body};
    use actix_web::{App, HttpResponse, web};

    #[derive(Deserialize)]
    struct Probe {
        #[allow(dead_code)]
        model: String,
        #[allow(dead_code)]
        temperature: Option<f32>,
    }

    async fn probe(_body: web::Json<Probe>) -> HttpResponse {
        HttpResponse::Ok().finish()
    }

    async fn body_of(resp: HttpResponse) -> serde_json::Value {
        let bytes = to_bytes(resp.into_body()).await.unwrap_or_default();
        serde_json::from_slice(&bytes).unwrap_or_default()
    }

    #[test]
    fn body_shape_has_null_param_and_code() {
        let v = serde_json::to_value(ApiError::EngineError("boom".into()).body()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"error": {"message": "boom", "type": "server_error",
                "param": null, "code": null}})
        );
    }

    #[test]
    fn context_length_names_the_right_param() {
        let e = |prompt_tokens, max_tokens| ApiError::ContextLengthExceeded {
            prompt_tokens,
            max_tokens,
            max_model_len: 100,
            prompt_param: "messages",
            max_tokens_param: "max_completion_tokens",
        };
        assert_eq!(e(120, 10).param(), Some("messages"));
        assert_eq!(e(60, 50).param(), Some("max_completion_tokens"));
        assert_eq!(e(60, 50).status_code(), StatusCode::BAD_REQUEST);
        assert_eq!(e(60, 50).code(), Some("context_length_exceeded"));
        assert!(e(60, 50).to_string().contains("requested 110 tokens"));
        // No overflow at the largest max_tokens a client may send.
        assert!(e(60, u32::MAX).to_string().contains("4294967355"));
    }

    #[test]
    fn method_not_allowed_lists_the_allowed_methods() {
        let resp = ApiError::MethodNotAllowed {
            method: "PUT".into(),
            path: "/x".into(),
            allowed: "GET".into(),
        }
        .error_response();
        assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(resp.headers().get(ALLOW).unwrap(), "GET");
    }

    #[actix_web::test]
    async fn overloaded_sets_retry_after() {
        let resp = ApiError::Overloaded { retry_after_secs: 2 }.error_response();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers().get(RETRY_AFTER).unwrap(), "2");
        let v = body_of(resp).await;
        assert_eq!(v["error"]["type"], "rate_limit_exceeded");
    }

    #[test]
    fn every_variant_has_consistent_status_and_type() {
        let cases = [
            (ApiError::invalid("n", "bad"), 400, "invalid_request_error"),
            (ApiError::MalformedJson("x".into()), 400, "invalid_request_error"),
            (ApiError::PayloadTooLarge { limit: 1 }, 413, "invalid_request_error"),
            (ApiError::ModelNotFound("m".into()), 404, "not_found_error"),
            (
                ApiError::NotFound {
                    method: "GET".into(),
                    path: "/x".into(),
                },
                404,
                "not_found_error",
            ),
            (
                ApiError::MethodNotAllowed {
                    method: "GET".into(),
                    path: "/x".into(),
                    allowed: "POST".into(),
                },
                405,
                "invalid_request_error",
            ),
            (ApiError::EngineError("e".into()), 500, "server_error"),
            (ApiError::ChatTemplateFailed("t".into()), 500, "server_error"),
            (ApiError::Unavailable("u".into()), 503, "service_unavailable"),
            (ApiError::Unauthorized, 401, "authentication_error"),
            (ApiError::RequestTimeout("t".into()), 408, "invalid_request_error"),
        ];
        for (err, status, kind) in cases {
            assert_eq!(err.status_code().as_u16(), status, "{err:?}");
            assert_eq!(err.error_type(), kind, "{err:?}");
            assert_eq!(err.body().error.kind, kind);
        }
    }

    async fn post(body: &'static str, content_type: &str) -> (u16, serde_json::Value) {
        let app = init_service(App::new().app_data(json_config(64)).route("/", web::post().to(probe))).await;
        let req = TestRequest::post()
            .uri("/")
            .insert_header(("content-type", content_type))
            .set_payload(body)
            .to_request();
        let resp = call_service(&app, req).await;
        let status = resp.status().as_u16();
        let bytes = read_body(resp).await;
        (status, serde_json::from_slice(&bytes).unwrap_or_default())
    }

    #[actix_web::test]
    async fn json_errors_become_api_errors() {
        let (s, v) = post(r#"{"model":"m","temperature":"abc"}"#, "application/json").await;
        assert_eq!(s, 400);
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains("invalid type: string \"abc\", expected f32"), "{msg}");

        let (s, v) = post(r#"{"temperature":1}"#, "application/json").await;
        assert_eq!(s, 400);
        assert_eq!(v["error"]["param"], "model");

        let (s, v) = post(r#"{"model": "#, "application/json").await;
        assert_eq!(s, 400);
        assert_eq!(v["error"]["type"], "invalid_request_error");

        let (s, v) = post(r#"{"model":"m"}"#, "text/plain").await;
        assert_eq!(s, 400);
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("Content-Type")
        );

        let big = r#"{"model":"mmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmm"}"#;
        let (s, v) = post(big, "application/json").await;
        assert_eq!(s, 413);
        assert_eq!(v["error"]["code"], "payload_too_large");
    }

    #[test]
    fn field_names_are_extracted_only_from_known_shapes() {
        assert_eq!(
            field_named_by_serde("missing field `model` at line 1 column 2"),
            Some("model".into())
        );
        assert_eq!(
            field_named_by_serde("field `prompt` must be a string at line 1 column 9"),
            Some("prompt".into())
        );
        assert_eq!(
            field_named_by_serde("unknown variant `bot`, expected one of `user`"),
            None
        );
    }
}
