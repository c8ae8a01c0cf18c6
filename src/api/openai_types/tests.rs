//! Wire-format tests of the OpenAI types.
use serde::Deserialize;
use serde_json::json;

use super::*;

fn parse<T: for<'de> Deserialize<'de>>(v: serde_json::Value) -> Result<T, String> {
    serde_json::from_value(v).map_err(|e| e.to_string())
}

#[test]
fn prompt_accepts_all_four_shapes() {
    let p = |v| parse::<PromptInput>(v);
    assert_eq!(p(json!("hi")), Ok(PromptInput::Text("hi".into())));
    assert_eq!(
        p(json!(["a", "b"])),
        Ok(PromptInput::TextBatch(vec!["a".into(), "b".into()]))
    );
    assert_eq!(p(json!([1, 2])), Ok(PromptInput::Tokens(vec![1, 2])));
    assert_eq!(
        p(json!([[1], [2, 3]])),
        Ok(PromptInput::TokenBatch(vec![vec![1], vec![2, 3]]))
    );
    let err = p(json!({"x": 1})).unwrap_err();
    assert!(err.starts_with("field `prompt` must be"), "{err}");
    assert!(p(json!([-1])).is_err());
}

#[test]
fn completion_request_from_python_client_shape() {
    let req: CompletionRequest = parse(json!({
        "model": "m", "prompt": "Say hi", "max_tokens": 7, "temperature": 0,
        "stream": true, "stream_options": {"include_usage": true},
        "stop": "\n", "logprobs": 2, "echo": false, "logit_bias": {"50256": -100},
        "best_of": 1, "top_k": 5, "min_p": 0.1, "ignore_eos": true,
        "stop_token_ids": [2], "suffix": null, "some_future_field": {"a": 1}
    }))
    .unwrap();
    assert_eq!(req.max_tokens, Some(7));
    assert_eq!(req.common.temperature, Some(0.0));
    assert_eq!(req.sampling.stop, Some(StopInput::Single("\n".into())));
    assert_eq!(req.sampling.top_k, Some(5));
    assert_eq!(req.sampling.stop_token_ids, Some(vec![2]));
    assert_eq!(req.sampling.stream_options.unwrap().include_usage, Some(true));
    // Explicit nulls (the Python client passes `None` through) parse.
    let req: CompletionRequest = parse(json!({"prompt": "x", "max_tokens": null, "stop": null})).unwrap();
    assert_eq!(req.max_tokens, None);
    assert_eq!(req.common.model, None);
}

#[test]
fn chat_request_content_parts_flatten() {
    let req: ChatCompletionRequest = parse(json!({
        "model": "m",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a"},
                                         {"type": "text", "text": "b"}], "name": "bob"},
            {"role": "assistant", "content": null},
        ],
        "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 3,
        "tools": [], "response_format": {"type": "text"}
    }))
    .unwrap();
    let msgs = req.flattened_messages().unwrap();
    assert_eq!(msgs[1].content, "a\nb");
    assert_eq!(msgs[1].role, "user");
    assert_eq!(msgs[1].name.as_deref(), Some("bob"));
    assert_eq!(msgs[2].content, "");
}

#[test]
fn non_text_part_names_the_message() {
    let req: ChatCompletionRequest = parse(json!({
        "messages": [{"role": "user", "content": "x"},
                     {"role": "user", "content": [{"type": "image_url",
                                                   "image_url": {"url": "u"}}]}]
    }))
    .unwrap();
    let err = req.flattened_messages().unwrap_err();
    assert_eq!(err.param(), Some("messages[1].content"));
}

#[test]
fn unknown_role_is_rejected() {
    let r = parse::<ChatCompletionRequest>(json!({"messages": [{"role": "bot", "content": "x"}]}));
    assert!(r.unwrap_err().contains("unknown variant `bot`"));
}

#[test]
fn chunk_keeps_null_finish_reason_and_logprobs_and_omits_usage() {
    let chunk = ChatCompletionChunk::new(
        "chatcmpl-1".into(),
        1,
        "m".into(),
        vec![ChatChunkChoice {
            index: 0,
            delta: ChatDelta {
                role: Some("assistant".into()),
                content: None,
                tool_calls: None,
            },
            logprobs: None,
            finish_reason: None,
            metrics: None,
        }],
    );
    let v = serde_json::to_value(&chunk).unwrap();
    assert_eq!(
        v,
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
               "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant"},
               "logprobs": null, "finish_reason": null}]})
    );
    let mut last = ChatCompletionChunk::new("chatcmpl-1".into(), 1, "m".into(), vec![]);
    last.usage = Some(Usage::new(3, 4));
    let v = serde_json::to_value(&last).unwrap();
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7,
               "prompt_tokens_details": {"cached_tokens": 0}})
    );
    assert_eq!(v["choices"], json!([]));
}

#[test]
fn completion_response_shape() {
    let resp = CompletionResponse::new(
        "cmpl-1".into(),
        5,
        "m".into(),
        vec![CompletionChoice {
            index: 0,
            text: "hi".into(),
            logprobs: Some(CompletionLogprobs {
                tokens: vec!["hi".into()],
                token_logprobs: vec![Some(-0.5)],
                top_logprobs: vec![Some(TopLogprobMap(vec![
                    ("hi".into(), -0.5),
                    ("a".into(), -1.0),
                    ("b".into(), finite_logprob(f32::NEG_INFINITY)),
                ]))],
                text_offset: vec![0],
            }),
            finish_reason: Some("length".into()),
            metrics: None,
            prompt_logprobs: None,
        }],
        Usage::new(1, 1),
    );
    let s = serde_json::to_string(&resp).unwrap();
    // Insertion order survives.
    assert!(
        s.contains(r#""top_logprobs":[{"hi":-0.5,"a":-1.0,"b":-9999.0}]"#),
        "{s}"
    );
    assert!(s.contains(r#""object":"text_completion""#));
    let back: CompletionResponse = serde_json::from_str(&s).unwrap();
    assert_eq!(back, resp);
}

#[test]
fn chat_response_and_models_shape() {
    let resp = ChatCompletionResponse::new(
        "chatcmpl-1".into(),
        5,
        "m".into(),
        vec![ChatChoice {
            index: 0,
            message: ChatResponseMessage::assistant("yo".into()),
            logprobs: None,
            finish_reason: Some("stop".into()),
            metrics: None,
        }],
        Usage::new(2, 1),
    );
    let v = serde_json::to_value(&resp).unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(
        v["choices"][0]["message"],
        json!({"role": "assistant", "content": "yo"})
    );
    assert!(v["choices"][0].get("logprobs").is_some_and(|l| l.is_null()));
    let models = serde_json::to_value(ModelList::new(vec![ModelCard::new("m".into(), 9, 4096)])).unwrap();
    assert_eq!(
        models,
        json!({"object": "list", "data": [{"id": "m", "object": "model", "created": 9,
               "owned_by": "kiln", "root": "m", "parent": null, "max_model_len": 4096}]})
    );
}
