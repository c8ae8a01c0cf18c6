//! The serving features on architectures other than Llama (issue 27, item 7), each test run
//! over the tiny Qwen3 and Gemma 3 fixtures (`tests/data/tiny/<arch>/`: random weights,
//! llama.cpp's q8_0 conversion) through the real server: the model's chat template, tool
//! calls and structured outputs, the prefix cache, both preemption modes, KV events, metrics
//! labelled with the model's name, and the MFU estimate from the architecture's shapes.

use std::path::{Path, PathBuf};
use std::time::Instant;

use kiln::config::{Config, PreemptionMode};
use kiln::testing::{direct_engine, greedy_request, run_to_completion};
use serde_json::{Value, json};

use crate::common::{Tiny, metric_value, scrape_until, start_model};
use crate::kv_events::{Subscriber, assert_same_set, events_config};

const ARCHES: [&str; 2] = ["qwen3", "gemma3"];

fn fixture(arch: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tiny").join(arch)
}

fn gguf(arch: &str) -> PathBuf {
    fixture(arch).join(format!("{arch}-q8_0.gguf"))
}

/// The fixture's q8_0 GGUF served as `tiny-<arch>`.
fn serve(arch: &str, tweak: impl FnOnce(&mut Config)) -> Tiny {
    let dir = tempfile::tempdir().expect("tempdir");
    start_model(dir, gguf(arch), |c| {
        c.server.served_model_name = format!("tiny-{arch}");
        tweak(c)
    })
}

/// Token ids inside the tiny vocabulary (263: three specials, 256 bytes, four merges).
fn tokens(start: u32, len: u32) -> Vec<u32> {
    (start..start + len).map(|t| 3 + t % 250).collect()
}

fn ok(t: &Tiny, path: &str, body: Value) -> Value {
    let (status, response) = t.post(path, &body);
    assert_eq!(status, 200, "{path} {body}: {response}");
    response
}

/// A template only these tests write, put in a copy of the fixture's folder as
/// `tokenizer_config.json`'s `chat_template`: the server must render it, not its own.
const MARKED_TEMPLATE: &str = "{% for m in messages %}[{{ m['role'] }} says] {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}[reply]{% endif %}";

#[test]
fn the_models_own_chat_template_renders_chat_on_every_architecture() {
    for arch in ARCHES {
        let dir = tempfile::tempdir().expect("tempdir");
        let folder = dir.path().join(arch);
        std::fs::create_dir(&folder).expect("mkdir");
        for entry in std::fs::read_dir(fixture(arch).join("hf")).expect("fixture") {
            let path = entry.expect("entry").path();
            std::fs::copy(&path, folder.join(path.file_name().expect("name"))).expect("copy");
        }
        let config_path = folder.join("tokenizer_config.json");
        let mut config: Value =
            serde_json::from_str(&std::fs::read_to_string(&config_path).expect("read")).expect("json");
        config["chat_template"] = json!(MARKED_TEMPLATE);
        std::fs::write(&config_path, config.to_string()).expect("write");
        let t = start_model(dir, folder, |_| {});
        let messages = json!([{"role": "user", "content": "hi there"}]);
        let rendered = ok(&t, "/tokenize", json!({"messages": messages}));
        let detok = ok(&t, "/detokenize", json!({"tokens": rendered["tokens"]}));
        assert_eq!(detok["prompt"], "[user says] hi there\n[reply]", "{arch}");
        let chat = ok(
            &t,
            "/v1/chat/completions",
            json!({"messages": messages, "max_tokens": 3}),
        );
        assert_eq!(chat["usage"]["prompt_tokens"], rendered["count"], "{arch}");
    }
    // The GGUF files carry no template: Gemma 3 gets its own turn format, Qwen3 ChatML.
    for (arch, expected) in [
        (
            "gemma3",
            "<start_of_turn>user\nhi there<end_of_turn>\n<start_of_turn>model\n",
        ),
        ("qwen3", "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n"),
    ] {
        let t = serve(arch, |_| {});
        let rendered = ok(
            &t,
            "/tokenize",
            json!({"messages": [{"role": "user", "content": "hi there"}]}),
        );
        let detok = ok(&t, "/detokenize", json!({"tokens": rendered["tokens"]}));
        let text = detok["prompt"].as_str().expect("prompt");
        assert!(text.ends_with(expected), "{arch}: {text:?}");
    }
}

const TOOLS_TEMPLATE: &str = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}{% if tools %}tools:{% for t in tools %} {{ t['function']['name'] }}{% endfor %}\n{% endif %}";

#[test]
fn tool_calls_and_structured_outputs_hold_their_schemas_on_every_architecture() {
    let weather = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["unit"], "additionalProperties": false}}}]);
    let schema = json!({"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
        "required": ["answer"], "additionalProperties": false});
    for arch in ARCHES {
        let t = serve(arch, |c| {
            c.model.chat_template = TOOLS_TEMPLATE.into();
            c.model.enable_auto_tool_choice = true;
            c.model.tool_call_parser = Some(kiln::config::ToolCallParser::Hermes);
        });
        let (mut calls, mut answers) = (0, 0);
        for seed in 0..4 {
            let body = json!({
                "messages": [{"role": "user", "content": "weather?"}], "max_tokens": 48, "temperature": 1.0,
                "seed": seed, "tools": weather,
                "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            });
            let response = ok(&t, "/v1/chat/completions", body);
            let choice = &response["choices"][0];
            let call = &choice["message"]["tool_calls"][0]["function"];
            assert_eq!(call["name"], "get_weather", "{arch}: {response}");
            if choice["finish_reason"] != "length" {
                let arguments: Value = serde_json::from_str(call["arguments"].as_str().expect("arguments"))
                    .unwrap_or_else(|e| panic!("{arch}: arguments are not JSON ({e}): {response}"));
                assert!(
                    arguments == json!({"unit": "c"}) || arguments == json!({"unit": "f"}),
                    "{arch}: {arguments}"
                );
                calls += 1;
            }
            let body = json!({
                "prompt": "Answer:", "max_tokens": 48, "temperature": 1.0, "seed": seed,
                "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
            });
            let response = ok(&t, "/v1/completions", body);
            let choice = &response["choices"][0];
            if choice["finish_reason"] == "stop" {
                let answer: Value = serde_json::from_str(choice["text"].as_str().expect("text"))
                    .unwrap_or_else(|e| panic!("{arch}: not JSON ({e}): {response}"));
                assert!(
                    answer == json!({"answer": "yes"}) || answer == json!({"answer": "no"}),
                    "{arch}: {answer}"
                );
                answers += 1;
            }
        }
        assert!(
            calls > 0 && answers > 0,
            "{arch}: too few complete outputs ({calls} calls, {answers} answers)"
        );
    }
}

#[test]
fn a_repeated_prompt_hits_the_prefix_cache_with_identical_output_on_every_architecture() {
    for arch in ARCHES {
        let t = serve(arch, |c| {
            c.engine.enable_prefix_caching = true;
            c.engine.block_size = 4;
        });
        let prompt = tokens(7, 40);
        let body = json!({"prompt": prompt, "max_tokens": 8, "temperature": 0, "ignore_eos": true});
        let first = ok(&t, "/v1/completions", body.clone());
        let second = ok(&t, "/v1/completions", body);
        assert_eq!(first["choices"][0]["text"], second["choices"][0]["text"], "{arch}");
        let label = format!("model_name=\"tiny-{arch}\"");
        // The second prompt reuses its 9 full blocks (36 tokens) but recomputes the last.
        scrape_until(&t, |text| {
            metric_value(text, "vllm:prefix_cache_hits_total", &label) == Some(36.0)
        });
    }
}

/// Both preemption modes under a KV budget too small for the batch leave every output as it is
/// alone (greedy), on the engine the server runs (scheduler and executor stepped directly, so
/// the preemptions are certain).
#[test]
fn outputs_under_a_tiny_kv_budget_equal_outputs_alone_in_both_preemption_modes_on_every_architecture() {
    for arch in ARCHES {
        let prompts: Vec<Vec<u32>> = (0..6).map(|i| tokens(11 * i, 10 + i)).collect();
        let run = |tweak: &dyn Fn(&mut Config), together: bool| {
            let (mut scheduler, mut runner) = direct_engine(&gguf(arch), |c| {
                c.engine.block_size = 4;
                tweak(c)
            })
            .expect("engine");
            let mut out = kiln::testing::EngineRun::default();
            for (i, p) in prompts.iter().enumerate() {
                let request = greedy_request(&format!("r{i}"), p.clone(), 24, true);
                scheduler.add(request, Instant::now()).expect("admitted");
                if !together {
                    out.tokens.extend(run_to_completion(&mut scheduler, &mut runner).tokens);
                }
            }
            if together {
                out = run_to_completion(&mut scheduler, &mut runner);
            }
            out
        };
        let alone = run(&|_| {}, false);
        for mode in [PreemptionMode::Recompute, PreemptionMode::Swap] {
            // 24 blocks of 4 tokens: six requests of ~35 tokens need ~54 at once.
            let squeezed = run(
                &|c: &mut Config| {
                    c.engine.num_gpu_blocks_override = 24;
                    c.engine.preemption_mode = mode;
                },
                true,
            );
            assert!(
                squeezed.preemptions > 0,
                "{arch} {mode:?}: the budget should force preemption"
            );
            if mode == PreemptionMode::Swap {
                assert!(squeezed.max_swapped > 0, "{arch}: swap mode should swap");
            }
            assert_eq!(squeezed.tokens, alone.tokens, "{arch} {mode:?}");
        }
    }
}

#[test]
#[ignore = "needs a Python with pyzmq and msgpack (KILN_TEST_PYTHON); .ci/run provides it"]
fn a_kv_event_subscriber_rebuilds_the_prefix_cache_on_every_architecture() {
    for arch in ARCHES {
        let (mut subscriber, pub_endpoint, replay_endpoint) = Subscriber::bound();
        let t = serve(arch, |c| {
            c.engine.enable_prefix_caching = true;
            c.engine.block_size = 4;
            c.engine.num_gpu_blocks_override = 40; // 160 tokens: the long prompts evict
            c.engine.max_model_len = 128;
            c.kv_events = events_config(&pub_endpoint, &replay_endpoint);
            c.engine.prefix_caching_hash_algo = kiln::config::PrefixCachingHashAlgo::Kiln;
        });
        let shared = tokens(0, 20);
        for i in 0..3 {
            let mut prompt = shared.clone();
            prompt.extend(tokens(100 + 10 * i, 5 + i));
            ok(
                &t,
                "/v1/completions",
                json!({"prompt": prompt, "max_tokens": 6, "ignore_eos": true}),
            );
        }
        for i in 0..4 {
            ok(
                &t,
                "/v1/completions",
                json!({"prompt": tokens(300 + 50 * i, 80), "max_tokens": 4, "ignore_eos": true}),
            );
        }
        let (state, kiln) = subscriber.sync_with(&t);
        assert_same_set(&state, &kiln);
        assert!(state["counts"]["BlockStored"].as_u64() > Some(0), "{arch}: {state}");
        assert!(state["counts"]["BlockRemoved"].as_u64() > Some(0), "{arch}: {state}");
    }
}

#[test]
fn every_vllm_metric_carries_the_served_model_name_on_every_architecture() {
    for arch in ARCHES {
        let t = serve(arch, |_| {});
        ok(&t, "/v1/completions", json!({"prompt": tokens(0, 12), "max_tokens": 4}));
        let label = format!("model_name=\"tiny-{arch}\"");
        let text = scrape_until(&t, |text| {
            let finished = format!("finished_reason=\"length\",{label}");
            metric_value(text, "vllm:request_success_total", &finished).is_some_and(|v| v >= 1.0)
        });
        // Engine health is per engine, with the engine label alone (as vLLM's).
        let samples: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("vllm:") && !l.starts_with("vllm:engine_healthy"))
            .collect();
        assert!(samples.len() > 20, "{arch}: {} vllm samples", samples.len());
        for sample in samples {
            assert!(sample.contains(&label), "{arch}: {sample}");
        }
    }
}

/// Model FLOPs of one greedy request, from the shapes in the fixture's `config.json`, written
/// out independently of kiln's estimator: each processed token runs Q, K, V, O and the gated
/// MLP of every layer, and attends (QKᵀ and AV) to the positions its layer sees (a windowed
/// layer at most its window, itself included); each sampled token runs the (tied) head.
fn expected_flops(arch: &str, prompt: usize, generated: usize) -> f64 {
    let text = std::fs::read_to_string(fixture(arch).join("hf/config.json")).expect("config.json");
    let c: Value = serde_json::from_str(&text).expect("json");
    let n = |k: &str| c[k].as_u64().unwrap_or_else(|| panic!("{arch}: {k}")) as f64;
    let (h, inter, heads, kv_heads, head_dim, vocab) = (
        n("hidden_size"),
        n("intermediate_size"),
        n("num_attention_heads"),
        n("num_key_value_heads"),
        n("head_dim"),
        n("vocab_size"),
    );
    let q = heads * head_dim;
    let linear = 2.0 * (h * q + 2.0 * h * kv_heads * head_dim + q * h + 3.0 * h * inter);
    let windows: Vec<Option<f64>> = (0..n("num_hidden_layers") as usize)
        .map(|i| {
            let windowed = c["layer_types"][i] == "sliding_attention";
            windowed.then(|| n("sliding_window"))
        })
        .collect();
    // The prompt and every generated token but the last pass through the model.
    let positions = prompt + generated - 1;
    let mut flops = 2.0 * h * vocab * generated as f64;
    for position in 0..positions {
        for window in &windows {
            let seen = window.map_or(position as f64 + 1.0, |w| (position as f64 + 1.0).min(w));
            flops += linear + 4.0 * q * seen;
        }
    }
    flops
}

#[test]
fn the_mfu_estimate_counts_each_architectures_real_shapes() {
    for arch in ARCHES {
        let t = serve(arch, |c| {
            c.telemetry.enable_mfu_metrics = true;
            c.engine.enable_prefix_caching = false;
        });
        // Longer than Gemma's 4-token window, so its windowed layers see less than the rest.
        let (prompt, generated) = (30, 6);
        let body = json!({"prompt": tokens(5, prompt as u32), "max_tokens": generated, "ignore_eos": true});
        let response = ok(&t, "/v1/completions", body);
        assert_eq!(response["usage"]["completion_tokens"], generated, "{arch}");
        let expected = expected_flops(arch, prompt, generated);
        let label = format!("model_name=\"tiny-{arch}\"");
        scrape_until(&t, |text| {
            metric_value(text, "vllm:estimated_flops_per_gpu_total", &label)
                .is_some_and(|v| (v - expected).abs() <= 1e-9 * expected)
        });
    }
}
