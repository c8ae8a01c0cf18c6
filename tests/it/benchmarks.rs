//! The benchmark examples as a user runs them: `bench_serving` against a live server (here
//! kiln on the tiny model) and `bench_engine` on a model file. `.ci/run` builds the examples.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::common::start_tiny;

/// `target/<profile>/examples/NAME`, beside this test binary's `deps` folder.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>");
    let path = profile_dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build --release --examples` (.ci/run does)",
        path.display()
    );
    path
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("example runs");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The row `| label | client | server |` of the `--scrape-metrics` table.
fn scraped_row(stdout: &str, label: &str) -> (f64, f64) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(&format!("| {label} |")))
        .unwrap_or_else(|| panic!("no `{label}` row in:\n{stdout}"));
    let cells: Vec<f64> = line.split('|').filter_map(|c| c.trim().parse::<f64>().ok()).collect();
    (cells[0], cells[1])
}

#[test]
fn bench_serving_reports_every_request_and_agrees_with_the_servers_metrics() {
    let tiny = start_tiny(|_| {});
    let dir = tempfile::tempdir().expect("tempdir");
    let json_path = dir.path().join("serving.json");
    let dataset = dir.path().join("prompts.jsonl");
    std::fs::write(&dataset, "{\"prompt\": \"hello there\"}\n{\"prompt\": \"a b c d\"}\n").expect("dataset");
    let base_url = tiny.server.url("");
    let stdout = run(Command::new(example("bench_serving")).args([
        "--base-url",
        &base_url,
        "--num-prompts",
        "6",
        "--max-concurrency",
        "3",
        "--input-len",
        "8",
        "--output-len",
        "4",
        "--ignore-eos",
        "--scrape-metrics",
        "--output-json",
        json_path.to_str().expect("utf-8 path"),
    ]));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).expect("json written")).expect("json");
    assert_eq!(report["completed"], 6);
    assert_eq!(report["failed"], 0);
    // --ignore-eos: every request generates exactly --output-len tokens.
    assert_eq!(report["total_output_tokens"], 24);
    for key in ["ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"] {
        for stat in ["mean", "p50", "p90", "p99"] {
            let v = report[key][stat]
                .as_f64()
                .unwrap_or_else(|| panic!("{key}.{stat} missing"));
            assert!(v > 0.0, "{key}.{stat} = {v}");
        }
    }
    assert!(report["e2e_ms"]["p50"].as_f64() >= report["ttft_ms"]["p50"].as_f64());
    let tokens_per_s = report["output_throughput"].as_f64().expect("throughput");
    let expected = 24.0 / report["duration_s"].as_f64().expect("duration");
    assert!((tokens_per_s - expected).abs() < 1e-9 * expected.max(1.0));
    // The server counted exactly the tokens and requests the client saw.
    assert_eq!(scraped_row(&stdout, "output tokens"), (24.0, 24.0));
    let (client_prompt, server_prompt) = scraped_row(&stdout, "prompt tokens");
    assert_eq!(client_prompt, server_prompt);
    assert_eq!(scraped_row(&stdout, "requests"), (6.0, 6.0));

    // A dataset replaces the synthetic prompts; a dead server gives failures, not a crash.
    run(Command::new(example("bench_serving")).args([
        "--base-url",
        &base_url,
        "--dataset",
        dataset.to_str().expect("utf-8 path"),
        "--num-prompts",
        "5",
        "--output-len",
        "3",
        "--ignore-eos",
        "--output-json",
        json_path.to_str().expect("utf-8 path"),
    ]));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).expect("json")).expect("json");
    assert_eq!(report["completed"], 2, "two prompts in the dataset");
    assert_eq!(report["total_output_tokens"], 6);

    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    run(Command::new(example("bench_serving")).args([
        "--base-url",
        &format!("http://127.0.0.1:{closed_port}"),
        "--model",
        "any",
        "--num-prompts",
        "2",
        "--output-json",
        json_path.to_str().expect("utf-8 path"),
    ]));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).expect("json")).expect("json");
    assert_eq!(
        (report["completed"].as_u64(), report["failed"].as_u64()),
        (Some(0), Some(2))
    );
    let errors = report["errors"].as_object().expect("errors by reason");
    assert!(errors.keys().all(|reason| reason.starts_with("request:")), "{errors:?}");
}

/// Chat endpoint, Poisson arrivals and output lengths drawn around `--output-len`.
#[test]
fn bench_serving_drives_chat_with_poisson_arrivals_and_varied_lengths() {
    let tiny = start_tiny(|_| {});
    let dir = tempfile::tempdir().expect("tempdir");
    let json_path = dir.path().join("chat.json");
    run(Command::new(example("bench_serving")).args([
        "--base-url",
        &tiny.server.url(""),
        "--endpoint",
        "chat",
        "--num-prompts",
        "8",
        "--request-rate",
        "200",
        "--seed",
        "3",
        "--input-len",
        "6",
        "--output-len",
        "4",
        "--range-ratio",
        "0.5",
        "--ignore-eos",
        "--output-json",
        json_path.to_str().expect("utf-8 path"),
    ]));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).expect("json")).expect("json");
    assert_eq!(
        (report["completed"].as_u64(), report["failed"].as_u64()),
        (Some(8), Some(0))
    );
    // Each request asks for 2..=6 tokens (4 ± 50 %) and, ignoring EOS, gets exactly that.
    let output = report["total_output_tokens"].as_u64().expect("output tokens");
    assert!((16..=48).contains(&output), "{output}");
    assert_ne!(output, 32, "seed 3 draws lengths other than all 4s");
}

#[test]
fn bench_engine_reports_prefill_decode_and_both_kernels() {
    let tiny = start_tiny(|_| {});
    let dir = tempfile::tempdir().expect("tempdir");
    let json_path = dir.path().join("engine.json");
    run(Command::new(example("bench_engine")).args([
        "--model",
        tiny.model_path.to_str().expect("utf-8 path"),
        "--prefill-len",
        "64",
        "--decode-steps",
        "4",
        "--output-json",
        json_path.to_str().expect("utf-8 path"),
    ]));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).expect("json")).expect("json");
    // The server's step loop, with its default async scheduling, is what was measured.
    assert_eq!(report["async_scheduling"], true, "{report}");
    for phase in ["prefill", "decode_1", "decode_8", "decode_32"] {
        let tok_s = report[phase]["tok_s"]
            .as_f64()
            .unwrap_or_else(|| panic!("{phase}.tok_s missing"));
        assert!(tok_s > 0.0 && tok_s.is_finite(), "{phase}: {tok_s}");
        assert!(report[phase]["matmul_gflops"].as_f64().is_some_and(|g| g > 0.0));
    }
    let rates = report["matmul_rates"].as_array().expect("matmul_rates");
    let rows: Vec<u64> = rates.iter().filter_map(|r| r["rows"].as_u64()).collect();
    assert_eq!(rows, vec![1, 8, 32, 64]);
    assert!(
        rates
            .iter()
            .all(|r| r["packed_q4_1_gflops"].as_f64().is_some_and(|g| g > 0.0))
    );
    // Long context: capped at what the tiny model's context holds.
    let long = &report["decode_long_context"];
    assert!(long["tok_s"].as_f64().is_some_and(|t| t > 0.0), "{long}");
    assert!(long["context"].as_u64().is_some_and(|c| c > 64), "{long}");
    // The one-stream profile: the model's projections and the sampler, timed.
    let profile = &report["decode_profile"];
    let parts: Vec<&str> = profile["parts"]
        .as_array()
        .expect("decode_profile.parts")
        .iter()
        .filter_map(|p| p["part"].as_str())
        .collect();
    for part in ["ffn_down", "output head", "sampling, temperature 1"] {
        assert!(parts.contains(&part), "{part} missing from {parts:?}");
    }
    assert!(profile["bandwidth_gb_s"].as_f64().is_some_and(|b| b > 0.0), "{profile}");
    assert!(
        profile["weight_bytes_per_token"].as_u64().is_some_and(|b| b > 0),
        "{profile}"
    );
}

/// `--decode-prompt-len` gives every decoding stream a prompt of that length, and only the
/// steps after every stream's first token are timed; a prompt that leaves no room for the
/// decode steps in the model's context is refused with the flag named.
#[test]
fn bench_engine_decodes_at_the_prompt_length_asked_for() {
    let tiny = start_tiny(|_| {});
    let model = tiny.model_path.to_str().expect("utf-8 path");
    let dir = tempfile::tempdir().expect("tempdir");
    let json_path = dir.path().join("engine.json");
    let quick = [
        "--prefill-len",
        "16",
        "--long-context",
        "0",
        "--profile-passes",
        "0",
        "--skip-kernel-rates",
        "--decode-batches",
        "3",
    ];
    run(Command::new(example("bench_engine")).args(quick).args([
        "--model",
        model,
        "--decode-prompt-len",
        "120",
        "--decode-steps",
        "5",
        "--output-json",
        json_path.to_str().expect("utf-8 path"),
    ]));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).expect("json")).expect("json");
    let decode = &report["decode_3"];
    assert_eq!(decode["prompt_tokens"], 120, "{decode}");
    // Only steps in which all three streams decode are timed: at most five, since a stream
    // decodes five times after its first token.
    let timed = decode["timed_tokens"].as_u64().expect("timed_tokens");
    assert!((3..=15).contains(&timed) && timed.is_multiple_of(3), "{decode}");
    assert!(decode["tok_s"].as_f64().is_some_and(|t| t > 0.0), "{decode}");

    // The tiny model holds 256 tokens: 250 + 10 decode steps do not fit.
    let out = Command::new(example("bench_engine"))
        .args(quick)
        .args(["--model", model, "--decode-prompt-len", "250", "--decode-steps", "10"])
        .output()
        .expect("example runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--decode-prompt-len 250"), "{stderr}");
}

/// Five seconds of mixed traffic (streams, chat, client aborts, bursts past a two-request
/// waiting queue) against the tiny model: no 5xx, the server's counters agree with what the
/// client saw, and the resident memory of the server (this process) is reported.
#[test]
fn soak_mixes_traffic_without_5xx_and_the_counters_match() {
    let tiny = start_tiny(|c| {
        c.engine.max_num_seqs = 2;
        c.engine.max_waiting = 2;
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let json_path = dir.path().join("soak.json");
    let stdout = run(Command::new(example("soak")).args([
        "--base-url",
        &tiny.server.url(""),
        "--duration-secs",
        "5",
        "--concurrency",
        "3",
        "--seed",
        "7",
        "--max-tokens",
        "8",
        "--prompt-words",
        "12",
        "--burst-size",
        "16",
        "--burst-interval-secs",
        "1",
        "--idle-timeout-secs",
        "60",
        "--server-pid",
        &std::process::id().to_string(),
        "--output-json",
        json_path.to_str().expect("utf-8 path"),
    ]));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).expect("json written"))
        .unwrap_or_else(|e| panic!("soak JSON: {e}\n{stdout}"));
    let requests = &report["requests"];
    let count = |key: &str| {
        requests[key]
            .as_u64()
            .unwrap_or_else(|| panic!("requests.{key} missing"))
    };
    assert_eq!(report["server_5xx"], 0, "{stdout}");
    assert_eq!(count("server_5xx"), 0);
    for key in ["other_4xx", "connection_errors", "bad_responses"] {
        assert_eq!(count(key), 0, "{key}:\n{stdout}");
    }
    // The mix happened: completions, client aborts and refusals past the queue.
    for key in ["ok", "aborted_by_client", "aborted_streaming", "rejected_429"] {
        assert!(count(key) > 0, "no {key}:\n{stdout}");
    }
    assert_eq!(report["counters_match"], true, "{stdout}");
    let checks = report["counter_checks"].as_array().expect("counter_checks");
    assert!(checks.iter().all(|c| c["pass"] == true), "{stdout}");
    for at in ["start", "middle", "end", "max_sampled"] {
        let mib = report["rss_mib"][at]
            .as_f64()
            .unwrap_or_else(|| panic!("rss_mib.{at} missing"));
        assert!(mib > 0.0, "rss_mib.{at} = {mib}");
    }
}

#[test]
fn bench_telemetry_serves_beside_a_hung_or_failing_collector() {
    for collector in ["hung", "failing"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let json_path = dir.path().join("telemetry.json");
        run(Command::new(example("bench_telemetry")).args([
            "--rounds",
            "1",
            "--requests",
            "8",
            "--concurrency",
            "2",
            "--max-tokens",
            "8",
            "--collector",
            collector,
            "--output-json",
            json_path.to_str().expect("utf-8 path"),
        ]));
        let report: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).expect("json")).expect("json");
        assert_eq!(report["collector"], collector);
        for side in ["median_on", "median_off"] {
            let tok_s = report[side].as_f64().unwrap_or(0.0);
            assert!(tok_s > 0.0, "{collector}: {side} = {tok_s}: every request was served");
        }
        assert!(report["resident_kib_end"].as_u64().is_some_and(|k| k > 0), "{report}");
    }
}

#[test]
fn bench_serving_scrapes_metrics_at_the_gateways_rate_while_serving() {
    let tiny = start_tiny(|_| {});
    let dir = tempfile::tempdir().expect("tempdir");
    let json_path = dir.path().join("scraped.json");
    let stdout = run(Command::new(example("bench_serving")).args([
        "--base-url",
        &tiny.server.url(""),
        "--num-prompts",
        "24",
        "--max-concurrency",
        "2",
        "--input-len",
        "8",
        "--output-len",
        "48",
        "--ignore-eos",
        "--scrape-hz",
        "20",
        "--output-json",
        json_path.to_str().expect("utf-8 path"),
    ]));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).expect("json")).expect("json");
    assert_eq!(
        (report["completed"].as_u64(), report["failed"].as_u64()),
        (Some(24), Some(0))
    );
    let scrapes = &report["scrapes"];
    assert_eq!(scrapes["failures"], 0, "{scrapes}");
    // A fixed 20 Hz schedule over the run: never more, and most of it kept.
    let count = scrapes["count"].as_f64().expect("count");
    let duration = report["duration_s"].as_f64().expect("duration");
    assert!(
        count >= 1.0 && count <= duration * 20.0 + 2.0,
        "{count} scrapes in {duration} s"
    );
    assert!(scrapes["body_bytes"].as_u64() > Some(1000), "{scrapes}");
    assert!(scrapes["latency_ms"]["p50"].as_f64() > Some(0.0), "{scrapes}");
    assert!(stdout.contains("| scrape_ms mean / p50 / p90 / p99 |"), "{stdout}");
}

/// `gpu_kit`, the one binary sent to a GPU machine: `tokenizer` writes files from which a
/// Hugging Face folder of the model's shapes and vocabulary loads, and `bench` is
/// `bench_engine`.
#[test]
fn gpu_kit_exports_the_tokenizer_and_shapes_and_benches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = kiln::testing::TinyModelSpec::default();
    let gguf = kiln::testing::write_tiny_model(dir.path(), spec).expect("tiny model");
    let out = dir.path().join("kit");
    run(Command::new(example("gpu_kit"))
        .args(["tokenizer", "--model", gguf.to_str().unwrap(), "--out"])
        .arg(&out));

    let files = kiln::model::loader::open_model(&gguf).expect("gguf");
    let shapes: Value = serde_json::from_slice(&std::fs::read(out.join("shapes.json")).expect("shapes")).expect("json");
    assert_eq!(shapes["hidden_size"], files.config.hidden_size);
    assert_eq!(shapes["num_hidden_layers"], files.config.num_layers);
    assert_eq!(shapes["num_key_value_heads"], files.config.num_kv_heads);
    assert_eq!(shapes["vocab_size"], files.config.vocab_size);
    let exported = kiln::tokenizer::load_tokenizer_json(&out.join("tokenizer.json")).expect("tokenizer.json");
    let text = "hello <|im_start|> 123";
    assert_eq!(
        exported.encode(text, false).expect("encode").get_ids(),
        files.tokenizer.encode(text, false).expect("encode").get_ids()
    );
    let special = kiln::tokenizer::special_tokens_from_hf_config(&out, &exported);
    assert_eq!(
        (special.bos, special.eos),
        (files.special_tokens.bos, files.special_tokens.eos)
    );

    let json_path = dir.path().join("bench.json");
    run(Command::new(example("gpu_kit"))
        .args(["bench", "--model", gguf.to_str().unwrap()])
        .args([
            "--decode-batches",
            "1",
            "--long-context",
            "0",
            "--profile-passes",
            "0",
            "--skip-kernel-rates",
            "--prefill-len",
            "16",
            "--decode-steps",
            "2",
            "--output-json",
            json_path.to_str().unwrap(),
        ]));
    let report: Value = serde_json::from_slice(&std::fs::read(&json_path).expect("json")).expect("json");
    assert!(
        report["decode_1"]["tok_s"].as_f64().is_some_and(|t| t > 0.0),
        "{report}"
    );
}

/// `bench_fleet` as a user runs it, shortened: fresh replicas for each mode, every request
/// answered, the fleet's hit rate and TTFT quantiles read from the replicas, each request
/// counted on the replica that served it.
#[test]
#[ignore = "needs vllm-router (KILN_TEST_VLLM_ROUTER); .ci/run provides it"]
fn bench_fleet_measures_one_replica_and_the_router_policies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = kiln::testing::TinyModelSpec {
        context: 4096,
        ..Default::default()
    };
    let gguf = kiln::testing::write_tiny_model(dir.path(), spec).expect("tiny model");
    let json_path = dir.path().join("fleet.json");
    let stdout = run(Command::new(example("bench_fleet")).args([
        "--model".as_ref(),
        gguf.as_os_str(),
        "--router".as_ref(),
        crate::common::tool("KILN_TEST_VLLM_ROUTER").as_ref(),
        "--kiln".as_ref(),
        env!("CARGO_BIN_EXE_kiln").as_ref(),
        "--sessions".as_ref(),
        "4".as_ref(),
        "--turns".as_ref(),
        "3".as_ref(),
        "--concurrency".as_ref(),
        "2".as_ref(),
        "--modes".as_ref(),
        "single,round_robin,cache_aware".as_ref(),
        "--output-json".as_ref(),
        json_path.as_os_str(),
    ]));
    assert!(stdout.contains("| cache_aware | 2 | 12/12 |"), "{stdout}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).expect("json")).expect("json");
    assert!(report["cpu"]["threads"].as_u64().is_some_and(|t| t > 0), "{report}");
    let rows = report["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3, "{report}");
    for row in rows {
        assert_eq!(row["ok"], 12, "{row}");
        let served: f64 = row["served_per_replica"]
            .as_array()
            .expect("served")
            .iter()
            .filter_map(Value::as_f64)
            .sum();
        assert_eq!(served, 12.0, "{row}");
        let rate = row["fleet_hit_rate"].as_f64().expect("hit rate");
        // Turns after the first resend the conversation: some of every prompt is cached.
        assert!(rate > 0.0 && rate <= 1.0, "{row}");
        let (p50, p99) = (
            row["kiln_ttft_p50_s"].as_f64().expect("p50"),
            row["kiln_ttft_p99_s"].as_f64().expect("p99"),
        );
        assert!(p50 > 0.0 && p50 <= p99, "{row}");
    }
}
