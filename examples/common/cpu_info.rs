//! The CPU a benchmark ran on, for its JSON: figures from different machines must not be
//! compared. Included with `#[path]` by the examples that record it.

use serde_json::{Value, json};

/// The CPU model (name, family and model number) and its SIMD flags, so figures from different machines are not confused.
pub fn cpu_info() -> Value {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(key, _)| key.trim() == name)
            .map(|(_, v)| v.trim().to_string())
    };
    let flags = field("flags").or_else(|| field("Features")).unwrap_or_default();
    let simd: Vec<&str> = [
        "sse4_2",
        "avx",
        "avx2",
        "fma",
        "f16c",
        "avx512f",
        "avx512bw",
        "avx512_vnni",
        "avx_vnni",
        "amx_tile",
        "asimd",
        "asimdhp",
        "sve",
    ]
    .into_iter()
    .filter(|f| flags.split_whitespace().any(|x| x == *f))
    .collect();
    let threads = std::thread::available_parallelism().map_or(0, |n| n.get());
    // Under KVM several generations share the name "Intel(R) Xeon(R) Processor".
    let family_model = field("cpu family")
        .zip(field("model"))
        .map(|(f, m)| format!("family {f} model {m}"));
    json!({"model": field("model name"), "family_model": family_model, "threads": threads, "simd_flags": simd})
}
