//! The one builder every instrument goes through: its name from the family table (with the
//! engine prefix for engine families, by [`engine_metric_name`]), its unit and description from
//! the spec, its bucket bounds from the configured lists. No instrument is built by hand.
//! Counters and gauges are SDK instruments; histograms are recorded in the
//! [`HistogramStore`] (the one record `/metrics` reads; see its module doc for why).

use std::sync::Arc;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Meter, UpDownCounter};

use super::buckets::HistogramBuckets;
use super::family::{HistogramSpec, Spec, engine_metric_name};
use super::histogram_store::{ExemplarHistogram, Histogram, HistogramStore, LatencyHistogram, Observed};

/// What the instruments depend on besides the meter.
#[derive(Debug, Clone)]
pub struct InstrumentsConfig<'a> {
    pub engine_prefix: &'a str,
    pub model_name: &'a str,
    pub buckets: &'a HistogramBuckets,
    pub kv_cache_metrics: bool,
    pub mfu_metrics: bool,
    /// Engines (`--data-parallel-size`): each engine family has a series per engine.
    pub engines: usize,
}

/// Builds instruments named under one prefix: the engine prefix, or none ([`Self::unprefixed`])
/// for the `kiln_*`, GenAI and HTTP families.
#[derive(Clone, Copy)]
pub struct InstrumentBuilder<'a> {
    meter: &'a Meter,
    cfg: &'a InstrumentsConfig<'a>,
    prefix: &'a str,
    /// Where every histogram is recorded.
    store: &'a Arc<HistogramStore>,
    /// The label sets (one per engine) each histogram declares its series with, exposed at
    /// zero from start; `None` for families whose labels come with traffic.
    initial: Option<&'a [[KeyValue; 2]]>,
}

impl<'a> InstrumentBuilder<'a> {
    pub fn new(meter: &'a Meter, cfg: &'a InstrumentsConfig<'a>, store: &'a Arc<HistogramStore>) -> Self {
        Self {
            meter,
            cfg,
            prefix: cfg.engine_prefix,
            store,
            initial: None,
        }
    }

    /// The same builder for families whose names take no engine prefix.
    pub fn unprefixed(self) -> Self {
        Self { prefix: "", ..self }
    }

    /// The same builder, its histograms' series with each of `labels` exposed from start at zero.
    pub fn with_initial_series(self, store: &'a Arc<HistogramStore>, labels: &'a [[KeyValue; 2]]) -> Self {
        Self {
            store,
            initial: Some(labels),
            ..self
        }
    }

    /// The same builder for families whose labels come with traffic: nothing from start.
    pub fn without_initial_series(self) -> Self {
        Self { initial: None, ..self }
    }

    pub fn config(&self) -> &'a InstrumentsConfig<'a> {
        self.cfg
    }

    fn name(&self, s: &Spec) -> String {
        engine_metric_name(self.prefix, s.name)
    }

    pub fn gauge_u64(&self, s: Spec) -> Gauge<u64> {
        let b = self.meter.u64_gauge(self.name(&s));
        b.with_unit(s.unit).with_description(s.description).build()
    }

    pub fn gauge_f64(&self, s: Spec) -> Gauge<f64> {
        let b = self.meter.f64_gauge(self.name(&s));
        b.with_unit(s.unit).with_description(s.description).build()
    }

    pub fn counter(&self, s: Spec) -> Counter<u64> {
        let b = self.meter.u64_counter(self.name(&s));
        b.with_unit(s.unit).with_description(s.description).build()
    }

    pub fn counter_f64(&self, s: Spec) -> Counter<f64> {
        let b = self.meter.f64_counter(self.name(&s));
        b.with_unit(s.unit).with_description(s.description).build()
    }

    pub fn up_down_counter(&self, s: Spec) -> UpDownCounter<i64> {
        let b = self.meter.i64_up_down_counter(self.name(&s));
        b.with_unit(s.unit).with_description(s.description).build()
    }

    /// A histogram over its family's configured buckets.
    pub fn histogram_f64(&self, h: HistogramSpec) -> Histogram<f64> {
        self.histogram_f64_with(h.spec, &self.cfg.buckets.bounds(h.buckets))
    }

    pub fn histogram_u64(&self, h: HistogramSpec) -> Histogram<u64> {
        self.histogram_u64_with(h.spec, &self.cfg.buckets.bounds(h.buckets))
    }

    /// A histogram over fixed bounds (families whose buckets are not configurable).
    pub fn histogram_f64_with(&self, s: Spec, bounds: &[f64]) -> Histogram<f64> {
        self.histogram(s, bounds, false)
    }

    pub fn histogram_u64_with(&self, s: Spec, bounds: &[f64]) -> Histogram<u64> {
        self.histogram(s, bounds, false)
    }

    /// A latency histogram over its family's configured buckets, with native buckets and
    /// exemplars; `store` is the builder's own (kept in the signature for the callers).
    pub fn latency_histogram(&self, h: HistogramSpec, store: &Arc<HistogramStore>) -> LatencyHistogram {
        self.latency_histogram_with(h.spec, &self.cfg.buckets.bounds(h.buckets), store)
    }

    /// A latency histogram over fixed bounds, with native buckets and exemplars.
    pub fn latency_histogram_with(&self, s: Spec, bounds: &[f64], store: &Arc<HistogramStore>) -> LatencyHistogram {
        debug_assert!(Arc::ptr_eq(store, self.store), "one store per set of instruments");
        LatencyHistogram::new(self.histogram(s, bounds, true))
    }

    /// The one place a histogram is built: its family in the store, its series declared at
    /// zero where this builder knows their labels.
    fn histogram<T: Observed>(&self, s: Spec, bounds: &[f64], native: bool) -> Histogram<T> {
        let name = self.name(&s);
        let family = ExemplarHistogram::described(&name, s.unit, s.description, bounds.to_vec(), native);
        for labels in self.initial.unwrap_or_default() {
            self.store.declare(&family, labels);
        }
        Histogram::new(family, self.store.clone())
    }
}
