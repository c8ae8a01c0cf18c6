//! `POST /v1/responses` (stateless) on the tiny model: the response object, the event
//! stream, usage, refusals, and that it goes through chat's pipeline (the HTTP metrics name
//! its route; `model_name` labels its engine metrics). The official client's
//! `responses.create` / `responses.stream` run against the real default model.

use serde_json::{Value, json};

use crate::common::{Tiny, metric_value, scrape_until, start_tiny};

fn events(t: &Tiny, body: &Value) -> Vec<Value> {
    let response = t
        .client
        .post(t.server.url("/v1/responses"))
        .json(body)
        .send()
        .expect("request");
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().expect("body");
    assert!(!text.contains("[DONE]"), "the Responses stream has no [DONE]");
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|event| {
            let (kind, data) = event
                .strip_prefix("event: ")
                .and_then(|e| e.split_once("\ndata: "))
                .unwrap_or_else(|| panic!("an event with its type: {event:?}"));
            let data: Value = serde_json::from_str(data).expect("event json");
            assert_eq!(data["type"], kind);
            data
        })
        .collect()
}

#[test]
fn a_response_is_chats_answer_worded_as_the_responses_api() {
    let t = start_tiny(|_| {});
    let body = json!({"instructions": "be brief", "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
                      "max_output_tokens": 6, "temperature": 0, "metadata": {"k": "v"}});
    let (status, whole) = t.post("/v1/responses", &body);
    assert_eq!(status, 200, "{whole}");
    assert!(
        whole["id"].as_str().is_some_and(|id| id.starts_with("resp-")),
        "{whole}"
    );
    assert_eq!(whole["object"], "response");
    assert_eq!(whole["store"], false);
    assert_eq!(whole["metadata"], json!({"k": "v"}));
    assert_eq!(whole["instructions"], "be brief");
    // The tiny model does not stop within 6 tokens.
    assert_eq!(whole["status"], "incomplete", "{whole}");
    assert_eq!(whole["incomplete_details"]["reason"], "max_output_tokens");
    let message = &whole["output"][0];
    assert_eq!(
        (message["type"].as_str(), message["role"].as_str()),
        (Some("message"), Some("assistant"))
    );
    let text = message["content"][0]["text"].as_str().expect("text").to_owned();
    let usage = &whole["usage"];
    assert_eq!(usage["output_tokens"], 6);
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(usage["input_tokens"].as_u64().unwrap() + 6)
    );
    assert!(usage["input_tokens_details"]["cached_tokens"].is_u64(), "{usage}");

    // The same request streamed: the event sequence, numbered, adding up to the same answer.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let events = events(&t, &streamed);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds[..4],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added"
        ]
    );
    assert_eq!(
        kinds[kinds.len() - 4..],
        [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event["sequence_number"], i, "{event}");
    }
    let deltas: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, text);
    let last = &events[events.len() - 1]["response"];
    assert_eq!(
        last["status"], "incomplete",
        "cut: `response.completed` as vLLM sends it, status incomplete"
    );
    assert_eq!(last["output"][0]["content"][0]["text"], text.as_str());
    assert_eq!(last["usage"]["output_tokens"], 6);

    // Through chat's pipeline: the route in the HTTP metrics, the model in the engine's.
    let metrics = scrape_until(&t, |m| {
        metric_value(
            m,
            "http_server_request_duration_seconds_count",
            "http_route=\"/v1/responses\"",
        ) == Some(2.0)
    });
    assert!(metric_value(&metrics, "vllm:request_success_total", "model_name=").is_some());
}

#[test]
fn a_forced_call_is_a_function_call_item_streamed_and_not() {
    let t = start_tiny(|_| {});
    let tool = json!({"type": "function", "name": "w", "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}});
    let body = json!({"input": "weather?", "tools": [tool], "tool_choice": {"type": "function", "name": "w"},
                      "max_output_tokens": 40, "temperature": 0});
    let (status, whole) = t.post("/v1/responses", &body);
    assert_eq!(status, 200, "{whole}");
    let call = &whole["output"][0];
    assert_eq!(
        (call["type"].as_str(), call["name"].as_str()),
        (Some("function_call"), Some("w")),
        "{whole}"
    );
    assert!(call["call_id"].is_string() && call["id"].is_string());
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let events = events(&t, &streamed);
    let arguments: String = events
        .iter()
        .filter(|e| e["type"] == "response.function_call_arguments.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(
        arguments,
        call["arguments"].as_str().unwrap(),
        "greedy: the same arguments"
    );
    let done = events
        .iter()
        .find(|e| e["type"] == "response.function_call_arguments.done")
        .expect("arguments done");
    assert_eq!(
        (done["name"].as_str(), done["arguments"].as_str()),
        (Some("w"), Some(arguments.as_str()))
    );
}

#[test]
fn what_cannot_be_served_is_a_400_naming_the_field() {
    let t = start_tiny(|_| {});
    for (body, param) in [
        (
            json!({"input": "hi", "previous_response_id": "resp_1"}),
            "previous_response_id",
        ),
        (
            json!({"input": [{"type": "reasoning", "summary": []}]}),
            "input[0].type",
        ),
        (json!({"input": "hi", "max_output_tokens": 0}), "max_output_tokens"),
        (
            json!({"input": "hi", "tools": [{"type": "function", "name": "f"}], "tool_choice": "auto"}),
            "tool_choice",
        ),
    ] {
        let (status, error) = t.post("/v1/responses", &body);
        assert_eq!(status, 400, "{body}: {error}");
        assert_eq!(error["error"]["param"], param, "{body}: {error}");
    }
    let (status, _) = t.post("/v1/responses", &json!({"input": "hi", "max_output_tokens": 2}));
    assert_eq!(status, 200, "the server goes on");
}

#[test]
#[ignore = "needs the real model and the openai client; .ci/run provides them"]
fn the_openai_client_creates_and_streams_responses() {
    let server = crate::openai_client::serve_real_model(|c| {
        c.model.chat_template = crate::tool_calling::TOOLS_TEMPLATE.into();
        c.model.enable_auto_tool_choice = true;
        c.model.tool_call_parser = Some(kiln::config::ToolCallParser::Hermes);
        // For the cached tokens of a repeated prompt.
        c.engine.enable_prefix_caching = true;
    });
    crate::openai_client::run_openai_script("openai_responses_check.py", &server.url("/v1"));
}
