//! Settings that take one of a few names, parsed into enums where the flag or file is read
//! (clap and serde both refuse an unknown name, naming the flag or key), so nothing later
//! compares text.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What preemption does with a request's KV blocks (`engine.preemption_mode`,
/// `--preemption-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum PreemptionMode {
    /// Free them; the request's tokens are recomputed when it runs again.
    #[default]
    Recompute,
    /// Copy them to the host pool and back (recompute when the pool is full).
    Swap,
}

/// Whether the engines of a data-parallel server pin their thread pools to their share of
/// the CPUs (`engine.cpu_affinity`, `--cpu-affinity`; see `executor::placement`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum CpuAffinity {
    /// One engine per NUMA node where there are several, each pinned to its share of the
    /// node's (or the machine's) allowed CPUs.
    #[default]
    Auto,
    /// No pinning: each engine's pool takes an even share of the threads, run wherever the
    /// kernel puts them.
    Off,
}

/// How the prefix cache hashes full blocks (`engine.prefix_caching_hash_algo`,
/// `--prefix-caching-hash-algo`; see `kv_cache::block::hash`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, clap::ValueEnum)]
pub enum PrefixCachingHashAlgo {
    /// `sha256_cbor` when KV events are on (routers recompute vLLM's hashes), else `kiln`.
    #[default]
    #[serde(rename = "auto")]
    #[value(name = "auto")]
    Auto,
    /// vLLM's: SHA-256 over canonical CBOR, seeded by `PYTHONHASHSEED`.
    #[serde(rename = "sha256_cbor")]
    #[value(name = "sha256_cbor")]
    Sha256Cbor,
    /// vLLM 0.10's 64-bit form of `sha256_cbor`.
    #[serde(rename = "sha256_cbor_64bit")]
    #[value(name = "sha256_cbor_64bit")]
    Sha256Cbor64bit,
    /// kiln's own, the same in every process without a seed.
    #[serde(rename = "kiln")]
    #[value(name = "kiln")]
    Kiln,
}

impl PrefixCachingHashAlgo {
    /// `auto` made concrete: vLLM's hash when KV events are published, else kiln's own.
    pub fn resolved(self, kv_events: bool) -> Self {
        match self {
            Self::Auto if kv_events => Self::Sha256Cbor,
            Self::Auto => Self::Kiln,
            chosen => chosen,
        }
    }

    /// The setting's name, as vLLM spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sha256Cbor => "sha256_cbor",
            Self::Sha256Cbor64bit => "sha256_cbor_64bit",
            Self::Kiln => "kiln",
            Self::Auto => "auto",
        }
    }
}

/// The CPU kernels' instruction set (`engine.cpu_kernels`, `--cpu-kernels`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum CpuKernels {
    /// The best this CPU runs, detected at start.
    #[default]
    Auto,
    Avx512,
    Avx2,
    Portable,
}

/// The activations' precision in the many-token CPU matmuls (`engine.cpu_activations`,
/// `--cpu-activations`); the kernels read it as `kernels::dispatch::Activations`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Activations {
    /// f32 throughout: greedy parity with the reference.
    #[default]
    F32,
    /// 8-bit activations per group of 32 (or 16) columns with integer dot products on AVX-512
    /// VNNI (elsewhere f32, with a warning), at 6 or more tokens a step.
    Int8,
}

/// How the KV cache stores K and V (`engine.kv_cache_dtype`, `--kv-cache-dtype`; vLLM's
/// names). Values are written in this type and widened to f32 inside the attention kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum KvCacheDtype {
    /// float16: half of float32's memory. A prompt's first chunk attends over its own K/V as
    /// computed, so first-step logits match a float32 cache; later steps read rounded values
    /// (docs/02 gives the measured error).
    #[default]
    Auto,
    /// bfloat16: f32's range with 8 bits of precision.
    Bfloat16,
    /// IEEE half precision: 11 bits of precision, values up to 65504.
    Float16,
    /// Full precision, twice the memory.
    Float32,
    /// OCP FP8 E4M3 with scale 1.0 (vLLM's `fp8`, alias `fp8_e4m3`): a quarter of float32's
    /// memory, 3 bits of precision, values up to ±448 (saturating). CPU build only.
    #[serde(rename = "fp8", alias = "fp8_e4m3")]
    #[value(name = "fp8", alias = "fp8_e4m3")]
    Fp8,
}

impl KvCacheDtype {
    /// `auto` made concrete.
    pub fn resolved(self) -> Self {
        match self {
            Self::Auto => Self::Float16,
            chosen => chosen,
        }
    }

    /// Bytes of one stored value.
    pub fn bytes(self) -> usize {
        match self.resolved() {
            Self::Float32 => 4,
            Self::Fp8 => 1,
            _ => 2,
        }
    }

    /// The setting's name, as vLLM spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Bfloat16 => "bfloat16",
            Self::Float16 => "float16",
            Self::Float32 => "float32",
            Self::Fp8 => "fp8",
        }
    }
}

/// How `auto` tool calls are read from the model's text (`model.tool_call_parser`,
/// `--tool-call-parser`; vLLM's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ToolCallParser {
    /// `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Hermes, Qwen).
    Hermes,
}

/// Reads an optional name where the file's empty string means none.
pub(super) fn empty_as_none<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    let text = String::deserialize(deserializer)?;
    if text.is_empty() {
        return Ok(None);
    }
    T::deserialize(serde::de::value::StringDeserializer::new(text)).map(Some)
}

/// Writes `None` as the file's empty string, as [`empty_as_none`] reads it.
pub(super) fn none_as_empty<S: Serializer, T: Serialize>(value: &Option<T>, serializer: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(value) => value.serialize(serializer),
        None => serializer.serialize_str(""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activation_modes_parse_by_name_and_refuse_others() {
        use clap::ValueEnum;
        assert_eq!(Activations::default(), Activations::F32);
        assert_eq!(Activations::from_str("int8", false), Ok(Activations::Int8));
        assert_eq!(Activations::from_str("f32", false), Ok(Activations::F32));
        assert!(Activations::from_str("int4", false).is_err());
        #[derive(Deserialize)]
        struct File {
            a: Activations,
        }
        let file: File = toml::from_str("a = \"int8\"").expect("int8 parses");
        assert_eq!(file.a, Activations::Int8);
        assert!(toml::from_str::<File>("a = \"fp8\"").is_err());
    }

    /// The help text and the configuration guide state the kernel's token threshold as text:
    /// they must follow the constant.
    #[test]
    fn the_int8_help_and_guide_state_the_kernels_token_threshold() {
        use clap::ValueEnum;
        let value = Activations::Int8.to_possible_value().expect("a value");
        let help = value.get_help().expect("a help text").to_string();
        let threshold = crate::kernels::matmul::INT8_MIN_TOKENS;
        assert!(help.contains(&format!("at {threshold} or more tokens")), "{help}");
        let guide = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/02-configuration.md");
        let guide = std::fs::read_to_string(guide).expect("docs/02-configuration.md");
        assert!(guide.contains(&format!("of {threshold} or more tokens a step")));
    }
}
