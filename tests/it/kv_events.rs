//! KV-cache events (`--kv-events-config`) end to end: a Python subscriber (pyzmq + msgpack)
//! decodes kiln's ZeroMQ stream as llm-d's vLLM adapter does, checks every block hash against
//! kiln's documented hash of its parent and tokens (these tests choose kiln's scheme; the
//! default with events, vLLM's `sha256_cbor`, is checked by `vllm_block_hashes`), fills gaps
//! from the replay socket, and rebuilds the set of cached blocks, which must equal the prefix cache's own after a mixed
//! workload that stores, hits, evicts and (after an executor restart) clears blocks.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use kiln::config::{KvEventsConfig, PrefixCachingHashAlgo};
use kiln::engine::step::StepStage;
use kiln::executor::fake::FakeBehaviour;
use kiln::scheduler::actor::{GetKvEventsSnapshot, KvEventsSnapshot};
use serde_json::{Value, json};

use crate::common::process::free_port;
use crate::common::{Tiny, metric_value, start_fake, start_tiny};

pub(crate) const TOPIC: &str = "kv@kiln-test-pod@tiny-llama";

/// The subscriber process; killed when dropped.
pub(crate) struct Subscriber {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Subscriber {
    /// Starts the subscriber; `mode` is how its SUB socket reaches kiln's PUB ("bind": kiln
    /// connects to it, as llm-d deploys; "connect": kiln binds).
    pub(crate) fn start(mode: &str, pub_endpoint: &str, replay_endpoint: &str) -> Self {
        Self::start_checking(mode, pub_endpoint, replay_endpoint, "kiln", None)
    }

    /// [`Subscriber::start`] checking every stored hash against `scheme` ("kiln", or vLLM's
    /// "sha256_cbor" / "sha256_cbor_64bit" with `PYTHONHASHSEED` = `seed`).
    pub(crate) fn start_checking(
        mode: &str,
        pub_endpoint: &str,
        replay_endpoint: &str,
        scheme: &str,
        seed: Option<&str>,
    ) -> Self {
        let python = std::env::var("KILN_TEST_PYTHON").expect("set KILN_TEST_PYTHON (a Python with pyzmq and msgpack)");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/kv_events_subscriber.py");
        let mut command = Command::new(python);
        command.env_remove("PYTHONHASHSEED");
        if let Some(seed) = seed {
            command.env("PYTHONHASHSEED", seed);
        }
        let mut child = command
            .args([script, mode, pub_endpoint, replay_endpoint, TOPIC, scheme])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the subscriber");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut subscriber = Self { child, stdin, stdout };
        assert_eq!(subscriber.read_line(), "ready", "the subscriber failed to start");
        subscriber
    }

    /// A subscriber that binds fresh loopback endpoints, as llm-d's indexer does (every
    /// replica's PUB connects to it), with the endpoints for kiln's `--kv-events-config`.
    pub(crate) fn bound() -> (Self, String, String) {
        let pub_endpoint = format!("tcp://127.0.0.1:{}", free_port());
        let replay_endpoint = format!("tcp://127.0.0.1:{}", free_port());
        let subscriber = Self::start("bind", &pub_endpoint, &replay_endpoint);
        (subscriber, pub_endpoint, replay_endpoint)
    }

    fn read_line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read the subscriber");
        line.trim().to_string()
    }

    pub(crate) fn command(&mut self, command: &str) -> Value {
        writeln!(self.stdin, "{command}").expect("write to the subscriber");
        let line = self.read_line();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("subscriber answered {line:?}: {e}"))
    }

    /// The subscriber's state once it has applied every batch kiln queued so far, beside
    /// kiln's own cached set at that point.
    pub(crate) fn sync_with(&mut self, t: &Tiny) -> (Value, KvEventsSnapshot) {
        let snapshot = snapshot(t);
        assert_eq!(snapshot.batches_dropped, 0, "no batch may be dropped in this test");
        let state = self.command(&format!("sync {}", snapshot.batches_queued));
        assert_eq!(state["errors"], json!([]), "the subscriber refused what kiln sent");
        (state, snapshot)
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn snapshot(t: &Tiny) -> KvEventsSnapshot {
    actix_web::rt::System::new()
        .block_on(t.server.scheduler.send(GetKvEventsSnapshot))
        .expect("the scheduler answers")
}

/// Asserts that some batches reached the subscriber live over PUB/SUB, not all through the
/// replay socket (which fills only what the subscription missed).
fn assert_some_arrived_live(state: &Value) {
    let replayed = state["counts"]["replayed"].as_u64().expect("replayed");
    let applied = state["next_seq"].as_u64().expect("next_seq");
    assert!(
        replayed < applied,
        "every batch came through the replay socket: {state}"
    );
}

/// Asserts the subscriber's rebuilt set is exactly kiln's prefix cache.
pub(crate) fn assert_same_set(state: &Value, snapshot: &KvEventsSnapshot) {
    let mut kiln: Vec<u64> = snapshot.cached_block_hashes.clone();
    kiln.sort_unstable();
    let rebuilt: Vec<u64> = state["hashes"]
        .as_array()
        .expect("hashes")
        .iter()
        .map(|h| h.as_u64().expect("a u64 hash"))
        .collect();
    assert_eq!(rebuilt, kiln, "the subscriber's cached set differs from kiln's");
}

pub(crate) fn events_config(endpoint: &str, replay_endpoint: &str) -> KvEventsConfig {
    KvEventsConfig::from_json(
        &json!({
            "enable_kv_cache_events": true,
            "publisher": "zmq",
            "endpoint": endpoint,
            "replay_endpoint": replay_endpoint,
            "topic": TOPIC,
        })
        .to_string(),
    )
    .expect("vLLM's JSON parses")
}

fn complete(t: &Tiny, prompt: &[u32], max_tokens: u32) {
    let body = json!({"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": true});
    let (status, body) = t.post("/v1/completions", &body);
    assert_eq!(status, 200, "{body}");
}

/// Prompts of tokens `start..start + len` (all inside the tiny vocabulary).
fn tokens(start: u32, len: u32) -> Vec<u32> {
    (start..start + len).map(|t| 3 + t % 250).collect()
}

#[test]
#[ignore = "needs a Python with pyzmq and msgpack (KILN_TEST_PYTHON); .ci/run provides it"]
fn a_subscriber_decoding_like_llm_d_rebuilds_the_prefix_cache_after_a_mixed_workload() {
    let (mut subscriber, pub_endpoint, replay_endpoint) = Subscriber::bound();
    let t = start_tiny(|c| {
        c.engine.enable_prefix_caching = true;
        c.engine.block_size = 4;
        c.engine.num_gpu_blocks_override = 48; // 192 tokens: long prompts evict
        c.engine.max_model_len = 128;
        c.kv_events = events_config(&pub_endpoint, &replay_endpoint);
        c.engine.prefix_caching_hash_algo = PrefixCachingHashAlgo::Kiln;
    });

    // Shared prefixes: hits, and stores of the differing tails and the generated tokens.
    let system = tokens(0, 24);
    for i in 0..4 {
        let mut prompt = system.clone();
        prompt.extend(tokens(100 + 10 * i, 5 + i));
        complete(&t, &prompt, 6);
        complete(&t, &prompt, 3);
    }
    // Concurrent requests, streamed and not, some sharing the prefix.
    std::thread::scope(|s| {
        for i in 0..4u32 {
            let t = &t;
            let mut prompt = if i % 2 == 0 { system.clone() } else { Vec::new() };
            prompt.extend(tokens(40 + 7 * i, 9 + i));
            s.spawn(move || {
                if i < 2 {
                    let body = json!({"prompt": prompt, "max_tokens": 10, "ignore_eos": true, "stream": true});
                    assert_eq!(
                        t.stream("/v1/completions", &body).last().map(String::as_str),
                        Some("[DONE]")
                    );
                } else {
                    complete(t, &prompt, 10);
                }
            });
        }
    });
    let (state, kiln) = subscriber.sync_with(&t);
    assert_same_set(&state, &kiln);
    assert!(!kiln.cached_block_hashes.is_empty(), "the workload cached blocks");

    // Long distinct prompts overflow the 48 blocks: evictions.
    for i in 0..5 {
        complete(&t, &tokens(500 + 97 * i, 90), 8);
    }
    complete(&t, &system, 4);
    let (state, kiln) = subscriber.sync_with(&t);
    assert_same_set(&state, &kiln);
    assert!(
        state["counts"]["BlockRemoved"].as_u64() > Some(0),
        "evictions were published: {state}"
    );
    assert!(state["counts"]["BlockStored"].as_u64() > Some(0), "{state}");
    assert_some_arrived_live(&state);

    // The replay socket holds every batch, byte for byte as published.
    let replay = subscriber.command("replay");
    assert_eq!(replay["replayed"], json!(kiln.batches_queued), "{replay}");
    assert_eq!(replay["same"], replay["seen"], "{replay}");
}

/// A prompt token that makes the fake executor panic.
const POISON: u32 = 200;

#[test]
#[ignore = "needs a Python with pyzmq and msgpack (KILN_TEST_PYTHON); .ci/run provides it"]
fn an_executor_restart_publishes_all_blocks_cleared_and_kiln_binds_where_vllm_would() {
    let pub_port = free_port();
    let replay_port = free_port();
    // A `*` endpoint binds (vLLM's rule); the subscriber connects to it over loopback.
    let t = start_fake(
        FakeBehaviour {
            panic_on_token: Some(POISON),
            panic_stage: StepStage::Execute,
            ..Default::default()
        },
        |c| {
            c.engine.enable_prefix_caching = true;
            c.engine.block_size = 4;
            c.kv_events = events_config(
                &format!("tcp://*:{pub_port}"),
                &format!("tcp://127.0.0.1:{replay_port}"),
            );
            c.engine.prefix_caching_hash_algo = PrefixCachingHashAlgo::Kiln;
        },
    );
    let mut subscriber = Subscriber::start(
        "connect",
        &format!("tcp://127.0.0.1:{pub_port}"),
        &format!("tcp://127.0.0.1:{replay_port}"),
    );
    let prompt = tokens(0, 20);
    complete(&t, &prompt, 4);
    let (state, kiln) = subscriber.sync_with(&t);
    assert_same_set(&state, &kiln);
    assert!(!kiln.cached_block_hashes.is_empty());

    let (status, _) = t.post("/v1/completions", &json!({"prompt": [1, POISON, 3], "max_tokens": 3}));
    assert_eq!(status, 500);
    complete(&t, &tokens(50, 12), 4);
    let (state, kiln) = subscriber.sync_with(&t);
    assert_eq!(state["counts"]["AllBlocksCleared"], json!(1), "{state}");
    assert_some_arrived_live(&state);
    assert_same_set(&state, &kiln);
    assert!(
        !kiln.cached_block_hashes.is_empty(),
        "the cache filled again after the restart"
    );
}

#[test]
#[ignore = "needs a Python with pyzmq and msgpack (KILN_TEST_PYTHON); .ci/run provides it"]
fn swap_pressure_shows_the_host_tier_in_events_and_counts_its_traffic() {
    let (mut subscriber, pub_endpoint, replay_endpoint) = Subscriber::bound();
    let t = start_tiny(|c| {
        c.engine.enable_prefix_caching = true;
        c.engine.block_size = 4;
        // 16 blocks (64 tokens) for six requests of up to 44 tokens each: preemption.
        c.engine.num_gpu_blocks_override = 16;
        c.engine.preemption_mode = kiln::config::PreemptionMode::Swap;
        c.kv_events = events_config(&pub_endpoint, &replay_endpoint);
        c.engine.prefix_caching_hash_algo = PrefixCachingHashAlgo::Kiln;
    });
    std::thread::scope(|s| {
        for i in 0..6u32 {
            let t = &t;
            s.spawn(move || complete(t, &tokens(1000 + 37 * i, 12 + i), 32));
        }
    });
    let (state, kiln) = subscriber.sync_with(&t);
    assert_same_set(&state, &kiln);
    let text = t.get_text("/metrics").1;
    let metric = |name: &str, fragment: &str| metric_value(&text, name, fragment).unwrap_or_else(|| panic!("{name}"));
    assert!(
        metric("vllm:num_preemptions_total", "") > 0.0,
        "the budget forces preemption"
    );
    let out = metric("vllm:kv_offload_total_bytes_total", "GPU_to_CPU");
    let back = metric("vllm:kv_offload_total_bytes_total", "CPU_to_GPU");
    assert!(out > 0.0, "swapping moved blocks to the host pool:\n{text}");
    assert_eq!(out, back, "every swapped request came back before it finished");
    assert!(metric("vllm:kv_offload_total_time_total", "GPU_to_CPU") > 0.0);
    // The host tier appeared in the events and is empty again: every block announced in
    // CPU was withdrawn when its request came back.
    assert!(state["counts"]["BlockStored:CPU"].as_u64() > Some(0), "{state}");
    assert!(state["counts"]["BlockRemoved:CPU"].as_u64() > Some(0), "{state}");
    assert_eq!(state["cpu_hashes"], json!([]), "{state}");
}

/// Blocks computed through a LoRA adapter are stored under its `lora_id` and `lora_name`, as
/// vLLM's `BlockStored` names them (so llm-d keeps adapters apart); the base model's carry nil.
#[test]
#[ignore = "needs a Python with pyzmq and msgpack (KILN_TEST_PYTHON); .ci/run provides it"]
fn blocks_computed_through_an_adapter_carry_its_id_and_name() {
    use crate::arch_parity::{fixture, read_reference};
    let (mut subscriber, pub_endpoint, replay_endpoint) = Subscriber::bound();
    let adapter = fixture("llama").join("lora").join("all").display().to_string();
    let t = crate::common::start_model(
        tempfile::tempdir().expect("tempdir"),
        fixture("llama").join("hf"),
        |c| {
            c.engine.kv_cache_memory = "8MiB".into();
            c.engine.enable_prefix_caching = true;
            c.engine.block_size = 4;
            c.kv_events = events_config(&pub_endpoint, &replay_endpoint);
            c.engine.prefix_caching_hash_algo = PrefixCachingHashAlgo::Kiln;
            c.lora.enable_lora = true;
            c.lora.lora_modules = vec![kiln::config::LoraModule {
                name: "all".into(),
                path: adapter,
                base_model_name: None,
            }];
        },
    );
    let prompt = &read_reference(&fixture("llama"))["f32"][2]["prompt_ids"];
    let base = t.get_text("/v1/models").1;
    let base: Value = serde_json::from_str(&base).expect("models");
    // The same prompt through the adapter and through the base model: two chains.
    for model in ["all", base["data"][0]["id"].as_str().expect("base")] {
        let body = json!({"model": model, "prompt": prompt, "max_tokens": 6, "ignore_eos": true});
        let (status, out) = t.post("/v1/completions", &body);
        assert_eq!(status, 200, "{model}: {out}");
    }
    let (state, kiln) = subscriber.sync_with(&t);
    assert_same_set(&state, &kiln);
    let by_lora = state["stored_by_lora"].as_object().expect("stored_by_lora");
    let mut keys: Vec<&str> = by_lora.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["1:all", "nil"], "{state}");
    // Twelve prompt tokens and six generated: four blocks of four under each.
    assert_eq!(kiln.cached_block_hashes.len(), 8, "{state}");
}
