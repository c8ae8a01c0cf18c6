//! `--custom-histogram-buckets` (`telemetry.custom_histogram_buckets`): vLLM's per-family
//! override of the classic histogram bounds (vLLM PR #48867, the answer to vLLM issue #34370).
//! The value is vLLM's JSON: an object from a bucket-family key to its replacement bounds,
//! e.g. `{"request_latency": [0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0]}`. A listed family's
//! bounds replace the defaults of every histogram in it; unlisted families keep theirs. Only
//! classic bounds change: native histograms keep their exponential schema.

use std::collections::BTreeMap;

use super::buckets::HistogramBuckets;

/// vLLM's bucket-family keys, each with the histograms it sets (kiln's `HistogramBuckets`).
pub const CUSTOM_BUCKET_FAMILIES: [&str; 8] = [
    // e2e, queue, prefill, decode and inference time.
    "request_latency",
    "time_to_first_token",
    // Inter-token latency and time per output token.
    "inter_token_latency",
    "iteration_tokens",
    "request_params_n",
    "request_num_preemptions",
    // Prompt, generation, max_tokens, max generation and prefill-computed tokens.
    "request_tokens",
    // The KV-block residency histograms (`--kv-cache-metrics`).
    "kv_cache_residency",
];

/// What is wrong with a `--custom-histogram-buckets` value.
#[derive(Debug, thiserror::Error)]
pub enum CustomBucketsError {
    #[error("not a JSON object of bucket-family keys to lists of bounds: {0}")]
    Json(#[from] serde_json::Error),
    #[error("unknown bucket family {key:?} (known: {})", CUSTOM_BUCKET_FAMILIES.join(", "))]
    UnknownFamily { key: String },
    #[error("bucket family {key:?} {problem}")]
    Bounds { key: String, problem: &'static str },
}

/// A parsed, checked override.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CustomHistogramBuckets {
    families: BTreeMap<String, Vec<f64>>,
}

impl CustomHistogramBuckets {
    /// Parses vLLM's JSON; empty means no override. Refuses unknown families and bounds
    /// that are empty, non-finite or not strictly increasing, naming the family.
    pub fn parse(json: &str) -> Result<Self, CustomBucketsError> {
        if json.trim().is_empty() {
            return Ok(Self::default());
        }
        let families: BTreeMap<String, Vec<f64>> = serde_json::from_str(json)?;
        for (key, bounds) in &families {
            if !CUSTOM_BUCKET_FAMILIES.contains(&key.as_str()) {
                return Err(CustomBucketsError::UnknownFamily { key: key.clone() });
            }
            let problem = if bounds.is_empty() {
                Some("is empty")
            } else if bounds.iter().any(|b| !b.is_finite()) {
                Some("has a non-finite bound")
            } else if bounds.windows(2).any(|w| w[0] >= w[1]) {
                Some("is not strictly increasing")
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(CustomBucketsError::Bounds {
                    key: key.clone(),
                    problem,
                });
            }
        }
        Ok(Self { families })
    }

    /// `buckets` with every listed family's bounds replaced.
    pub fn apply(&self, mut buckets: HistogramBuckets) -> HistogramBuckets {
        for (key, bounds) in &self.families {
            let target = match key.as_str() {
                "request_latency" => &mut buckets.request_latency,
                "time_to_first_token" => &mut buckets.ttft,
                "inter_token_latency" => &mut buckets.itl,
                "iteration_tokens" => &mut buckets.iteration_tokens,
                "request_params_n" => &mut buckets.params_n,
                "request_num_preemptions" => &mut buckets.request_num_preemptions,
                "request_tokens" => &mut buckets.token_counts,
                "kv_cache_residency" => &mut buckets.kv_cache_residency,
                // `parse` admits only the keys above.
                _ => continue,
            };
            target.clone_from(bounds);
        }
        buckets
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_family_replaces_its_bounds_and_the_rest_keep_theirs() {
        let custom =
            CustomHistogramBuckets::parse(r#"{"request_latency": [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0]}"#)
                .expect("vLLM's example");
        let defaults = HistogramBuckets::default();
        let b = custom.apply(defaults.clone());
        assert_eq!(b.request_latency, [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0]);
        assert_eq!(b.ttft, defaults.ttft);
        assert_eq!(b.validate(), Ok(()));
        let all = CUSTOM_BUCKET_FAMILIES
            .iter()
            .map(|k| format!("\"{k}\": [1, 2]"))
            .collect::<Vec<_>>()
            .join(", ");
        let b = CustomHistogramBuckets::parse(&format!("{{{all}}}"))
            .unwrap()
            .apply(defaults);
        for family in [
            &b.request_latency,
            &b.ttft,
            &b.itl,
            &b.iteration_tokens,
            &b.params_n,
            &b.request_num_preemptions,
            &b.token_counts,
            &b.kv_cache_residency,
        ] {
            assert_eq!(family, &[1.0, 2.0]);
        }
        assert_eq!(
            CustomHistogramBuckets::parse(" ").unwrap(),
            CustomHistogramBuckets::default()
        );
    }

    #[test]
    fn bad_values_are_refused_naming_the_family() {
        let err = |json: &str| CustomHistogramBuckets::parse(json).unwrap_err().to_string();
        assert!(err(r#"{"ttft": [1]}"#).contains("unknown bucket family \"ttft\""));
        assert!(err(r#"{"request_tokens": [5, 1]}"#).contains("\"request_tokens\" is not strictly increasing"));
        assert!(err(r#"{"request_tokens": []}"#).contains("is empty"));
        assert!(err(r#"[1, 2]"#).starts_with("not a JSON object"));
        assert!(err(r#"{"request_tokens": "1,2"}"#).starts_with("not a JSON object"));
    }
}
