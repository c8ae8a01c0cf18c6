//! `GET /metrics?name[]=…`: the samples a scrape asks for, selected as Prometheus's client
//! libraries select them (Python's `restricted_registry`, which vLLM's `/metrics` serves):
//! by sample name. A gauge's sample is named as its family; a counter's is `…_total`; a
//! histogram's are `…_bucket`, `…_sum` and `…_count`, so a histogram's family name selects
//! nothing. An unknown name selects nothing: the answer is empty.

use std::collections::HashSet;

use prometheus::proto::{MetricFamily, MetricType};

/// The sample names one scrape asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleFilter {
    names: HashSet<String>,
}

impl SampleFilter {
    /// The `name[]` parameters of `query` (a URL query string); `None` when there is none,
    /// and the scrape gets everything.
    pub fn from_query(query: &str) -> Option<Self> {
        let pairs = actix_web::web::Query::<Vec<(String, String)>>::from_query(query).ok()?;
        let names: HashSet<String> = pairs
            .into_inner()
            .into_iter()
            .filter(|(key, _)| key == "name[]")
            .map(|(_, value)| value)
            .collect();
        (!names.is_empty()).then_some(Self { names })
    }

    /// Whether the sample named `name` (`vllm:e2e_request_latency_seconds_count`) is asked for.
    pub fn selects(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// Whether any sample of `family` is asked for (the protobuf answer carries whole
    /// families, so it keeps such a family entire).
    pub fn selects_family(&self, family: &MetricFamily) -> bool {
        sample_names(family).iter().any(|name| self.selects(name))
    }
}

/// The names of `family`'s samples, whatever the format writes them in.
fn sample_names(family: &MetricFamily) -> Vec<String> {
    let name = family.name();
    match family.get_field_type() {
        MetricType::HISTOGRAM => ["_bucket", "_sum", "_count"].map(|s| format!("{name}{s}")).to_vec(),
        MetricType::SUMMARY => ["", "_sum", "_count"].map(|s| format!("{name}{s}")).to_vec(),
        MetricType::COUNTER | MetricType::GAUGE | MetricType::UNTYPED => vec![name.to_owned()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn family(name: &str, kind: MetricType) -> MetricFamily {
        let mut f = MetricFamily::default();
        f.set_name(name.to_owned());
        f.set_field_type(kind);
        f
    }

    #[test]
    fn names_come_from_every_name_parameter_url_encoded_or_not() {
        let f = SampleFilter::from_query("name[]=vllm:num_requests_waiting&name%5B%5D=vllm%3Ae2e_count&x=1")
            .expect("two names");
        assert!(f.selects("vllm:num_requests_waiting"));
        assert!(f.selects("vllm:e2e_count"));
        assert!(!f.selects("x"));
        assert_eq!(SampleFilter::from_query(""), None);
        assert_eq!(
            SampleFilter::from_query("name=vllm:x"),
            None,
            "name without [] is not the filter"
        );
    }

    #[test]
    fn a_histogram_is_selected_by_its_sample_names_not_its_family_name() {
        let hist = family("vllm:e2e_seconds", MetricType::HISTOGRAM);
        let by_family = SampleFilter::from_query("name[]=vllm:e2e_seconds").unwrap();
        assert!(!by_family.selects_family(&hist));
        let by_sample = SampleFilter::from_query("name[]=vllm:e2e_seconds_sum").unwrap();
        assert!(by_sample.selects_family(&hist));
        let counter = family("vllm:prompt_tokens_total", MetricType::COUNTER);
        assert!(
            SampleFilter::from_query("name[]=vllm:prompt_tokens_total")
                .unwrap()
                .selects_family(&counter)
        );
        assert!(
            !SampleFilter::from_query("name[]=vllm:prompt_tokens")
                .unwrap()
                .selects_family(&counter)
        );
    }
}
