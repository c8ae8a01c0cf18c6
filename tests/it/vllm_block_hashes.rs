//! vLLM's block hashes (`--prefix-caching-hash-algo`): kiln's `sha256_cbor` and
//! `sha256_cbor_64bit` equal vLLM's scheme computed in Python with cbor2
//! (tests/python/vllm_block_hashes.py) on the same token ids and `PYTHONHASHSEED`, and a real
//! kiln process with KV events on publishes them by default, so an indexer that hashes token
//! ids as vLLM does (vllm-router's `kv_aware`, llm-d's precise prefix scorer) finds kiln's
//! blocks.

use std::io::Write;
use std::process::{Command, Stdio};

use kiln::config::PrefixCachingHashAlgo;
use kiln::kv_cache::block::hash::BlockHasher;
use serde_json::{Value, json};

use crate::common::process::{Launch, free_port};
use crate::kv_events::{Subscriber, TOPIC};

/// vLLM's integer hashes of every full block of each prompt, from the Python script.
fn vllm_hashes(algo: &str, seed: &str, block_size: usize, prompts: &[Vec<u32>]) -> Vec<Vec<u64>> {
    let python = std::env::var("KILN_TEST_PYTHON").expect("set KILN_TEST_PYTHON (a Python with cbor2)");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/vllm_block_hashes.py");
    let mut child = Command::new(python)
        .arg(script)
        .env("PYTHONHASHSEED", seed)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python starts");
    let request = json!({"algo": algo, "block_size": block_size, "prompts": prompts});
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(request.to_string().as_bytes())
        .expect("write the request");
    let out = child.wait_with_output().expect("python ends");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("a JSON list")
}

#[test]
#[ignore = "needs a Python with cbor2 (KILN_TEST_PYTHON); .ci/run provides it"]
fn kilns_vllm_schemes_equal_vllms_hashes_for_every_seed_and_token_width() {
    // Token ids of every CBOR width (1, 2, 3, 5 bytes), a partial last block, one block.
    let prompts: Vec<Vec<u32>> = vec![
        (0..37).collect(),
        vec![23, 24, 255, 256, 65_535, 65_536, 150_000, 7, 1, 2, 3, 4, 5, 6, 7, 8],
        vec![151_643; 16],
    ];
    for (algo, name) in [
        (PrefixCachingHashAlgo::Sha256Cbor, "sha256_cbor"),
        (PrefixCachingHashAlgo::Sha256Cbor64bit, "sha256_cbor_64bit"),
    ] {
        // Python accepts only integers in [0, 2^32) as PYTHONHASHSEED (vLLM hashes its text).
        for seed in ["0", "42", "4294967295"] {
            for block_size in [4, 16] {
                let expected = vllm_hashes(name, seed, block_size, &prompts);
                let hasher = BlockHasher::new(algo, Some(seed));
                let kiln: Vec<Vec<u64>> = prompts
                    .iter()
                    .map(|p| {
                        hasher
                            .hash_all(p, block_size, None)
                            .into_iter()
                            .map(|h| h.external())
                            .collect()
                    })
                    .collect();
                assert_eq!(
                    kiln, expected,
                    "{name}, PYTHONHASHSEED={seed:?}, block size {block_size}"
                );
                assert!(kiln.iter().any(|p| p.len() > 1), "chains were compared");
            }
        }
    }
}

#[test]
#[ignore = "needs a Python with pyzmq, msgpack and cbor2 (KILN_TEST_PYTHON); .ci/run provides it"]
fn a_kiln_process_with_kv_events_publishes_vllms_sha256_cbor_hashes_by_default() {
    let pub_endpoint = format!("tcp://127.0.0.1:{}", free_port());
    let replay_endpoint = format!("tcp://127.0.0.1:{}", free_port());
    let seed = "20260";
    let mut subscriber = Subscriber::start_checking("bind", &pub_endpoint, &replay_endpoint, "sha256_cbor", Some(seed));
    let events = json!({
        "enable_kv_cache_events": true, "publisher": "zmq",
        "endpoint": pub_endpoint, "replay_endpoint": replay_endpoint, "topic": TOPIC,
    });
    let kiln = Launch::default()
        .arg("--block-size", "4")
        .arg("--kv-events-config", &events.to_string())
        .env("PYTHONHASHSEED", seed)
        .start();
    let info: Value = kiln
        .client
        .get(kiln.url("/get_server_info"))
        .send()
        .expect("server info")
        .json()
        .expect("json");
    assert_eq!(info["prefix_caching_hash_algo"], "sha256_cbor", "{info}");
    assert_eq!(info["block_size"], 4, "{info}");
    // A shared prefix, then two continuations of it: chained blocks with known parents.
    let prefix: Vec<u32> = (3..27).collect();
    for tail in [
        vec![],
        vec![100, 101, 102, 103, 104],
        vec![200, 201, 202, 203, 204, 205],
    ] {
        let prompt: Vec<u32> = prefix.iter().copied().chain(tail).collect();
        let resp = kiln
            .client
            .post(kiln.url("/v1/completions"))
            .json(&json!({"prompt": prompt, "max_tokens": 3, "ignore_eos": true}))
            .send()
            .expect("completion");
        assert_eq!(resp.status().as_u16(), 200);
    }
    let state = subscriber.command("stored 3");
    assert_eq!(state["errors"], json!([]), "a hash differs from vLLM's: {state}");
    assert!(state["counts"]["BlockStored"].as_u64() >= Some(3), "{state}");
    assert!(state["hashes"].as_array().is_some_and(|h| h.len() >= 6), "{state}");
}
