//! The store as a `prometheus` `Collector`: every histogram series as a classic histogram
//! family, gathered by the registry beside the SDK's counters and gauges, so each exposition
//! (text, OpenMetrics, protobuf) reads the one record. Written as the OpenTelemetry exporter
//! wrote histograms: a bucket per bound (cumulative, `+Inf` left to the encoders), sum, count,
//! labels sorted by name; the registry sorts families and series.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError};

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Bucket, Histogram, LabelPair, Metric, MetricFamily, MetricType};

use super::{HistogramStore, RecordedSeries};

/// Registered once per registry; its one descriptor only gives the collector an identity
/// (the registry tells collectors apart by their descriptors).
pub struct StoreCollector {
    store: Arc<HistogramStore>,
    desc: Desc,
}

impl StoreCollector {
    pub fn new(store: Arc<HistogramStore>) -> Self {
        let desc = Desc::new(
            "kiln_histogram_store".to_owned(),
            "Every histogram kiln records.".to_owned(),
            Vec::new(),
            Default::default(),
        )
        .expect("a valid constant name");
        Self { store, desc }
    }
}

impl Collector for StoreCollector {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let inner = self.store.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let mut families: BTreeMap<&str, MetricFamily> = BTreeMap::new();
        for series in &inner.series {
            let family = families.entry(&series.histogram.family).or_insert_with(|| {
                let mut f = MetricFamily::default();
                f.set_name(series.histogram.family.to_string());
                f.set_help(series.histogram.help.to_string());
                f.set_field_type(MetricType::HISTOGRAM);
                f
            });
            family.mut_metric().push(metric(series));
        }
        families.into_values().collect()
    }
}

fn metric(series: &RecordedSeries) -> Metric {
    let labels = series
        .key
        .iter()
        .map(|(name, value)| {
            let mut pair = LabelPair::default();
            pair.set_name(name.clone());
            pair.set_value(value.clone());
            pair
        })
        .collect();
    let classic = &series.state.classic;
    let mut cumulative = 0;
    let buckets = series
        .histogram
        .bounds
        .iter()
        .zip(&classic.counts)
        .map(|(&bound, &count)| {
            cumulative += count;
            let mut bucket = Bucket::default();
            bucket.set_upper_bound(bound);
            bucket.set_cumulative_count(cumulative);
            bucket
        })
        .collect();
    let mut histogram = Histogram::default();
    histogram.set_sample_sum(classic.sum);
    histogram.set_sample_count(classic.count);
    histogram.set_bucket(buckets);
    let mut metric = Metric::from_label(labels);
    metric.set_histogram(histogram);
    metric
}
