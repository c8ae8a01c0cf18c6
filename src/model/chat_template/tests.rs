//! Chat template tests; expected strings were produced by jinja2 configured as Hugging Face
//! configures it (sandboxed, trim_blocks, lstrip_blocks, `tojson` = `json.dumps`).

use super::*;
use crate::testing::real_model;

const SMOLLM2_TEMPLATE: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

const CHAT_CAPITAL: &str = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";

fn user(content: &str) -> Vec<ChatMessage> {
    vec![ChatMessage::new("user", content)]
}

#[test]
fn smollm2_template_matches_expected_prompt() {
    let t = ChatTemplate::new(SMOLLM2_TEMPLATE, "<|im_start|>", "<|im_end|>").expect("compile");
    let text = t.render(&user("What is the capital of France?"), true).expect("render");
    assert_eq!(text, CHAT_CAPITAL);
    // An explicit system message replaces the default one; no generation prompt.
    let msgs = [ChatMessage::new("system", "Be brief."), ChatMessage::new("user", "Hi")];
    assert_eq!(
        t.render(&msgs, false).expect("render"),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    );
}

#[test]
#[ignore = "needs the shared reference outputs (KILN_SHARED_DIR); .ci/run provides them"]
fn smollm2_template_matches_reference_case() {
    let reference = real_model::greedy_reference();
    let case = reference["cases"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "chat_capital"))
        .expect("chat_capital case");
    let t = ChatTemplate::new(SMOLLM2_TEMPLATE, "<|im_start|>", "<|im_end|>").expect("compile");
    let user_text = case["user"].as_str().expect("user");
    assert_eq!(
        t.render(&user(user_text), true).expect("render"),
        case["text"].as_str().expect("text")
    );
}

#[test]
#[ignore = "needs the real model (KILN_TEST_MODEL); .ci/run provides it"]
fn gguf_template_is_used() {
    let gguf = GgufFile::open(&real_model::model_path()).expect("open");
    assert_eq!(gguf.get_str("tokenizer.chat_template"), Some(SMOLLM2_TEMPLATE));
    let t = ChatTemplate::from_gguf(&gguf).expect("template");
    let text = t.render(&user("What is the capital of France?"), true).expect("render");
    assert_eq!(text, CHAT_CAPITAL);
}

#[test]
fn chatml_fallback() {
    let t = ChatTemplate::chatml("", "<|im_end|>");
    let msgs = [ChatMessage::new("system", "S"), ChatMessage::new("user", "U")];
    assert_eq!(
        t.render(&msgs, true).expect("render"),
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn raise_exception_reports_the_templates_message() {
    let source = "{% if messages[0]['role'] != 'system' %}{{ raise_exception('Roles must alternate!') }}{% endif %}ok";
    let t = ChatTemplate::new(source, "", "").expect("compile");
    assert_eq!(
        t.render(&user("hi"), true),
        Err(ChatTemplateError::Raised("Roles must alternate!".into()))
    );
    assert_eq!(
        t.render(&[ChatMessage::new("system", "s")], true).expect("render"),
        "ok"
    );
}

#[test]
fn syntax_and_render_errors() {
    let err = ChatTemplate::new("{% for %}", "", "").expect_err("syntax");
    assert!(matches!(err, ChatTemplateError::Syntax(_)), "{err}");
    let t = ChatTemplate::new("{{ messages | no_such_filter }}", "", "");
    assert!(t.is_err() || t.expect("t").render(&user("x"), false).is_err());
}

#[test]
fn hf_whitespace_control_python_methods_and_variables() {
    let source = "{% for m in messages %}\n  {% if m.role == 'user' %}\n  [{{ m.content.strip() }}]\n  {% endif %}\n{% endfor %}\n{{ bos_token }}|{{ eos_token }}\n";
    let t = ChatTemplate::new(source, "<s>", "</s>").expect("compile");
    let msgs = [ChatMessage::new("user", "  hi  "), ChatMessage::new("assistant", "x")];
    // jinja2 gives "  [hi]\n<s>|</s>" (the final newline is dropped, keep_trailing_newline=False).
    assert_eq!(t.render(&msgs, false).expect("render"), "  [hi]\n<s>|</s>");
}

#[test]
fn tojson_matches_python_json_dumps() {
    let t = ChatTemplate::new(
        "{{ {'a': [1, 2.5, '<é>'], 'b': none} | tojson }}|{{ {'a': [1]} | tojson(indent=2) }}",
        "",
        "",
    )
    .expect("compile");
    assert_eq!(
        t.render(&[], false).expect("render"),
        "{\"a\": [1, 2.5, \"<é>\"], \"b\": null}|{\n  \"a\": [\n    1\n  ]\n}"
    );
}

/// Renders `source` over one user message with the default limits, timing it.
fn render_hostile(source: &str) -> (Result<String, ChatTemplateError>, std::time::Duration) {
    let t = ChatTemplate::new(source, "", "").expect("compiles");
    let started = std::time::Instant::now();
    let result = t.render(&user("hi"), true);
    (result, started.elapsed())
}

#[test]
fn hostile_templates_hit_a_limit_quickly() {
    let cases = [
        // Nested loops: 10^10 iterations, stopped by the fuel.
        (
            "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
            RenderLimit::Fuel,
        ),
        // A macro that calls itself.
        (
            "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
            RenderLimit::Recursion,
        ),
        // A recursive loop over itself.
        (
            "{% for m in [[1]] recursive %}{{ loop([m]) }}{% endfor %}",
            RenderLimit::Recursion,
        ),
        // Output blow-up, emitted and captured.
        (
            "{% for i in range(100000) %}{{ 'x' * 1000000 }}{% endfor %}",
            RenderLimit::OutputSize,
        ),
        (
            "{% set s %}{% for i in range(100000) %}{{ 'x' * 1000000 }}{% endfor %}{% endset %}",
            RenderLimit::OutputSize,
        ),
        (
            "{% for i in range(100000) %}{% for j in range(1000) %}xxxxxxxxxxxxxxxx{% endfor %}{% endfor %}",
            RenderLimit::OutputSize,
        ),
        // minijinja's own caps.
        ("{{ 'x' * 10**9 }}", RenderLimit::OutputSize),
        ("{% for i in range(10**9) %}{% endfor %}", RenderLimit::RangeSize),
    ];
    for (source, limit) in cases {
        let (result, took) = render_hostile(source);
        assert_eq!(result, Err(ChatTemplateError::LimitExceeded(limit)), "{source}");
        assert!(took < std::time::Duration::from_secs(10), "{source} took {took:?}");
    }
}

#[test]
fn limits_leave_real_conversations_alone() {
    // A thousand turns through the SmolLM2 template, far below every limit.
    let t = ChatTemplate::new(SMOLLM2_TEMPLATE, "", "").expect("compile");
    let msgs: Vec<ChatMessage> = (0..1000)
        .map(|i| ChatMessage::new(if i % 2 == 0 { "user" } else { "assistant" }, "x".repeat(500)))
        .collect();
    let text = t.render(&msgs, true).expect("render");
    assert!(text.len() > 500_000);
    // The output cap is exact: one byte less than this output fails.
    let tight = RenderLimits {
        max_output_bytes: text.len() - 1,
        ..RenderLimits::default()
    };
    let t = ChatTemplate::new(SMOLLM2_TEMPLATE, "", "")
        .expect("compile")
        .with_limits(tight);
    assert_eq!(
        t.render(&msgs, true),
        Err(ChatTemplateError::LimitExceeded(RenderLimit::OutputSize))
    );
}

#[test]
fn a_raised_exception_is_still_the_templates_message() {
    let (result, _) = render_hostile("{{ raise_exception('roles must alternate') }}");
    assert_eq!(result, Err(ChatTemplateError::Raised("roles must alternate".into())));
}

/// The Hermes-style test template (tests/data), which knows tools.
const HERMES_TOOLS_TEMPLATE: &str = include_str!("../../../tests/data/chat_templates/hermes_tools.jinja");

#[test]
fn a_tool_template_sees_tools_calls_and_results() {
    let t = ChatTemplate::new(HERMES_TOOLS_TEMPLATE, "", "<|im_end|>").expect("compile");
    let tools = [
        serde_json::json!({"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}),
    ];
    let call = serde_json::json!({"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}});
    let messages = [
        ChatMessage::new("user", "Weather in Oslo?"),
        ChatMessage {
            tool_calls: Some(vec![call]),
            ..ChatMessage::new("assistant", "")
        },
        ChatMessage {
            tool_call_id: Some("call_1".into()),
            ..ChatMessage::new("tool", "sunny")
        },
    ];
    let text = t.render_with_tools(&messages, Some(&tools), true).expect("render");
    // `tojson` keeps the keys in the order the client sent them, as Hugging Face's does.
    let expected = "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n\
{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}\n\
</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n\
<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n\
<|im_start|>user\nWeather in Oslo?<|im_end|>\n\
<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call><|im_end|>\n\
<|im_start|>user\n<tool_response id=\"call_1\">\nsunny\n</tool_response><|im_end|>\n\
<|im_start|>assistant\n";
    assert_eq!(text, expected);
    // Without tools the same template is plain ChatML, and `tools` is bound (as none).
    let plain = t.render(&messages[..1], true).expect("render");
    assert_eq!(
        plain,
        "<|im_start|>user\nWeather in Oslo?<|im_end|>\n<|im_start|>assistant\n"
    );
}
