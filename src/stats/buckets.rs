//! Histogram bucket lists: the configurable engine families (vLLM's defaults) and the fixed
//! semantic-convention ones.

use serde::{Deserialize, Serialize};

use super::family::BucketFamily;

/// Semconv-advised buckets for `http.server.request.duration`.
pub const HTTP_DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
/// Body sizes: semconv advises none; powers of 4 from 64 B to 16 MiB cover a short JSON
/// error to a long streamed completion.
pub const HTTP_BODY_SIZE_BUCKETS: &[f64] = &[
    0.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0,
];
/// Semconv-advised buckets for `gen_ai.server.request.duration`.
pub const GENAI_REQUEST_DURATION_BUCKETS: &[f64] = &[
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
/// Semconv-advised buckets for `gen_ai.server.time_to_first_token`.
pub const GENAI_TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
/// Semconv-advised buckets for `gen_ai.server.time_per_output_token`.
pub const GENAI_TPOT_BUCKETS: &[f64] = &[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5];

/// The model context length the default token-count buckets stop at (SmolLM2's 8192).
pub const DEFAULT_MAX_MODEL_LEN: u64 = 8192;

/// The configurable engine bucket families (`telemetry.buckets.*`); defaults are vLLM's.
/// A family left out of the config keeps its default (token counts for
/// `DEFAULT_MAX_MODEL_LEN`; build from `vllm(max_model_len)` to follow the model).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HistogramBuckets {
    pub ttft: Vec<f64>,
    pub itl: Vec<f64>,
    pub request_latency: Vec<f64>,
    pub token_counts: Vec<f64>,
    pub params_n: Vec<f64>,
    pub iteration_tokens: Vec<f64>,
    /// The KV-block residency histograms (`--kv-cache-metrics`).
    pub kv_cache_residency: Vec<f64>,
    /// Preemptions per finished request (0 lands in the first bucket).
    pub request_num_preemptions: Vec<f64>,
}

impl Default for HistogramBuckets {
    fn default() -> Self {
        Self::vllm(DEFAULT_MAX_MODEL_LEN)
    }
}

impl HistogramBuckets {
    /// vLLM's buckets; token counts go 1, 2, 5, 10, 20, 50, … up to `max_model_len`.
    pub fn vllm(max_model_len: u64) -> Self {
        Self {
            ttft: vec![
                0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                80.0, 160.0, 640.0, 2560.0,
            ],
            itl: vec![
                0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                80.0,
            ],
            request_latency: vec![
                0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
                960.0, 1920.0, 7680.0,
            ],
            token_counts: one_two_five_buckets(max_model_len),
            params_n: vec![1.0, 2.0, 5.0, 10.0, 20.0],
            iteration_tokens: vec![
                1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
            ],
            // A millisecond to half an hour, as vLLM's.
            kv_cache_residency: vec![
                0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
                300.0, 600.0, 1200.0, 1800.0,
            ],
            request_num_preemptions: vec![1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0],
        }
    }

    /// Refuses empty, unsorted, duplicate or non-finite lists, naming the family: the SDK
    /// would otherwise drop the boundaries with only an internal log line.
    pub fn validate(&self) -> Result<(), BucketError> {
        let families = [
            ("ttft", &self.ttft),
            ("itl", &self.itl),
            ("request_latency", &self.request_latency),
            ("token_counts", &self.token_counts),
            ("params_n", &self.params_n),
            ("iteration_tokens", &self.iteration_tokens),
            ("kv_cache_residency", &self.kv_cache_residency),
            ("request_num_preemptions", &self.request_num_preemptions),
        ];
        for (family, bounds) in families {
            if bounds.is_empty() {
                return Err(BucketError {
                    family,
                    problem: "is empty",
                });
            }
            if bounds.iter().any(|b| !b.is_finite()) {
                return Err(BucketError {
                    family,
                    problem: "has a non-finite value",
                });
            }
            if bounds.windows(2).any(|w| w[0] >= w[1]) {
                return Err(BucketError {
                    family,
                    problem: "is not strictly increasing",
                });
            }
        }
        Ok(())
    }

    /// The boundaries of one family.
    pub fn bounds(&self, family: BucketFamily) -> Vec<f64> {
        match family {
            BucketFamily::Ttft => self.ttft.clone(),
            BucketFamily::Itl => self.itl.clone(),
            BucketFamily::RequestLatency => self.request_latency.clone(),
            BucketFamily::TokenCounts => self.token_counts.clone(),
            BucketFamily::ParamsN => self.params_n.clone(),
            BucketFamily::IterationTokens => self.iteration_tokens.clone(),
            BucketFamily::KvCacheResidency => self.kv_cache_residency.clone(),
            BucketFamily::Preemptions => self.request_num_preemptions.clone(),
            BucketFamily::GenAiRequestDuration => GENAI_REQUEST_DURATION_BUCKETS.to_vec(),
            BucketFamily::GenAiTtft => GENAI_TTFT_BUCKETS.to_vec(),
            BucketFamily::GenAiTimePerOutputToken => GENAI_TPOT_BUCKETS.to_vec(),
            BucketFamily::HttpDuration => HTTP_DURATION_BUCKETS.to_vec(),
            BucketFamily::HttpBodySize => HTTP_BODY_SIZE_BUCKETS.to_vec(),
        }
    }
}

/// A bucket family that the SDK would reject.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("telemetry.buckets.{family} {problem}")]
pub struct BucketError {
    pub family: &'static str,
    pub problem: &'static str,
}

/// 1, 2, 5 × powers of ten, every value ≤ `max` (vLLM's `build_1_2_5_buckets`).
pub fn one_two_five_buckets(max: u64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut exponent: u64 = 1;
    loop {
        for m in [1u64, 2, 5] {
            match m.checked_mul(exponent) {
                Some(v) if v <= max => out.push(v as f64),
                _ => return out,
            }
        }
        exponent = match exponent.checked_mul(10) {
            Some(e) => e,
            None => return out,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_two_five_stops_at_max() {
        assert_eq!(one_two_five_buckets(1), vec![1.0]);
        assert_eq!(one_two_five_buckets(60), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
        let b = one_two_five_buckets(8192);
        assert_eq!(b.first(), Some(&1.0));
        assert_eq!(b.last(), Some(&5000.0));
        assert_eq!(b.len(), 12);
        assert_eq!(one_two_five_buckets(0), Vec::<f64>::new());
        assert!(one_two_five_buckets(u64::MAX).len() > 50);
    }

    #[test]
    fn default_buckets_validate_and_bad_ones_name_the_family() {
        assert_eq!(HistogramBuckets::default().validate(), Ok(()));
        let mut b = HistogramBuckets {
            itl: vec![0.1, 0.05],
            ..HistogramBuckets::default()
        };
        let err = b.validate().unwrap_err();
        assert_eq!(err.to_string(), "telemetry.buckets.itl is not strictly increasing");
        b.itl = vec![];
        assert_eq!(b.validate().unwrap_err().family, "itl");
        b.itl = vec![f64::NAN];
        assert_eq!(b.validate().unwrap_err().problem, "has a non-finite value");
    }

    #[test]
    fn buckets_deserialize_from_config() {
        let json = serde_json::to_value(HistogramBuckets::vllm(100)).unwrap();
        let back: HistogramBuckets = serde_json::from_value(json).unwrap();
        assert_eq!(back.token_counts, vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]);
    }
}
