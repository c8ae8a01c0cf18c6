//! The model-free checks of each body: the endpoint's own rules and the sampling group.

use serde_json::{Value, json};

use super::sampling::check_logit_bias_ids;
use super::*;
use crate::api::openai_types::{ChatCompletionRequest, CompletionRequest};

fn completion(extra: Value) -> Result<SamplingParams, ApiError> {
    let mut body = json!({"model": "m", "prompt": "hi"});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let req: CompletionRequest = serde_json::from_value(body).expect("test body parses");
    req.check(None).map(|checked| checked.params)
}

fn chat(extra: Value) -> Result<SamplingParams, ApiError> {
    let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let req: ChatCompletionRequest = serde_json::from_value(body).expect("test body parses");
    req.check(None).map(|checked| checked.params)
}

fn rejected_param(r: Result<SamplingParams, ApiError>) -> String {
    match r {
        Err(e) => e.param().unwrap_or("<none>").to_owned(),
        Ok(p) => panic!("expected an error, got {p:?}"),
    }
}

#[test]
fn defaults() {
    let p = completion(json!({})).unwrap();
    assert_eq!(p, SamplingParams::default());
    let p = chat(json!({})).unwrap();
    assert_eq!(p.max_tokens, None);
    assert_eq!(p.logprobs, None);
}

#[test]
fn a_request_cannot_bring_its_own_chat_template() {
    for template in [json!("{{ 'x' }}"), json!(""), json!({"a": 1})] {
        assert_eq!(
            rejected_param(chat(json!({ "chat_template": template }))),
            "chat_template"
        );
    }
    // `null` is the same as leaving it out.
    assert!(chat(json!({"chat_template": null})).is_ok());
}

#[test]
fn each_bad_value_names_its_parameter() {
    let cases = [
        (json!({"temperature": 2.5}), "temperature"),
        (json!({"temperature": -0.1}), "temperature"),
        (json!({"top_p": 0}), "top_p"),
        (json!({"top_p": 1.01}), "top_p"),
        (json!({"top_k": -2}), "top_k"),
        (json!({"min_p": 1.5}), "min_p"),
        (json!({"n": 0}), "n"),
        (json!({"n": 17}), "n"),
        (json!({"max_tokens": 0}), "max_tokens"),
        (json!({"presence_penalty": 2.1}), "presence_penalty"),
        (json!({"frequency_penalty": -3}), "frequency_penalty"),
        (json!({"repetition_penalty": 0}), "repetition_penalty"),
        (json!({"stop": ["a", "b", "c", "d", "e"]}), "stop"),
        (json!({"min_tokens": 3, "max_tokens": 2}), "min_tokens"),
        (json!({"logit_bias": {"x": 1}}), "logit_bias"),
        (json!({"logit_bias": {"5": 101}}), "logit_bias"),
        (json!({"logit_bias": {"5": -100.5}}), "logit_bias"),
        (json!({"stream_options": {"include_usage": true}}), "stream_options"),
    ];
    for (body, param) in cases {
        assert_eq!(rejected_param(completion(body.clone())), param, "completion {body}");
        assert_eq!(rejected_param(chat(body.clone())), param, "chat {body}");
    }
}

#[test]
fn completion_specific_rules() {
    assert_eq!(rejected_param(completion(json!({"logprobs": 21}))), "logprobs");
    assert_eq!(rejected_param(completion(json!({"best_of": 2}))), "best_of");
    assert_eq!(
        rejected_param(completion(json!({"prompt_logprobs": 21}))),
        "prompt_logprobs"
    );
    assert_eq!(
        rejected_param(chat(json!({"prompt_logprobs": 1, "stream": true}))),
        "prompt_logprobs"
    );
    assert_eq!(chat(json!({"prompt_logprobs": 1})).unwrap().prompt_logprobs, Some(1));
    let p = completion(json!({"echo": true, "logprobs": 3, "prompt_logprobs": 1})).unwrap();
    assert!(p.echo && p.return_prompt_logprobs);
    assert_eq!(p.prompt_logprobs, Some(3), "echo's logprobs need the larger top-k");
    let p = completion(json!({"echo": true, "logprobs": 2})).unwrap();
    assert_eq!((p.prompt_logprobs, p.return_prompt_logprobs), (Some(2), false));
    assert!(completion(json!({"best_of": 2, "n": 2})).is_ok());
    let p = completion(json!({"logit_bias": {"9": 1.5, "5": -100}, "echo": true})).unwrap();
    assert_eq!(p.logit_bias, vec![(5, -100.0), (9, 1.5)], "sorted by id");
    assert!(check_logit_bias_ids(&p, 10).is_ok());
    let err = check_logit_bias_ids(&p, 9).unwrap_err();
    assert_eq!(err.param(), Some("logit_bias"));
    let p = completion(json!({"min_tokens": 4, "max_tokens": 4, "prompt_logprobs": 2})).unwrap();
    assert_eq!((p.min_tokens, p.prompt_logprobs), (4, Some(2)));
    assert_eq!(
        chat(json!({"min_tokens": 4000})).unwrap().min_tokens,
        4000,
        "open max_tokens"
    );
    for prompt in [json!(""), json!([]), json!(["a", ""]), json!([[1], []])] {
        assert_eq!(rejected_param(completion(json!({"prompt": prompt}))), "prompt");
    }
    assert_eq!(completion(json!({"logprobs": 0})).unwrap().logprobs, Some(0));
}

#[test]
fn chat_specific_rules() {
    assert_eq!(rejected_param(chat(json!({"top_logprobs": 2}))), "top_logprobs");
    assert_eq!(
        rejected_param(chat(json!({"logprobs": true, "top_logprobs": 21}))),
        "top_logprobs"
    );
    assert_eq!(chat(json!({"logprobs": true})).unwrap().logprobs, Some(0));
    let p = chat(json!({"logprobs": true, "top_logprobs": 5})).unwrap();
    assert_eq!(p.logprobs, Some(5));
    assert_eq!(rejected_param(chat(json!({"messages": []}))), "messages");
    let p = chat(json!({"max_tokens": 5, "max_completion_tokens": 9})).unwrap();
    assert_eq!(p.max_tokens, Some(9));
    assert_eq!(
        rejected_param(chat(json!({"max_tokens": 5, "max_completion_tokens": 0}))),
        "max_completion_tokens"
    );
    assert_eq!(
        rejected_param(chat(json!({"max_tokens": 0, "max_completion_tokens": 5}))),
        "max_tokens"
    );
}

#[test]
fn accepted_values_are_carried_over() {
    let p = completion(json!({
        "temperature": 0, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": -1,
        "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
        "max_tokens": 32, "stop": ["\n", ""], "stop_token_ids": [7], "ignore_eos": true,
        "logprobs": 3, "n": 2
    }))
    .unwrap();
    assert_eq!(p.temperature, 0.0);
    assert!(p.is_greedy());
    assert_eq!(p.top_k, Some(40));
    assert_eq!(p.seed, Some(u64::MAX));
    assert_eq!(p.stop, vec!["\n".to_owned()]);
    assert_eq!(p.stop_token_ids, vec![7]);
    assert!(p.ignore_eos);
    assert_eq!(p.logprobs, Some(3));
    assert_eq!((p.n, p.max_tokens), (2, Some(32)));
    for k in [-1, 0] {
        assert_eq!(completion(json!({"top_k": k})).unwrap().top_k, None);
    }
    assert_eq!(completion(json!({"stop": "END"})).unwrap().stop, vec!["END".to_owned()]);
}

#[test]
fn a_responses_body_is_checked_as_chat_under_its_own_names() {
    use crate::api::responses::ResponsesRequest;

    let responses = |body: Value| serde_json::from_value::<ResponsesRequest>(body).expect("test body parses");
    let checked = responses(json!({"input": "hi", "max_output_tokens": 5, "stream": true, "seed": -3}))
        .check(None)
        .expect("valid");
    assert_eq!(
        checked.names,
        ParamNames {
            prompt: "input",
            max_tokens: "max_output_tokens"
        }
    );
    assert_eq!(
        checked.delivery,
        Delivery::Stream(UsageChunks {
            closing: true,
            continuous: false
        })
    );
    assert_eq!(
        (checked.params.max_tokens, checked.params.seed),
        (Some(5), Some(u64::MAX - 2))
    );
    let refused = responses(json!({"input": "hi", "temperature": 3})).check(None);
    assert_eq!(rejected_param(refused.map(|c| c.params)), "temperature");
}

#[test]
fn stream_options_need_stream_and_say_how_usage_is_sent() {
    let options = StreamOptions {
        include_usage: Some(true),
        continuous_usage_stats: Some(true),
    };
    assert_eq!(
        Delivery::of(Some(true), Some(&options)).expect("valid"),
        Delivery::Stream(UsageChunks {
            closing: true,
            continuous: true
        })
    );
    assert_eq!(Delivery::of(None, None).expect("valid"), Delivery::Whole);
    let refused = Delivery::of(Some(false), Some(&options)).expect_err("no stream");
    assert_eq!(refused.param(), Some("stream_options"));
}
