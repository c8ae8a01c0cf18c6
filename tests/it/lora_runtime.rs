//! Run-time LoRA adapters on the real server (`--allow-runtime-lora-updating`): vLLM's
//! `POST /v1/load_lora_adapter` and `/v1/unload_lora_adapter`, their answers and refusals,
//! and the server serving on unharmed after each refusal.

use std::path::PathBuf;

use kiln::config::Config;
use serde_json::{Value, json};

use crate::arch_parity::{fixture, read_reference};
use crate::common::{Tiny, start_model};

/// The tiny llama's adapter `name`.
fn adapter_dir(name: &str) -> PathBuf {
    crate::lora::adapter_dir("llama", name)
}

pub(crate) fn runtime_lora(max_cpu_loras: usize, max_lora_rank: usize) -> impl FnOnce(&mut Config) {
    move |c: &mut Config| {
        c.engine.kv_cache_memory = "8MiB".into();
        c.lora.enable_lora = true;
        c.lora.allow_runtime_lora_updating = true;
        c.lora.max_loras = 2;
        c.lora.max_cpu_loras = max_cpu_loras;
        c.lora.max_lora_rank = max_lora_rank;
    }
}

/// Posts `body` and returns the status and the body as text (success is plain text).
pub(crate) fn post_text(t: &Tiny, path: &str, body: &Value) -> (u16, String) {
    let resp = t.client.post(t.server.url(path)).json(body).send().expect("request");
    (resp.status().as_u16(), resp.text().expect("body"))
}

pub(crate) fn load(t: &Tiny, name: &str, path: &str) -> (u16, String) {
    post_text(
        t,
        "/v1/load_lora_adapter",
        &json!({"lora_name": name, "lora_path": path}),
    )
}

pub(crate) fn model_ids(t: &Tiny) -> Vec<String> {
    let (status, text) = t.get_text("/v1/models");
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&text).expect("json");
    models["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|m| m["id"].as_str().expect("id").to_string())
        .collect()
}

/// The greedy completion of the first reference prompt under `model`.
pub(crate) fn complete(t: &Tiny, model: &str) -> (u16, Value) {
    let prompt = &read_reference(&fixture("llama"))["f32"][0]["prompt_ids"];
    t.post(
        "/v1/completions",
        &json!({"model": model, "prompt": prompt, "max_tokens": 6, "temperature": 0, "ignore_eos": true}),
    )
}

pub(crate) fn error_message(text: &str) -> String {
    let body: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    body["error"]["message"].as_str().expect("message").to_string()
}

#[test]
fn adapters_load_serve_and_unload_at_run_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let corrupt = dir.path().join("corrupt");
    std::fs::create_dir(&corrupt).expect("mkdir");
    std::fs::copy(
        adapter_dir("all").join("adapter_config.json"),
        corrupt.join("adapter_config.json"),
    )
    .expect("copy config");
    std::fs::write(
        corrupt.join("adapter_model.safetensors"),
        b"\x10\0\0\0\0\0\0\0not a header",
    )
    .expect("write");
    let no_weights = dir.path().join("no_weights");
    std::fs::create_dir(&no_weights).expect("mkdir");
    std::fs::copy(
        adapter_dir("all").join("adapter_config.json"),
        no_weights.join("adapter_config.json"),
    )
    .expect("copy config");
    // At most two adapters in memory; rank 4 at most (the fixtures: all 4, mlp 8, rs 2).
    let t = start_model(
        tempfile::tempdir().expect("tempdir"),
        fixture("llama").join("hf"),
        runtime_lora(2, 4),
    );
    let base = model_ids(&t)[0].clone();
    let (_, base_out) = complete(&t, &base);

    let path = |name: &str| adapter_dir(name).display().to_string();
    let (status, text) = load(&t, "all", &path("all"));
    assert_eq!(
        (status, text.as_str()),
        (200, "Success: LoRA adapter 'all' added successfully.")
    );
    assert_eq!(model_ids(&t), [base.clone(), "all".to_string()]);
    let (status, adapted) = complete(&t, "all");
    assert_eq!(status, 200, "{adapted}");
    assert_eq!(adapted["model"], "all");
    assert_ne!(
        adapted["choices"][0]["text"], base_out["choices"][0]["text"],
        "the adapter changes the tokens"
    );

    // Refusals, each with vLLM's status, none of which harms the server.
    let refusals = [
        (json!({"lora_name": "x"}), 400, "must be provided"),
        (
            json!({"lora_name": "all", "lora_path": path("mlp")}),
            400,
            "has already been loaded",
        ),
        (
            json!({"lora_name": "big", "lora_path": path("mlp")}),
            400,
            "--max-lora-rank 4",
        ),
        (
            json!({"lora_name": "gone", "lora_path": "/no/such/adapter"}),
            404,
            "No adapter found",
        ),
        (
            json!({"lora_name": "corrupt", "lora_path": corrupt.display().to_string()}),
            400,
            "adapter_model.safetensors",
        ),
        (
            json!({"lora_name": "bare", "lora_path": no_weights.display().to_string()}),
            400,
            "No such file",
        ),
    ];
    for (body, want, says) in refusals {
        let (status, text) = post_text(&t, "/v1/load_lora_adapter", &body);
        assert_eq!(status, want, "{body}: {text}");
        let message = error_message(&text);
        assert!(message.contains(says), "{body}: {message}");
    }
    assert_eq!(model_ids(&t), [base.clone(), "all".to_string()], "nothing half-loaded");

    let (status, _) = load(&t, "rs", &path("rs"));
    assert_eq!(status, 200);
    let (status, text) = load(&t, "third", &path("rs"));
    assert_eq!(status, 400, "beyond --max-cpu-loras: {text}");
    assert!(error_message(&text).contains("--max-cpu-loras"), "{text}");

    let (status, text) = post_text(&t, "/v1/unload_lora_adapter", &json!({"lora_name": "nope"}));
    assert_eq!(status, 404, "{text}");
    assert!(error_message(&text).contains("cannot be found"), "{text}");
    let (status, text) = post_text(&t, "/v1/unload_lora_adapter", &json!({}));
    assert_eq!(status, 400, "{text}");
    // vLLM's other spelling: the adapter's id (all was the first loaded: id 1).
    let (status, text) = post_text(&t, "/v1/unload_lora_adapter", &json!({"lora_int_id": 1}));
    assert_eq!(
        (status, text.as_str()),
        (200, "Success: LoRA adapter 'all' removed successfully.")
    );
    let (status, text) = post_text(&t, "/v1/unload_lora_adapter", &json!({"lora_name": "rs"}));
    assert_eq!(
        (status, text.as_str()),
        (200, "Success: LoRA adapter 'rs' removed successfully.")
    );
    assert_eq!(model_ids(&t), std::slice::from_ref(&base));
    let (status, err) = complete(&t, "all");
    assert_eq!(status, 404, "{err}");
    assert_eq!(err["error"]["code"], "model_not_found");

    // Loaded again under the same name: a fresh id, the same tokens as before.
    let (status, _) = load(&t, "all", &path("all"));
    assert_eq!(status, 200);
    let (status, again) = complete(&t, "all");
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["choices"][0]["text"], adapted["choices"][0]["text"]);
    let (status, after) = complete(&t, &base);
    assert_eq!(status, 200);
    assert_eq!(
        after["choices"][0]["text"], base_out["choices"][0]["text"],
        "the base is unharmed"
    );
}

#[test]
fn the_endpoints_are_off_without_the_flag() {
    let t = start_model(
        tempfile::tempdir().expect("tempdir"),
        fixture("llama").join("hf"),
        |c: &mut Config| {
            c.engine.kv_cache_memory = "8MiB".into();
            c.lora.enable_lora = true;
        },
    );
    let path = adapter_dir("all").display().to_string();
    let (status, text) = load(&t, "all", &path);
    assert_eq!(status, 404, "{text}");
    let (status, text) = post_text(&t, "/v1/unload_lora_adapter", &json!({"lora_name": "all"}));
    assert_eq!(status, 404, "{text}");
}

/// What the gateway's parser makes of one scrape of `t`'s /metrics
/// (tests/python/lora_info_reader.py, prometheus_client's text parser as the picker's).
fn picker_lora_read(t: &Tiny) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/lora_info_reader.py");
    let out = std::process::Command::new(crate::common::tool("KILN_TEST_PYTHON"))
        .args([script, &t.server.url("/metrics")])
        .output()
        .expect("run lora_info_reader.py");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("a JSON line")
}

/// `vllm:lora_requests_info` as the gateway's endpoint picker reads it: after a request under
/// a start-up adapter and then one under an adapter loaded at run time, the latest series
/// names the second as running, with `max_lora` from `--max-loras`.
#[test]
#[ignore = "needs KILN_TEST_PYTHON with prometheus-client (.ci/run)"]
fn the_gateway_reads_lora_requests_info() {
    let t = start_model(
        tempfile::tempdir().expect("tempdir"),
        fixture("llama").join("hf"),
        |c: &mut Config| {
            runtime_lora(2, 16)(c);
            c.lora.lora_modules = vec![kiln::config::LoraModule {
                name: "all".into(),
                path: adapter_dir("all").display().to_string(),
                base_model_name: None,
            }];
        },
    );
    let (status, out) = complete(&t, "all");
    assert_eq!(status, 200, "{out}");
    let read = crate::common::wait::wait_for("the picker to see adapter all", || {
        let read = picker_lora_read(&t);
        if read["running"] == json!(["all"]) {
            Ok(read)
        } else {
            Err(read)
        }
    });
    assert_eq!(read["max_lora"], 2, "{read}");
    let (status, _) = load(&t, "mlp", &adapter_dir("mlp").display().to_string());
    assert_eq!(status, 200);
    let (status, out) = complete(&t, "mlp");
    assert_eq!(status, 200, "{out}");
    let later = crate::common::wait::wait_for("the picker to see adapter mlp", || {
        let read = picker_lora_read(&t);
        if read["running"] == json!(["mlp"]) {
            Ok(read)
        } else {
            Err(read)
        }
    });
    assert_eq!(later["max_lora"], 2, "{later}");
    assert_eq!(later["waiting"], json!([]), "{later}");
    assert!(
        later["updated"].as_f64() > read["updated"].as_f64(),
        "the value is the update time: {read} then {later}"
    );
}
