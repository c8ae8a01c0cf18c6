//! The access log of the real `kiln` binary: one line per finished request that joins logs,
//! traces and metrics on ids, in text or JSON; probes are left out unless asked.

use serde_json::{Value, json};

use crate::common::process::{KilnProcess, Launch};
use crate::common::wait::wait_for;

const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";

fn traced_chat(kiln: &KilnProcess) -> Value {
    let resp = kiln
        .client
        .post(kiln.url("/v1/chat/completions"))
        .header("traceparent", format!("00-{TRACE_ID}-b7ad6b7169203331-01"))
        .header("x-request-id", "access-42")
        .json(&json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}))
        .send()
        .expect("request");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers()["x-request-id"], "access-42");
    resp.json().expect("json")
}

fn probe(kiln: &KilnProcess) {
    for path in ["/health", "/metrics"] {
        let resp = kiln.client.get(kiln.url(path)).send().expect("probe");
        assert_eq!(resp.status().as_u16(), 200, "{path}");
        resp.text().expect("the whole body");
    }
}

/// The access lines logged so far (JSON format).
fn json_access_lines(kiln: &KilnProcess) -> Vec<Value> {
    kiln.logs()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .filter(|v| v["target"] == "kiln::access")
        .collect()
}

#[test]
fn json_access_lines_join_on_request_and_trace_ids_and_leave_probes_out() {
    let kiln = Launch::default().arg("--log-format", "json").start();
    let response = traced_chat(&kiln);
    probe(&kiln);
    // The line is written when the response is done; a later request's line follows it.
    let _ = kiln.client.get(kiln.url("/v1/models")).send().expect("models");
    let lines = wait_for("two access lines", || {
        let lines = json_access_lines(&kiln);
        if lines.len() >= 2 {
            Ok(lines)
        } else {
            Err(format!("{lines:?}"))
        }
    });
    let chat: Vec<&Value> = lines.iter().filter(|l| l["route"] == "/v1/chat/completions").collect();
    assert_eq!(chat.len(), 1, "one line per request: {lines:?}");
    let line = chat[0];
    assert_eq!(line["request_id"], "access-42");
    assert_eq!(line["trace_id"], TRACE_ID);
    assert_eq!(line["method"], "POST");
    assert_eq!(line["status"], 200);
    assert_eq!(line["model"], response["model"]);
    assert_eq!(line["prompt_tokens"], response["usage"]["prompt_tokens"]);
    assert_eq!(line["completion_tokens"], response["usage"]["completion_tokens"]);
    assert_eq!(line["finish_reason"], response["choices"][0]["finish_reason"]);
    let (queue, ttft, e2e) = (
        line["queue_s"].as_f64(),
        line["ttft_s"].as_f64(),
        line["e2e_s"].as_f64(),
    );
    let (queue, ttft, e2e) = (queue.expect("queue_s"), ttft.expect("ttft_s"), e2e.expect("e2e_s"));
    assert!(0.0 <= queue && queue <= ttft && ttft <= e2e, "{line}");
    assert!(
        lines
            .iter()
            .all(|l| l["route"] != "/health" && l["route"] != "/metrics"),
        "no probe lines by default: {lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["route"] == "/v1/models" && l["request_id"].is_string())
    );
}

#[test]
fn text_access_lines_carry_the_ids_and_probes_are_logged_when_asked() {
    let mut launch = Launch::default();
    launch.args.push("--access-log-probes".into());
    let kiln = launch.start();
    traced_chat(&kiln);
    // A stream's line comes when its last chunk is sent, with the engine's figures.
    let streamed = kiln
        .client
        .post(kiln.url("/v1/completions"))
        .header("x-request-id", "stream-7")
        .json(&json!({"prompt": "hi", "max_tokens": 3, "stream": true}))
        .send()
        .expect("stream");
    assert_eq!(streamed.headers()["x-request-id"], "stream-7");
    assert!(streamed.text().expect("whole stream").contains("[DONE]"));
    probe(&kiln);
    let _ = kiln.client.get(kiln.url("/v1/models")).send().expect("models");
    // A stream's line is written once its body is done on the server, which may come after the
    // client read [DONE] and after later requests' lines: wait for both.
    let logs = wait_for("the /v1/models and the stream's access lines", || {
        let logs = kiln.logs();
        if logs.contains("route=\"/v1/models\"") && logs.contains("request_id=\"stream-7\"") {
            Ok(logs)
        } else {
            Err(logs)
        }
    });
    let access: Vec<&str> = logs.lines().filter(|l| l.contains("kiln::access")).collect();
    let chat: Vec<&&str> = access
        .iter()
        .filter(|l| l.contains("route=\"/v1/chat/completions\""))
        .collect();
    assert_eq!(chat.len(), 1, "{access:?}");
    for field in [
        "request_id=\"access-42\"",
        &format!("trace_id=\"{TRACE_ID}\""),
        "status=200",
        "finish_reason=",
        "ttft_s=",
        "e2e_s=",
    ] {
        assert!(chat[0].contains(field), "{field} missing: {}", chat[0]);
    }
    for probe in ["/health", "/metrics"] {
        assert!(
            access.iter().any(|l| l.contains(&format!("route=\"{probe}\""))),
            "{probe} logged when asked: {access:?}"
        );
    }
    let stream: Vec<&&str> = access
        .iter()
        .filter(|l| l.contains("request_id=\"stream-7\""))
        .collect();
    assert_eq!(stream.len(), 1, "{access:?}");
    for field in [
        "route=\"/v1/completions\"",
        "completion_tokens=",
        "finish_reason=",
        "e2e_s=",
    ] {
        assert!(stream[0].contains(field), "{field} missing: {}", stream[0]);
    }
}

/// A request through a LoRA adapter names it (`lora_name`); one to the base model does not.
#[test]
fn a_request_through_an_adapter_names_it_in_its_access_line() {
    let kiln = crate::lora::launch_with_tiny_adapter()
        .arg("--log-format", "json")
        .start();
    let base = crate::lora::served_base(&kiln);
    for (model, id) in [("all", "through-adapter"), (base.as_str(), "through-base")] {
        let resp = kiln
            .client
            .post(kiln.url("/v1/completions"))
            .header("x-request-id", id)
            .json(&json!({"model": model, "prompt": [1, 2, 3], "max_tokens": 2}))
            .send()
            .expect("completion");
        assert_eq!(resp.status().as_u16(), 200, "{model}");
    }
    let lines = wait_for("both completions' access lines", || {
        let lines: Vec<Value> = json_access_lines(&kiln)
            .into_iter()
            .filter(|l| l["route"] == "/v1/completions")
            .collect();
        if lines.len() == 2 {
            Ok(lines)
        } else {
            Err(format!("{lines:?}"))
        }
    });
    let line = |id: &str| lines.iter().find(|l| l["request_id"] == id).expect(id).clone();
    let adapted = line("through-adapter");
    assert_eq!(
        (&adapted["model"], &adapted["lora_name"]),
        (&json!("all"), &json!("all")),
        "{adapted}"
    );
    let plain = line("through-base");
    assert_eq!(plain["model"], json!(base), "{plain}");
    assert!(plain.get("lora_name").is_none(), "no adapter, no field: {plain}");
}
