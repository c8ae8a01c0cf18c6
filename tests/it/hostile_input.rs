//! Malformed and hostile request bodies against the real server on the tiny model: each gets a
//! 4xx with an OpenAI-shaped error naming the field at fault where there is one, and the
//! server keeps serving.

use kiln::model::loader::open_model;
use kiln::tokenizer::token_id_bound;
use serde_json::{Value, json};

use crate::common::{Tiny, start_tiny};

const CHAT: &str = "/v1/chat/completions";
const COMPLETIONS: &str = "/v1/completions";
const RESPONSES: &str = "/v1/responses";

/// What a case expects: the status and the `param` (`None`: `null`).
struct Case {
    name: &'static str,
    path: &'static str,
    body: Vec<u8>,
    status: u16,
    param: Option<&'static str>,
}

fn case(
    name: &'static str,
    path: &'static str,
    body: impl Into<Vec<u8>>,
    status: u16,
    param: Option<&'static str>,
) -> Case {
    Case {
        name,
        path,
        body: body.into(),
        status,
        param,
    }
}

fn chat_with_messages(messages: &str) -> String {
    format!(r#"{{"messages": {messages}, "max_tokens": 2}}"#)
}

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

fn post_raw(t: &Tiny, path: &str, body: Vec<u8>) -> (u16, Value) {
    let resp = t
        .client
        .post(t.server.url(path))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .expect("request");
    let status = resp.status().as_u16();
    (status, resp.json().unwrap_or(Value::Null))
}

/// OpenAI's error shape: `message` and `type` strings, `param` and `code` present.
fn is_openai_error(body: &Value) -> bool {
    let error = &body["error"];
    let nullable_string = |key| error.get(key).is_some_and(|v: &Value| v.is_string() || v.is_null());
    error["message"].is_string() && error["type"].is_string() && nullable_string("param") && nullable_string("code")
}

fn cases(vocabulary: u64) -> Vec<Case> {
    let big = "a".repeat(1_000_000);
    let user = |content: &str| chat_with_messages(&format!(r#"[{{"role": "user", "content": {content}}}]"#));
    vec![
        // Chat messages of the wrong shape.
        case("messages null", CHAT, chat_with_messages("null"), 400, Some("messages")),
        case(
            "messages a string",
            CHAT,
            chat_with_messages(r#""hi""#),
            400,
            Some("messages"),
        ),
        case(
            "messages [123]",
            CHAT,
            chat_with_messages("[123]"),
            400,
            Some("messages[0]"),
        ),
        case(
            "messages [{}]",
            CHAT,
            chat_with_messages("[{}]"),
            400,
            Some("messages[0].role"),
        ),
        case("messages []", CHAT, chat_with_messages("[]"), 400, Some("messages")),
        case("messages missing", CHAT, r#"{"max_tokens": 2}"#, 400, Some("messages")),
        case(
            "numeric role",
            CHAT,
            chat_with_messages(r#"[{"role": 5, "content": "hi"}]"#),
            400,
            Some("messages[0].role"),
        ),
        case(
            "unknown role",
            CHAT,
            chat_with_messages(r#"[{"role": "bot", "content": "hi"}]"#),
            400,
            Some("messages[0].role"),
        ),
        case("numeric content", CHAT, user("5"), 400, Some("messages[0].content")),
        case(
            "object content",
            CHAT,
            user(r#"{"text": "hi"}"#),
            400,
            Some("messages[0].content"),
        ),
        case(
            "image part",
            CHAT,
            user(r#"[{"type": "image_url", "image_url": {"url": "x"}}]"#),
            400,
            Some("messages[0].content"),
        ),
        case(
            "unknown part type",
            CHAT,
            user(r#"[{"type": "mystery", "text": "hi"}]"#),
            400,
            Some("messages[0].content"),
        ),
        case(
            "numeric part type",
            CHAT,
            user(r#"[{"type": 5, "text": "hi"}]"#),
            400,
            Some("messages[0].content"),
        ),
        case(
            "text part without text",
            CHAT,
            user(r#"[{"type": "text"}]"#),
            400,
            Some("messages[0].content[0].text"),
        ),
        // Bytes that are not UTF-8, inside a string and outside.
        case(
            "invalid UTF-8 in a string",
            CHAT,
            [
                &br#"{"messages": [{"role": "user", "content": ""#[..],
                b"\xff\xfe",
                b"\"}]}",
            ]
            .concat(),
            400,
            None,
        ),
        case(
            "invalid UTF-8 prompt",
            COMPLETIONS,
            [&br#"{"prompt": "a"#[..], b"\xc3\x28", b"\"}"].concat(),
            400,
            None,
        ),
        case(
            "invalid UTF-8 body",
            COMPLETIONS,
            b"\xff\xff\xff\xff".to_vec(),
            400,
            None,
        ),
        // Numbers JSON cannot carry or kiln cannot hold.
        case("NaN", COMPLETIONS, r#"{"prompt": "a", "temperature": NaN}"#, 400, None),
        case(
            "1e400 temperature",
            COMPLETIONS,
            r#"{"prompt": "a", "temperature": 1e400}"#,
            400,
            Some("temperature"),
        ),
        case(
            "-1e400 top_p",
            CHAT,
            r#"{"messages": [{"role": "user", "content": "a"}], "top_p": -1e400}"#,
            400,
            Some("top_p"),
        ),
        case(
            "1e400 max_tokens",
            COMPLETIONS,
            r#"{"prompt": "a", "max_tokens": 1e400}"#,
            400,
            Some("max_tokens"),
        ),
        case(
            "1e39 overflows f32",
            COMPLETIONS,
            r#"{"prompt": "a", "presence_penalty": 1e39}"#,
            400,
            Some("presence_penalty"),
        ),
        case(
            "\"NaN\" as a string",
            COMPLETIONS,
            r#"{"prompt": "a", "temperature": "NaN"}"#,
            400,
            Some("temperature"),
        ),
        // Nesting 10,000 deep: as the body, in a known field, in an unknown one.
        case("deep body", COMPLETIONS, nested(10_000), 400, None),
        case(
            "deep prompt",
            COMPLETIONS,
            format!(r#"{{"prompt": {}}}"#, nested(10_000)),
            400,
            None,
        ),
        case("deep messages", CHAT, chat_with_messages(&nested(10_000)), 400, None),
        case(
            "deep unknown field",
            COMPLETIONS,
            format!(r#"{{"prompt": "a", "extra": {}}}"#, nested(10_000)),
            400,
            None,
        ),
        // 1 MB strings.
        case(
            "1 MB prompt",
            COMPLETIONS,
            format!(r#"{{"prompt": "{big}"}}"#),
            400,
            Some("prompt"),
        ),
        case(
            "1 MB message",
            CHAT,
            user(&format!(r#""{big}""#)),
            400,
            Some("messages"),
        ),
        case(
            "1 MB stop",
            COMPLETIONS,
            format!(r#"{{"prompt": "a", "stop": "{big}"}}"#),
            400,
            Some("stop"),
        ),
        case(
            "1 MB model",
            COMPLETIONS,
            format!(r#"{{"prompt": "a", "model": "{big}"}}"#),
            404,
            None,
        ),
        case(
            "2 MB prompt",
            COMPLETIONS,
            format!(r#"{{"prompt": "{big}{big}"}}"#),
            413,
            None,
        ),
        // Token ids past the vocabulary and past u32.
        case(
            "id = vocabulary",
            COMPLETIONS,
            format!(r#"{{"prompt": [1, {vocabulary}], "max_tokens": 1}}"#),
            400,
            Some("prompt"),
        ),
        case(
            "id past in a batch",
            COMPLETIONS,
            format!(r#"{{"prompt": [[1], [{vocabulary}]], "max_tokens": 1}}"#),
            400,
            Some("prompt"),
        ),
        case(
            "id = u32::MAX",
            COMPLETIONS,
            r#"{"prompt": [4294967295], "max_tokens": 1}"#,
            400,
            Some("prompt"),
        ),
        case(
            "id > u32::MAX",
            COMPLETIONS,
            r#"{"prompt": [4294967296], "max_tokens": 1}"#,
            400,
            Some("prompt"),
        ),
        case(
            "negative id",
            COMPLETIONS,
            r#"{"prompt": [-1], "max_tokens": 1}"#,
            400,
            Some("prompt"),
        ),
        case(
            "stop id > u32::MAX",
            COMPLETIONS,
            r#"{"prompt": "a", "stop_token_ids": [4294967296]}"#,
            400,
            Some("stop_token_ids[0]"),
        ),
    ]
    .into_iter()
    .chain(misfit_group_fields())
    .collect()
}

/// A value of the wrong type in one field of each shared field group (`CommonFields`,
/// `SamplingFields`, `ConstraintFields`), in each body that carries the group: the groups are
/// flattened into the bodies, and the 400 still names the field.
fn misfit_group_fields() -> Vec<Case> {
    let chat = |field: &str, value: &str| {
        format!(r#"{{"messages": [{{"role": "user", "content": "hi"}}], "{field}": {value}}}"#)
    };
    let completion = |field: &str, value: &str| format!(r#"{{"prompt": "hi", "{field}": {value}}}"#);
    let responses = |field: &str, value: &str| format!(r#"{{"input": "hi", "{field}": {value}}}"#);
    vec![
        case(
            "common group, completions",
            COMPLETIONS,
            completion("temperature", r#""hot""#),
            400,
            Some("temperature"),
        ),
        case("common group, chat", CHAT, chat("seed", "1.5"), 400, Some("seed")),
        case(
            "common group, responses",
            RESPONSES,
            responses("top_p", r#""all""#),
            400,
            Some("top_p"),
        ),
        case(
            "common group, responses stream",
            RESPONSES,
            responses("stream", "1"),
            400,
            Some("stream"),
        ),
        case(
            "sampling group, completions",
            COMPLETIONS,
            completion("top_k", "2.5"),
            400,
            Some("top_k"),
        ),
        case("sampling group, chat", CHAT, chat("stop", "7"), 400, Some("stop")),
        case(
            "sampling group, nested",
            CHAT,
            chat("stop_token_ids", "[1, -2]"),
            400,
            Some("stop_token_ids[1]"),
        ),
        case(
            "constraint group, completions",
            COMPLETIONS,
            completion("guided_regex", "5"),
            400,
            Some("guided_regex"),
        ),
        case(
            "constraint group, chat",
            CHAT,
            chat("guided_choice", r#""a""#),
            400,
            Some("guided_choice"),
        ),
    ]
}

#[test]
fn malformed_and_hostile_bodies_get_openai_errors_and_the_server_keeps_serving() {
    let t = start_tiny(|_| {});
    let vocabulary = token_id_bound(&open_model(&t.model_path).expect("open").tokenizer) as u64;
    let mut failures = Vec::new();
    for c in cases(vocabulary) {
        let (status, body) = post_raw(&t, c.path, c.body);
        let param = body["error"]["param"].as_str();
        if status != c.status || param != c.param || !is_openai_error(&body) {
            failures.push(format!(
                "{}: got {status} param {param:?}, expected {} param {:?}: {}",
                c.name,
                c.status,
                c.param,
                body.to_string().chars().take(300).collect::<String>()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // The last id of the vocabulary is a valid prompt, and the server still serves.
    let edge = json!({"prompt": [1, vocabulary - 1], "max_tokens": 2});
    let (status, body) = t.post(COMPLETIONS, &edge);
    assert_eq!(status, 200, "{body}");
    let chat = json!({"messages": [{"role": "user", "content": "still there?"}], "max_tokens": 2});
    let (status, body) = t.post(CHAT, &chat);
    assert_eq!(status, 200, "{body}");
    assert_eq!(t.get_text("/health").0, 200);
}
