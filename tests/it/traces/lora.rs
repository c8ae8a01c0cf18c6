//! A request through a LoRA adapter names it on its SERVER span (`kiln.lora.name`); one to
//! the base model carries no such attribute.

use serde_json::json;

use super::{Rotel, spans_of};
use crate::common::process::KilnProcess;

fn completion(kiln: &KilnProcess, model: &str, trace_id: &str) {
    let resp = kiln
        .client
        .post(kiln.url("/v1/completions"))
        .header("traceparent", format!("00-{trace_id}-b7ad6b7169203331-01"))
        .json(&json!({"model": model, "prompt": [1, 2, 3], "max_tokens": 2}))
        .send()
        .expect("completion");
    assert_eq!(resp.status().as_u16(), 200, "{model}");
}

#[test]
#[ignore = "needs rotel (KILN_TEST_ROTEL)"]
fn the_server_span_names_the_adapter_a_request_went_through() {
    let dir = tempfile::tempdir().unwrap();
    let rotel = Rotel::start(dir.path(), false);
    let endpoint = format!("http://127.0.0.1:{}/v1/traces", rotel.port);
    let kiln = crate::lora::launch_with_tiny_adapter()
        .arg("--otlp-traces-endpoint", &endpoint)
        .start();
    let base = crate::lora::served_base(&kiln);
    let (through_adapter, through_base) = ("5".repeat(32), "6".repeat(32));
    completion(&kiln, "all", &through_adapter);
    completion(&kiln, &base, &through_base);
    let adapted = spans_of(&rotel, &through_adapter, 1);
    assert_eq!(adapted[0].attr("kiln.lora.name"), "Str(all)");
    assert_eq!(adapted[0].attr("gen_ai.request.model"), "Str(all)");
    let plain = spans_of(&rotel, &through_base, 1);
    assert!(!plain[0].attributes.contains_key("kiln.lora.name"), "{:?}", plain[0]);
}
