//! The request-body extractor of the generation endpoints: actix's JSON extractor checks the
//! content type, the size limit and the JSON syntax (its errors map through
//! [`ApiError::from_json_error`]); the typed parse then tracks where it is, so a body that does
//! not fit the request type is refused with `param` naming the field by its path
//! (`messages[0].role`), as OpenAI's errors do. Nesting deeper than serde_json parses is
//! refused wherever it is, in an ignored field too (which serde_json skips without a limit).
//!
//! serde reads a field group flattened into a body (`#[serde(flatten)]`, see
//! `openai_types::fields`) from a buffer the path tracker does not see: a bad value there
//! fails the parse with no path. [`RequestBody::check_groups`] then parses each group alone,
//! with its path, so the error still names the field.

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use futures_util::future::LocalBoxFuture;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use super::errors::ApiError;

/// A JSON body parsed into `T`.
pub struct JsonBody<T>(pub T);

/// A type a request body parses into.
pub trait RequestBody: DeserializeOwned {
    /// Parses each field group flattened into the body alone and returns the first error,
    /// which names its field; called only when the whole parse failed without a field.
    fn check_groups(_text: &str) -> Result<(), ApiError> {
        Ok(())
    }
}

impl RequestBody for Box<RawValue> {}

impl<T: RequestBody + 'static> FromRequest for JsonBody<T> {
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let raw = web::Json::<Box<RawValue>>::from_request(req, payload);
        Box::pin(async move {
            let raw = raw.await?;
            Ok(JsonBody(parse(raw.get())?))
        })
    }
}

/// serde_json's own recursion limit for the values it parses.
pub const MAX_NESTING: usize = 128;

/// Parses `text` (syntactically valid JSON) into `T`; a mismatch names the field at fault.
pub fn parse<T: RequestBody>(text: &str) -> Result<T, ApiError> {
    if nesting_depth(text) > MAX_NESTING {
        return Err(ApiError::MalformedJson(format!(
            "the body nests arrays and objects deeper than {MAX_NESTING} levels"
        )));
    }
    match parse_tracked(text) {
        Err(unnamed @ ApiError::MalformedJson(_)) => match T::check_groups(text) {
            Err(named @ ApiError::InvalidParameter { .. }) => Err(named),
            _ => Err(unnamed),
        },
        parsed => parsed,
    }
}

/// Parses `text` into `T`, naming the field of a mismatch where the path tracker sees it.
pub fn parse_tracked<T: DeserializeOwned>(text: &str) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        let error = e.into_inner();
        let message = error.to_string();
        match param_of(&path, &message) {
            Some(param) => ApiError::InvalidParameter { param, message },
            None => ApiError::MalformedJson(message),
        }
    })
}

/// The deepest nesting of arrays and objects in valid JSON `text` (brackets in strings do
/// not count).
fn nesting_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for byte in text.bytes() {
        match (in_string, byte) {
            (true, _) if escaped => escaped = false,
            (true, b'\\') => escaped = true,
            (true, b'"') | (false, b'"') => in_string = !in_string,
            (false, b'[' | b'{') => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            (false, b']' | b'}') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// The field a parse error is about: the path where it stopped, extended by the field a
/// "missing field" names (the path then ends at the object that lacks it). None when the body
/// itself is not an object (a path from the root array, or the root).
fn param_of(path: &str, message: &str) -> Option<String> {
    if path.starts_with('[') {
        return None;
    }
    let missing = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(field, _)| field);
    match (path, missing) {
        (".", Some(field)) => Some(field.to_owned()),
        (".", None) => None,
        (path, Some(field)) => Some(format!("{path}.{field}")),
        (path, None) => Some(path.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::openai_types::{ChatCompletionRequest, CompletionRequest};
    use crate::api::responses::ResponsesRequest;

    fn param_for<T: RequestBody>(body: &str) -> Option<String> {
        match parse::<T>(body) {
            Ok(_) => panic!("{body} parsed"),
            Err(e) => e.param().map(str::to_owned),
        }
    }

    #[test]
    fn a_misfit_field_is_named_by_its_path() {
        let chat = |body| param_for::<ChatCompletionRequest>(body);
        assert_eq!(chat(r#"{"messages": null}"#).as_deref(), Some("messages"));
        assert_eq!(chat(r#"{"messages": "hi"}"#).as_deref(), Some("messages"));
        assert_eq!(chat(r#"{"messages": [123]}"#).as_deref(), Some("messages[0]"));
        assert_eq!(chat(r#"{"messages": [{}]}"#).as_deref(), Some("messages[0].role"));
        let role = r#"{"messages": [{"role": "user", "content": "a"}, {"role": 5}]}"#;
        assert_eq!(chat(role).as_deref(), Some("messages[1].role"));
        let content = r#"{"messages": [{"role": "user", "content": 5}]}"#;
        assert_eq!(chat(content).as_deref(), Some("messages[0].content"));
        assert_eq!(chat(r#"{"model": "m"}"#).as_deref(), Some("messages"));
        let completion = |body| param_for::<CompletionRequest>(body);
        assert_eq!(
            completion(r#"{"prompt": "a", "temperature": 1e400}"#).as_deref(),
            Some("temperature")
        );
        assert_eq!(completion(r#"{"prompt": {"a": 1}}"#).as_deref(), Some("prompt"));
        assert_eq!(completion(r#"{"prompt": [4294967296]}"#).as_deref(), Some("prompt"));
    }

    /// The parse error of `field: value` in `body`, as (param, message).
    fn misfit<T: RequestBody>(body: &str, field: &str, value: &str) -> (Option<String>, String) {
        let text = format!(r#"{{{body}, "{field}": {value}}}"#);
        match parse::<T>(&text) {
            Ok(_) => panic!("{text} parsed"),
            Err(e) => (e.param().map(str::to_owned), e.to_string()),
        }
    }

    #[test]
    fn a_misfit_field_of_a_shared_group_is_named_in_every_body() {
        const COMPLETION: &str = r#""prompt": "a""#;
        const CHAT: &str = r#""messages": [{"role": "user", "content": "a"}]"#;
        const RESPONSES: &str = r#""input": "a""#;
        // One field of each group (`CommonFields`, `SamplingFields`, `ConstraintFields`).
        let groups = [
            ("temperature", r#""hot""#, "expected f32"),
            ("top_k", "1.5", "expected i32"),
            ("guided_regex", "5", "expected a string"),
        ];
        for (field, value, expected) in groups {
            for (param, message) in [
                misfit::<CompletionRequest>(COMPLETION, field, value),
                misfit::<ChatCompletionRequest>(CHAT, field, value),
            ] {
                assert_eq!(param.as_deref(), Some(field), "{message}");
                assert!(message.contains(expected), "{field}: {message}");
            }
        }
        let (param, message) = misfit::<ResponsesRequest>(RESPONSES, "seed", r#""x""#);
        assert_eq!(
            (param.as_deref(), message.contains("expected i64")),
            (Some("seed"), true),
            "{message}"
        );
        // Inside a group's field, the path goes on.
        let (param, _) = misfit::<ChatCompletionRequest>(CHAT, "stop_token_ids", "[1, -2]");
        assert_eq!(param.as_deref(), Some("stop_token_ids[1]"));
        let (param, _) = misfit::<CompletionRequest>(COMPLETION, "stream_options", "[true]");
        assert_eq!(param.as_deref(), Some("stream_options"));
        // A body's own field is named as before, and a body that parses still does.
        let (param, _) = misfit::<CompletionRequest>(COMPLETION, "echo", "3");
        assert_eq!(param.as_deref(), Some("echo"));
        let text = r#"{"prompt": "a", "temperature": 0.5, "top_k": 3, "guided_regex": "x+", "future": 1}"#;
        let parsed = parse::<CompletionRequest>(text).expect("parses");
        assert_eq!(
            (
                parsed.common.temperature,
                parsed.sampling.top_k,
                parsed.constraints.guided_regex.as_deref()
            ),
            (Some(0.5), Some(3), Some("x+"))
        );
    }

    #[test]
    fn nesting_is_measured_outside_strings_only() {
        assert_eq!(nesting_depth(r#"{"a": [1, {"b": []}]}"#), 4);
        assert_eq!(nesting_depth(r#"{"a": "[[[{{\"[["}"#), 1);
        assert_eq!(nesting_depth(r#"{"a": "ends in a backslash \\", "b": ["]", {}]}"#), 3);
        assert_eq!(nesting_depth("7"), 0);
        let deep = format!(r#"{{"prompt": "a", "x": {}{}}}"#, "[".repeat(200), "]".repeat(200));
        assert!(matches!(
            parse::<CompletionRequest>(&deep),
            Err(ApiError::MalformedJson(_))
        ));
        let fine = format!(r#"{{"prompt": "a", "x": {}{}}}"#, "[".repeat(100), "]".repeat(100));
        assert!(parse::<CompletionRequest>(&fine).is_ok());
    }

    #[test]
    fn a_body_that_is_not_an_object_has_no_param() {
        assert_eq!(param_for::<CompletionRequest>("[1]"), None);
        assert!(matches!(
            parse::<CompletionRequest>("7"),
            Err(ApiError::MalformedJson(_))
        ));
    }
}
