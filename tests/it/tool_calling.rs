//! Tool calling in chat on the tiny model: request validation, what reaches the template,
//! and the shape of responses and stream deltas. Tests marked as needing the `structured`
//! work rely on the output constraint holding `required` and named choices to the schemas.

use serde_json::{Value, json};

use kiln::testing::TinyModelSpec;

use crate::common::{Tiny, metric_value, scrape_until, start_tiny_spec};

pub(crate) const TOOLS_TEMPLATE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/chat_templates/hermes_tools.jinja"
);

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"unit": {"type": "string", "enum": ["c", "f"]}},
                "required": ["unit"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "get_time",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": false}}},
    ])
}

/// A tiny model with room for the tools prompt (its tokenizer spends a token per byte or so).
fn long_context() -> TinyModelSpec {
    TinyModelSpec {
        context: 2048,
        ..TinyModelSpec::default()
    }
}

/// The tiny model behind the Hermes tools template, `auto` served with the hermes parser.
fn start_with_tools() -> Tiny {
    start_tiny_spec(long_context(), |c| {
        c.model.chat_template = TOOLS_TEMPLATE.into();
        c.model.enable_auto_tool_choice = true;
        c.model.tool_call_parser = Some(kiln::config::ToolCallParser::Hermes);
    })
}

fn chat(extra: Value) -> Value {
    let mut body = json!({
        "messages": [{"role": "user", "content": "What is the weather?"}],
        "max_tokens": 8,
        "temperature": 0,
    });
    for (k, v) in extra.as_object().expect("object") {
        body[k] = v.clone();
    }
    body
}

fn refused(t: &Tiny, body: &Value) -> String {
    let (status, error) = t.post("/v1/chat/completions", body);
    assert_eq!(status, 400, "{body}: {error}");
    assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
    error["error"]["param"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn bad_tool_requests_get_400_and_leave_nothing_running() {
    let t = start_with_tools();
    let missing = json!({"tools": tools(), "tool_choice": {"type": "function", "function": {"name": "nope"}}});
    assert_eq!(refused(&t, &chat(missing)), "tool_choice");
    let no_tools = json!({"tool_choice": "required"});
    assert_eq!(refused(&t, &chat(no_tools)), "tool_choice");
    let wrong_type = json!({"tools": [{"type": "retrieval", "function": {"name": "x"}}]});
    assert_eq!(refused(&t, &chat(wrong_type)), "tools[0].type");
    let bad_parameters = json!({"tools": [{"type": "function", "function": {"name": "x", "parameters": "no"}}]});
    assert_eq!(refused(&t, &chat(bad_parameters)), "tools[0].function.parameters");
    // Shapes serde refuses: a string for tools, a tool without its function, a bad choice.
    refused(&t, &chat(json!({"tools": "get_weather"})));
    refused(&t, &chat(json!({"tools": [{"type": "function"}]})));
    refused(&t, &chat(json!({"tools": tools(), "tool_choice": "sometimes"})));
    let bad_arguments = json!({"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": "{not json"}}]},
    ]});
    assert_eq!(
        refused(&t, &chat(bad_arguments)),
        "messages[1].tool_calls[0].function.arguments"
    );
    t.wait_for_load(|l| l["running"] == 0 && l["waiting"] == 0 && l["kv_cache_usage"] == 0.0);
    let (status, ok) = t.post("/v1/chat/completions", &chat(json!({})));
    assert_eq!(status, 200, "the server still serves: {ok}");
}

#[test]
fn auto_needs_the_server_flags_as_in_vllm() {
    let t = start_tiny_spec(long_context(), |c| c.model.chat_template = TOOLS_TEMPLATE.into());
    // Tools without tool_choice mean `auto`.
    assert_eq!(refused(&t, &chat(json!({"tools": tools()}))), "tool_choice");
    assert_eq!(
        refused(&t, &chat(json!({"tools": tools(), "tool_choice": "auto"}))),
        "tool_choice"
    );
    let (status, body) = t.post(
        "/v1/chat/completions",
        &chat(json!({"tools": tools(), "tool_choice": "none"})),
    );
    assert_eq!(status, 200, "{body}");
}

fn prompt_tokens(t: &Tiny, body: &Value) -> u64 {
    let (status, response) = t.post("/v1/chat/completions", body);
    assert_eq!(status, 200, "{response}");
    response["usage"]["prompt_tokens"].as_u64().expect("prompt_tokens")
}

#[test]
fn tools_calls_and_results_reach_the_template() {
    let t = start_with_tools();
    let plain = prompt_tokens(&t, &chat(json!({})));
    let with_tools = prompt_tokens(&t, &chat(json!({"tools": tools(), "tool_choice": "none"})));
    assert!(
        with_tools > plain + 50,
        "the template wrote the tools: {plain} -> {with_tools}"
    );
    // `auto` renders the same prompt as `none`: only the reading of the output differs.
    let auto = prompt_tokens(&t, &chat(json!({"tools": tools(), "tool_choice": "auto"})));
    assert_eq!(auto, with_tools);
    let round_trip = json!({"tools": tools(), "tool_choice": "none", "messages": [
        {"role": "user", "content": "What is the weather?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"unit\": \"c\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 degrees"},
    ]});
    let after_call = prompt_tokens(&t, &chat(round_trip));
    assert!(
        after_call > with_tools + 20,
        "the call and its result were rendered: {with_tools} -> {after_call}"
    );
}

/// `/tokenize` renders messages with their tools, calls and results as chat does, so a
/// client can count a tool-using prompt before sending it.
#[test]
fn tokenize_renders_tools_and_calls_as_chat_does() {
    let t = start_with_tools();
    let conversation = json!([
        {"role": "user", "content": "What is the weather?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"unit\": \"c\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 degrees"},
    ]);
    let chat_count = prompt_tokens(
        &t,
        &chat(json!({"tools": tools(), "tool_choice": "none", "messages": conversation})),
    );
    let tokenize = |body: Value| {
        let (status, answer) = t.post("/tokenize", &body);
        assert_eq!(status, 200, "{answer}");
        answer["count"].as_u64().expect("count")
    };
    let with_tools = tokenize(json!({"messages": conversation, "tools": tools()}));
    assert_eq!(with_tools, chat_count, "/tokenize counts the prompt chat computes");
    let without_tools = tokenize(json!({"messages": conversation}));
    assert!(
        without_tools + 50 < with_tools,
        "the tools reached the template: {without_tools} -> {with_tools}"
    );
    let (status, error) = t.post(
        "/tokenize",
        &json!({"messages": [{"role": "assistant", "content": null, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "get_time", "arguments": "{oops"}}]}]}),
    );
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["param"], "messages[0].tool_calls[0].function.arguments");
}

#[test]
fn tool_choice_none_is_plain_text() {
    let t = start_with_tools();
    let (status, body) = t.post(
        "/v1/chat/completions",
        &chat(json!({"tools": tools(), "tool_choice": "none"})),
    );
    assert_eq!(status, 200, "{body}");
    let choice = &body["choices"][0];
    assert!(choice["message"]["content"].is_string(), "{body}");
    assert_eq!(choice["message"].get("tool_calls"), None, "{body}");
    assert_eq!(choice["finish_reason"], "length");
}

#[test]
fn auto_on_a_model_that_does_not_call_is_a_well_formed_answer() {
    let t = start_with_tools();
    let (status, body) = t.post("/v1/chat/completions", &chat(json!({"tools": tools()})));
    assert_eq!(status, 200, "{body}");
    let choice = &body["choices"][0];
    // The random tiny model writes no `<tool_call>`: its text is the content.
    assert!(choice["message"]["content"].is_string(), "{body}");
    assert_eq!(choice["finish_reason"], "length");
    let events = t.stream("/v1/chat/completions", &chat(json!({"tools": tools(), "stream": true})));
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let streamed: String = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str::<Value>(e).expect("chunk"))
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(streamed, choice["message"]["content"].as_str().unwrap_or_default());
}

fn named(name: &str) -> Value {
    json!({"tools": tools(), "tool_choice": {"type": "function", "function": {"name": name}}})
}

/// The call the chunks of a stream add up to: (id, name, arguments), and the finish reason.
fn assembled_call(events: &[String]) -> ((String, String, String), String) {
    let (mut id, mut name, mut arguments, mut finish) = (None, None, String::new(), String::new());
    for event in events.iter().filter(|e| *e != "[DONE]") {
        let chunk: Value = serde_json::from_str(event).expect("chunk");
        let choice = &chunk["choices"][0];
        if let Some(reason) = choice["finish_reason"].as_str() {
            finish = reason.to_owned();
        }
        let calls = choice["delta"]["tool_calls"].as_array().cloned().unwrap_or_default();
        assert!(calls.len() <= 1, "one entry per index per delta: {chunk}");
        for call in calls {
            assert_eq!(call["index"], 0);
            if let Some(i) = call["id"].as_str() {
                assert!(id.is_none(), "one opening delta");
                assert_eq!(call["type"], "function");
                id = Some(i.to_owned());
                name = call["function"]["name"].as_str().map(str::to_owned);
            } else {
                assert!(id.is_some(), "arguments after the opening");
            }
            arguments.push_str(call["function"]["arguments"].as_str().expect("arguments"));
        }
    }
    ((id.expect("id"), name.expect("name"), arguments), finish)
}

#[test]
fn a_named_choice_answers_with_one_call_of_that_function() {
    let t = start_with_tools();
    let (status, body) = t.post("/v1/chat/completions", &chat(named("get_weather")));
    assert_eq!(status, 200, "{body}");
    let message = &body["choices"][0]["message"];
    assert_eq!(message["content"], Value::Null, "{body}");
    let calls = message["tool_calls"].as_array().expect("tool_calls");
    assert_eq!(calls.len(), 1);
    assert!(calls[0]["id"].as_str().expect("id").starts_with("chatcmpl-tool-"));
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    assert!(calls[0]["function"]["arguments"].is_string());
    let mut streamed = named("get_weather");
    streamed["stream"] = json!(true);
    let events = t.stream("/v1/chat/completions", &chat(streamed));
    let ((_, name, arguments), finish) = assembled_call(&events);
    assert_eq!(name, "get_weather");
    // Greedy: the stream writes the same arguments as the whole response.
    assert_eq!(
        arguments,
        calls[0]["function"]["arguments"].as_str().unwrap_or_default()
    );
    assert_eq!(finish, body["choices"][0]["finish_reason"].as_str().unwrap_or_default());
}

#[test]
fn constrained_choices_give_valid_calls_and_count_as_stop() {
    let t = start_with_tools();
    let mut body = chat(named("get_weather"));
    body["max_tokens"] = json!(64);
    let (status, response) = t.post("/v1/chat/completions", &body);
    assert_eq!(status, 200, "{response}");
    let arguments = response["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
        .as_str()
        .expect("arguments");
    let parsed: Value = serde_json::from_str(arguments).expect("arguments are JSON");
    assert!(
        ["c", "f"].contains(&parsed["unit"].as_str().unwrap_or_default()),
        "{parsed}"
    );

    // The stats actor counts a finished request after its response is sent: wait until the
    // first request is counted, whatever its reason, before taking the baseline.
    let stop_before = metric_value(
        &scrape_until(&t, |m| {
            crate::common::metric_sum(m, "vllm:request_success_total", "") >= 1.0
        }),
        "vllm:request_success_total",
        "finished_reason=\"stop\"",
    )
    .unwrap_or(0.0);
    let mut required = chat(json!({"tools": tools(), "tool_choice": "required", "parallel_tool_calls": false}));
    required["max_tokens"] = json!(64);
    let (status, response) = t.post("/v1/chat/completions", &required);
    assert_eq!(status, 200, "{response}");
    let choice = &response["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{response}");
    let calls = choice["message"]["tool_calls"].as_array().expect("tool_calls");
    assert_eq!(calls.len(), 1, "parallel_tool_calls: false");
    let name = calls[0]["function"]["name"].as_str().expect("name");
    assert!(["get_weather", "get_time"].contains(&name), "{name}");
    serde_json::from_str::<Value>(calls[0]["function"]["arguments"].as_str().expect("arguments")).expect("JSON");
    // The engine's metrics count the choice as `stop`, as vLLM's do.
    scrape_until(&t, |m| {
        metric_value(m, "vllm:request_success_total", "finished_reason=\"stop\"") == Some(stop_before + 1.0)
    });

    required["stream"] = json!(true);
    let events = t.stream("/v1/chat/completions", &required);
    let ((_, streamed_name, arguments), finish) = assembled_call(&events);
    assert_eq!(finish, "tool_calls");
    assert_eq!(streamed_name, name);
    assert_eq!(
        arguments,
        calls[0]["function"]["arguments"].as_str().unwrap_or_default()
    );
}

#[test]
#[ignore = "needs the real model and the openai client; .ci/run provides them"]
fn the_openai_client_round_trips_a_tool_call() {
    let server = crate::openai_client::serve_real_model(|c| {
        c.model.chat_template = TOOLS_TEMPLATE.into();
        c.model.enable_auto_tool_choice = true;
        c.model.tool_call_parser = Some(kiln::config::ToolCallParser::Hermes);
    });
    crate::openai_client::run_openai_script("openai_tools_check.py", &server.url("/v1"));
}
