//! BOS follows the model (`tokenizer.ggml.add_bos_token`): a real server on the tiny model
//! (whose BOS is `<|im_start|>`, id 1) adds it once to completions, chat and `/tokenize`
//! prompts when the model asks, never twice when the text or template already starts with it,
//! and never when the model does not ask; the three paths count the same prompt.

use kiln::testing::TinyModelSpec;
use serde_json::{Value, json};

use crate::common::{Tiny, start_tiny_spec};

/// Renders the contents only: no BOS from the template.
const BARE_TEMPLATE: &str = "{% for m in messages %}{{ m['content'] }}{% endfor %}";
/// Renders BOS itself, as Llama and Gemma templates do.
const BOS_TEMPLATE: &str = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}";

const BOS: u64 = 1;
/// `" the"` in the tiny vocabulary.
const THE: u64 = 261;
const TEXT: &str = " the the";

fn start(add_bos: bool, chat_template: &'static str) -> Tiny {
    let spec = TinyModelSpec {
        add_bos,
        chat_template,
        ..TinyModelSpec::default()
    };
    start_tiny_spec(spec, |_| {})
}

fn tokens(t: &Tiny, body: Value) -> Vec<u64> {
    let (status, v) = t.post("/tokenize", &body);
    assert_eq!(status, 200, "{v}");
    v["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|id| id.as_u64().expect("id"))
        .collect()
}

fn prompt_tokens(t: &Tiny, path: &str, mut body: Value) -> u64 {
    body["max_tokens"] = json!(1);
    let (status, v) = t.post(path, &body);
    assert_eq!(status, 200, "{v}");
    v["usage"]["prompt_tokens"].as_u64().expect("prompt_tokens")
}

fn messages(content: &str) -> Value {
    json!([{"role": "user", "content": content}])
}

#[test]
fn a_model_that_asks_for_bos_gets_it_once_on_every_path() {
    let t = start(true, BARE_TEMPLATE);
    assert_eq!(tokens(&t, json!({"prompt": TEXT})), [BOS, THE, THE]);
    assert_eq!(
        tokens(&t, json!({"prompt": TEXT, "add_special_tokens": false})),
        [THE, THE]
    );
    // A prompt that starts with BOS keeps exactly one.
    assert_eq!(
        tokens(&t, json!({"prompt": format!("<|im_start|>{TEXT}")})),
        [BOS, THE, THE]
    );
    assert_eq!(prompt_tokens(&t, "/v1/completions", json!({"prompt": TEXT})), 3);
    assert_eq!(
        prompt_tokens(&t, "/v1/completions", json!({"prompt": format!("<|im_start|>{TEXT}")})),
        3
    );
    // Token-id prompts are the client's own: taken as sent.
    assert_eq!(prompt_tokens(&t, "/v1/completions", json!({"prompt": [THE, THE]})), 2);
    // The template renders no BOS: chat adds it, and /tokenize says the same.
    assert_eq!(tokens(&t, json!({"messages": messages(TEXT)})), [BOS, THE, THE]);
    assert_eq!(
        prompt_tokens(&t, "/v1/chat/completions", json!({"messages": messages(TEXT)})),
        3
    );
}

#[test]
fn a_template_that_renders_bos_is_not_given_a_second_one() {
    let t = start(true, BOS_TEMPLATE);
    assert_eq!(tokens(&t, json!({"messages": messages(TEXT)})), [BOS, THE, THE]);
    assert_eq!(
        tokens(&t, json!({"messages": messages(TEXT), "add_special_tokens": false})),
        [BOS, THE, THE]
    );
    assert_eq!(
        prompt_tokens(&t, "/v1/chat/completions", json!({"messages": messages(TEXT)})),
        3
    );
}

#[test]
fn a_model_that_does_not_ask_for_bos_never_gets_it() {
    let t = start(false, BARE_TEMPLATE);
    assert_eq!(tokens(&t, json!({"prompt": TEXT})), [THE, THE]);
    assert_eq!(prompt_tokens(&t, "/v1/completions", json!({"prompt": TEXT})), 2);
    assert_eq!(tokens(&t, json!({"messages": messages(TEXT)})), [THE, THE]);
    assert_eq!(
        prompt_tokens(&t, "/v1/chat/completions", json!({"messages": messages(TEXT)})),
        2
    );
}
