//! `kiln_memory_bytes{component,device}` and `--kv-cache-dtype`, scraped by a real Prometheus
//! (`KILN_TEST_PROMETHEUS`): two servers on the same tiny model and the same number of KV
//! blocks, one with a `float16` cache and one with `float32`.

use kiln::config::KvCacheDtype;
use kiln::model::loader::open_model;
use serde_json::json;

use crate::common::prometheus_server::PrometheusServer;
use crate::common::start_tiny;
use crate::common::wait::wait_for;

const BLOCKS: usize = 64;

#[test]
#[ignore = "needs the prometheus server (KILN_TEST_PROMETHEUS); .ci/run provides it"]
fn prometheus_sees_weights_near_the_file_size_and_a_16_bit_cache_half_the_f32_one() {
    let start = |dtype: KvCacheDtype| {
        start_tiny(|c| {
            c.engine.num_gpu_blocks_override = BLOCKS;
            c.engine.kv_cache_dtype = dtype;
        })
    };
    let (half, full) = (start(KvCacheDtype::Float16), start(KvCacheDtype::Float32));
    let model = open_model(&half.model_path).expect("open tiny model").config;
    let block_values = 16 * 2 * model.num_layers * model.kv_dim();
    let file_size = std::fs::metadata(&half.model_path).expect("model file").len() as f64;
    // A request, so the kernels' scratch has been used.
    for t in [&half, &full] {
        let (s, _) = t.post("/v1/completions", &json!({"prompt": "hello", "max_tokens": 3}));
        assert_eq!(s, 200);
    }
    let (a, b) = (half.server.addr.to_string(), full.server.addr.to_string());
    let prometheus = PrometheusServer::start("kiln", &[a.clone(), b.clone()]);
    prometheus.wait_ready(&half.client);
    let value = |instance: &str, component: &str| {
        let query = format!("kiln_memory_bytes{{instance=\"{instance}\",component=\"{component}\",device=\"cpu\"}}");
        wait_for(&format!("Prometheus to scrape {query}"), || {
            prometheus.scalar(&half.client, &query).ok_or("no single sample")
        })
    };
    assert_eq!(value(&a, "kv_cache"), (BLOCKS * block_values * 2) as f64, "float16");
    assert_eq!(value(&b, "kv_cache"), (BLOCKS * block_values * 4) as f64, "float32");
    assert_eq!(value(&a, "host_swap"), 0.0, "nothing swapped");
    assert!(value(&a, "scratch") > 0.0, "a request grew the kernels' scratch");
    // The tiny model is an f32 file read into f32 tensors; its tied head is a second copy
    // of the embedding, and the norms have a host copy: between the file size and twice it.
    let weights = value(&a, "weights");
    assert!(
        weights > 0.9 * file_size && weights < 2.5 * file_size,
        "weights {weights} B for a {file_size} B file"
    );
    assert_eq!(value(&b, "weights"), weights);
    let resident = wait_for("process_resident_memory_bytes", || {
        prometheus
            .scalar(
                &half.client,
                &format!("process_resident_memory_bytes{{instance=\"{a}\"}}"),
            )
            .ok_or("no single sample")
    });
    // The contract (METRICS.md): weights, KV cache and swap pool stay within the resident set.
    let held = weights + value(&a, "kv_cache") + value(&a, "host_swap");
    assert!(
        resident >= held,
        "resident {resident} B below the {held} B accounted for"
    );
    // vLLM's info metric names the setting; the tokens follow the blocks.
    for (instance, dtype) in [(&a, "float16"), (&b, "float32")] {
        let query = format!("vllm:cache_config_info{{instance=\"{instance}\",cache_dtype=\"{dtype}\"}}");
        let seen = wait_for(&query, || {
            prometheus.scalar(&half.client, &query).ok_or("no single sample")
        });
        assert_eq!(seen, 1.0);
    }
}

#[test]
fn the_same_memory_holds_twice_the_tokens_at_16_bits() {
    let start = |dtype: KvCacheDtype| {
        start_tiny(|c| {
            c.engine.kv_cache_memory = "4MiB".into();
            c.engine.kv_cache_dtype = dtype;
        })
    };
    let blocks = |t: &crate::common::Tiny| {
        let (s, text) = t.get_text("/get_server_info");
        assert_eq!(s, 200);
        let info: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        (
            info["num_gpu_blocks"].as_u64().expect("blocks"),
            info["kv_cache_dtype"].clone(),
        )
    };
    let (f16_blocks, f16_name) = blocks(&start(KvCacheDtype::Float16));
    let (f32_blocks, f32_name) = blocks(&start(KvCacheDtype::Float32));
    let (bf16_blocks, bf16_name) = blocks(&start(KvCacheDtype::Bfloat16));
    let (auto_blocks, auto_name) = blocks(&start(KvCacheDtype::Auto));
    assert_eq!(
        (f16_name, f32_name, bf16_name, auto_name),
        (json!("float16"), json!("float32"), json!("bfloat16"), json!("float16")),
        "auto is float16"
    );
    assert_eq!(auto_blocks, f16_blocks);
    assert!(f32_blocks > 0);
    assert!(
        f16_blocks >= 2 * f32_blocks && f16_blocks <= 2 * f32_blocks + 1,
        "{f16_blocks} vs {f32_blocks}"
    );
    assert_eq!(bf16_blocks, f16_blocks);
    // One byte a value: four times float32's tokens, named as vLLM names it, on /load and in
    // vllm:cache_config_info.
    let fp8 = start(KvCacheDtype::Fp8);
    let (fp8_blocks, fp8_name) = blocks(&fp8);
    assert_eq!(fp8_name, json!("fp8"));
    assert!(
        fp8_blocks >= 4 * f32_blocks && fp8_blocks <= 4 * f32_blocks + 3,
        "{fp8_blocks} vs {f32_blocks}"
    );
    let (s, text) = fp8.get_text("/load");
    assert_eq!(s, 200);
    let load: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(load["max_token_capacity"], json!(fp8_blocks * 16), "{load}");
    let (s, metrics) = fp8.get_text("/metrics");
    assert_eq!(s, 200);
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("vllm:cache_config_info{") && l.contains("cache_dtype=\"fp8\"")),
        "no cache_config_info with cache_dtype=\"fp8\""
    );
}
