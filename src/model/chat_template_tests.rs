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
