//! Settings as the real binary reads them, as an operator runs it: a bad one stops `kiln
//! serve` at once, before the model loads (the log never reaches "loading"), with a message
//! naming the flag or variable; a good one takes effect.

use std::time::{Duration, Instant};

use crate::common::process::Launch;

/// Longest a refused configuration may take to end the process: loose for a loaded 2-CPU
/// machine (the refusals measured here take well under a second).
const EXIT_BOUND: Duration = Duration::from_secs(10);

fn with_args(args: &[&str]) -> Launch {
    Launch {
        args: args.iter().map(|a| a.to_string()).collect(),
        ..Launch::default()
    }
}

#[test]
fn bad_settings_stop_the_process_before_the_model_loads_naming_the_setting() {
    let cases = [
        (
            "a metric prefix that starts with a digit",
            with_args(&["--engine-prefix", "1x_"]),
            "--engine-prefix",
        ),
        (
            "an unknown traces sampler in the environment",
            with_args(&["--otlp-traces-endpoint", "http://127.0.0.1:9/v1/traces"]).env("OTEL_TRACES_SAMPLER", "bogus"),
            "OTEL_TRACES_SAMPLER",
        ),
        (
            "a histogram bucket family vLLM does not have",
            with_args(&["--custom-histogram-buckets", r#"{"ttft": [0.1, 1.0]}"#]),
            "custom_histogram_buckets",
        ),
        (
            "a preemption mode that does not exist",
            with_args(&["--preemption-mode", "sometimes"]),
            "--preemption-mode",
        ),
        (
            "a KV cache size that is not a size",
            with_args(&["--kv-cache-memory", "lots"]),
            "kv_cache_memory",
        ),
        (
            "CPU kernels that do not exist",
            with_args(&["--cpu-kernels", "sse9"]),
            "--cpu-kernels",
        ),
        (
            "CPU kernels that do not exist, from the environment",
            with_args(&[]).env("KILN_CPU_KERNELS", "sse9"),
            "--cpu-kernels",
        ),
        (
            "a tool-call parser that does not exist",
            with_args(&["--tool-call-parser", "nope"]),
            "--tool-call-parser",
        ),
        (
            "automatic tool choice without a parser",
            with_args(&["--enable-auto-tool-choice"]),
            "--tool-call-parser",
        ),
        (
            "an API key file that cannot be read",
            with_args(&["--api-key-file", "/nonexistent/kiln-keys"]),
            "api_key_file",
        ),
    ];
    for (what, launch, named) in cases {
        let started = Instant::now();
        let mut kiln = launch.spawn();
        let status = kiln.wait_exit(EXIT_BOUND);
        let took = started.elapsed();
        let logs = kiln.logs();
        assert!(!status.success(), "{what}: exited with {status}\n{logs}");
        assert!(logs.contains(named), "{what}: the message names {named}:\n{logs}");
        assert!(
            !logs.contains("loading; probes answered"),
            "{what}: refused only once loading had begun:\n{logs}"
        );
        eprintln!("{what}: refused in {took:?}");
    }
}

#[test]
fn the_http_worker_count_comes_from_the_flag() {
    let kiln = with_args(&["--kv-cache-memory", "64MiB", "--http-workers", "3"]).start();
    let logs = kiln.logs();
    assert!(
        logs.lines()
            .any(|l| l.contains("starting service") && l.contains("workers: 3")),
        "{logs}"
    );
}

/// int8 runs where its VNNI kernel does; elsewhere (no VNNI, or other kernels chosen) the
/// model stays in f32 with a warning, since the portable integer kernel is 30-40x slower.
#[test]
fn the_log_says_which_activation_mode_and_int8_kernel_run() {
    const FALLBACK: &str = "--cpu-activations int8 needs AVX-512 VNNI on the avx512 kernels; running f32 activations";
    let kiln = with_args(&["--kv-cache-memory", "64MiB", "--cpu-activations", "int8"]).start();
    let logs = kiln.logs();
    if kiln::kernels::dispatch::int8_vnni_available() {
        assert!(
            logs.lines()
                .any(|l| l.contains("CPU activations: int8") && l.contains("avx512-vnni")),
            "{logs}"
        );
    } else {
        assert!(logs.contains(FALLBACK), "{logs}");
    }
    let kiln = with_args(&[
        "--kv-cache-memory",
        "64MiB",
        "--cpu-kernels",
        "portable",
        "--cpu-activations",
        "int8",
    ])
    .start();
    let logs = kiln.logs();
    assert!(
        logs.contains(FALLBACK) && !logs.contains("CPU activations: int8"),
        "{logs}"
    );
    let kiln = with_args(&["--kv-cache-memory", "64MiB"]).start();
    let logs = kiln.logs();
    assert!(logs.contains("CPU activations: f32"), "{logs}");
}

#[test]
fn bad_names_in_a_config_file_stop_the_process_naming_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (what, toml, named) in [
        ("CPU kernels", "[engine]\ncpu_kernels = \"sse9\"\n", "cpu_kernels"),
        (
            "CPU activations",
            "[engine]\ncpu_activations = \"int4\"\n",
            "cpu_activations",
        ),
        (
            "a tool-call parser",
            "[model]\ntool_call_parser = \"nope\"\n",
            "tool_call_parser",
        ),
    ] {
        let path = dir.path().join("kiln.toml");
        std::fs::write(&path, toml).expect("write the config file");
        let mut kiln = with_args(&["--config", path.to_str().expect("utf-8 path")]).spawn();
        let status = kiln.wait_exit(EXIT_BOUND);
        let logs = kiln.logs();
        assert!(!status.success(), "{what}: exited with {status}\n{logs}");
        assert!(logs.contains(named), "{what}: the message names {named}:\n{logs}");
        assert!(
            !logs.contains("loading; probes answered"),
            "{what}: refused only once loading had begun:\n{logs}"
        );
    }
}
