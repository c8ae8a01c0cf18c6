//! The one record of every histogram kiln exposes: per series, its classic bucket counts, sum
//! and count, and for a latency histogram its native (sparse exponential) buckets and the
//! latest exemplar of each classic bucket. The store is a `Collector` in the
//! `prometheus::Registry` ([`collector`]), so the text, OpenMetrics and protobuf expositions
//! read the classic histograms from it, and `/metrics` reads a snapshot of the rest: exemplars
//! in OpenMetrics and protobuf, native buckets in protobuf. Series declared at start are store
//! series at zero, exposed before their first observation (vLLM registers them at start).
//!
//! Why not the OpenTelemetry SDK's histogram (docs/09, "One record per fact"): it cannot carry
//! what this store keeps, and cannot take a histogram aggregated outside it.
//! - Exemplars: its aggregators always export `exemplars: vec![]` (no reservoir in 0.33).
//! - Native buckets at kiln's schema: its `Base2ExponentialHistogram` aggregation is chosen per
//!   meter provider (views), not per reader, and `opentelemetry-prometheus` drops exponential
//!   histograms, so one provider cannot serve both classic `/metrics` and exponential buckets.
//! - Feeding it: 0.33 has no public `MetricProducer` (its `SdkProducer` is crate-private), no
//!   observable histogram, and its data points (`HistogramDataPoint`, `ResourceMetrics`) have
//!   crate-private fields and no constructors; the OTLP reader exports only what SDK
//!   instruments recorded.
//! - Every reader of a provider aggregates separately: one `record` on an instrument with the
//!   Prometheus and an OTLP reader updates two aggregators.
//!
//! So histograms are not SDK instruments here; counters and gauges are. OTLP push reads this
//! store too ([`HistogramStore::export`]): kiln's own metric exporter appends its series to the
//! SDK's counters and gauges (`otlp_push`), so one observation is one recording in every setup.
//!
//! Recording finds a series by hashing the attributes as given (no allocation, no string
//! building); the exposed key is built once per series. Memory is fixed by label cardinality:
//! per series, a count per classic bucket, one exemplar slot per bucket (overwritten by the
//! next traced observation in it) and at most
//! [`MAX_BUCKETS`](super::native_buckets::MAX_BUCKETS) native buckets.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::{KeyValue, Value};
use prometheus::proto::LabelPair;

use super::native_buckets::NativeBuckets;
use crate::engine::trace_context::TraceContext;

/// A traced observation that stands for its bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Exemplar {
    pub trace: TraceContext,
    pub value: f64,
    /// When it was observed, Unix seconds.
    pub timestamp_s: f64,
}

/// A histogram family as the store knows it: its exposed name, help, bucket bounds, and
/// whether it is a latency histogram (native buckets and exemplars beside the classic ones).
#[derive(Debug, Clone)]
pub struct ExemplarHistogram {
    family: Arc<str>,
    /// The instrument's name and unit as declared (what OTLP push sends).
    name: Arc<str>,
    unit: Arc<str>,
    help: Arc<str>,
    bounds: Arc<[f64]>,
    native: bool,
}

impl ExemplarHistogram {
    /// `name` and `unit` as the family table declares them; the family is named as the
    /// OpenTelemetry Prometheus exporter named it (invalid characters become `_`, unit `s`
    /// adds `_seconds`, `By` adds `_bytes`, `{annotations}` add nothing), so every exposed
    /// name stays what it was. A latency histogram, no help.
    pub fn new(name: &str, unit: &str, bounds: Vec<f64>) -> Self {
        Self::described(name, unit, "", bounds, true)
    }

    /// [`Self::new`] with its help text, native (a latency histogram) or classic only.
    pub fn described(name: &str, unit: &str, help: &str, bounds: Vec<f64>, native: bool) -> Self {
        let mut family = sanitize(name, true);
        match unit {
            "s" => family.push_str("_seconds"),
            "By" => family.push_str("_bytes"),
            _ => {}
        }
        Self {
            family: family.into(),
            name: name.into(),
            unit: unit.into(),
            help: help.into(),
            bounds: bounds.into(),
            native,
        }
    }

    pub fn family(&self) -> &str {
        &self.family
    }

    /// The declared name, e.g. `vllm:time_to_first_token` (the exposed family adds `_seconds`).
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn unit(&self) -> &str {
        &self.unit
    }

    pub fn help(&self) -> &str {
        &self.help
    }

    /// The classic buckets' upper bounds, `+Inf` left out.
    pub fn bounds(&self) -> &[f64] {
        &self.bounds
    }
}

/// A series' classic buckets: a count per bound plus `+Inf` (not cumulative), sum and count.
#[derive(Debug, Clone, Default)]
pub struct ClassicBuckets {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl ClassicBuckets {
    /// Buckets made of their parts (a delta between two copies of a series).
    pub(crate) fn from_parts(counts: Vec<u64>, sum: f64, count: u64) -> Self {
        Self { counts, sum, count }
    }

    /// Observations per bucket, the last one `+Inf` (not cumulative).
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    pub fn sum(&self) -> f64 {
        self.sum
    }

    pub fn count(&self) -> u64 {
        self.count
    }
}

/// The exemplars of one series: a slot per bound, the last one for `+Inf`.
#[derive(Debug, Clone)]
pub struct SeriesExemplars {
    bounds: Arc<[f64]>,
    slots: Vec<Option<Exemplar>>,
}

impl SeriesExemplars {
    /// The exemplar of the bucket whose upper bound is `le`.
    pub fn for_bucket(&self, le: f64) -> Option<&Exemplar> {
        let index = if le == f64::INFINITY {
            self.bounds.len()
        } else {
            self.bounds.iter().position(|b| *b == le)?
        };
        self.slots.get(index)?.as_ref()
    }

    /// Each classic bucket's exemplar, the last one `+Inf`'s.
    pub fn slots(&self) -> &[Option<Exemplar>] {
        &self.slots
    }

    /// Index of the bucket `value` lands in: the first bound ≥ value, else `+Inf`.
    fn bucket_of(&self, value: f64) -> usize {
        self.bounds.partition_point(|b| *b < value)
    }
}

/// Everything kept for one series.
#[derive(Debug, Clone)]
pub struct SeriesState {
    pub classic: ClassicBuckets,
    pub exemplars: SeriesExemplars,
    pub native: NativeBuckets,
}

/// Label pairs as exposed (names sanitized), sorted by name: a series' identity.
type LabelKey = Vec<(String, String)>;

/// A copy of every latency series' state, read by the encoders without holding the store's
/// lock (the classic-only families reach them through the gather).
#[derive(Debug, Clone, Default)]
pub struct HistogramSnapshot {
    families: HashMap<Arc<str>, HashMap<LabelKey, SeriesState>>,
}

impl HistogramSnapshot {
    /// The state of family `family`'s series with exactly `labels`, if it was observed.
    pub fn series(&self, family: &str, labels: &[LabelPair]) -> Option<&SeriesState> {
        let series = self.families.get(family)?;
        let mut key: LabelKey = labels
            .iter()
            .map(|p| (p.name().to_owned(), p.value().to_owned()))
            .collect();
        key.sort();
        series.get(&key)
    }

    /// How many series were observed (bounded by label cardinality).
    pub fn series_count(&self) -> usize {
        self.families.values().map(HashMap::len).sum()
    }
}

/// One series: its family, its exposed key, its attributes as first recorded, and its state.
#[derive(Debug)]
struct RecordedSeries {
    histogram: ExemplarHistogram,
    key: LabelKey,
    attributes: Vec<KeyValue>,
    state: SeriesState,
}

/// One series as OTLP push reads it: its family, its attributes (names as recorded, not
/// sanitized) and a copy of its state.
#[derive(Debug, Clone)]
pub struct ExportedSeries {
    pub histogram: ExemplarHistogram,
    pub attributes: Vec<KeyValue>,
    pub state: SeriesState,
}

/// A way one series is recorded: its family and attributes in the caller's order (two orders
/// of the same attributes are two aliases of one series).
#[derive(Debug)]
struct Alias {
    family: Arc<str>,
    attributes: Vec<KeyValue>,
    slot: usize,
}

/// The store's state: every series once, and an index from the hash of (family, attributes
/// as recorded) to the aliases with that hash. An observation finds its series by hashing and
/// comparing the attributes it came with, without allocating; the exposed key (sanitized
/// names, sorted) is built once per alias, not once per observation.
#[derive(Debug, Default)]
struct Inner {
    series: Vec<RecordedSeries>,
    index: HashMap<u64, Vec<Alias>>,
}

/// Shared between the stats actor (writes) and `/metrics` (gathers and snapshots).
#[derive(Debug, Default)]
pub struct HistogramStore {
    inner: Mutex<Inner>,
    /// On with exponential OTLP push: every family keeps native buckets (pushed as
    /// exponential points), not only the latency ones (`/metrics` still shows only theirs).
    native_for_all: AtomicBool,
}

impl HistogramStore {
    /// Declares `histogram`'s series with `labels`, exposed with zero counts from now on
    /// (a latency histogram as a native histogram too).
    pub fn declare(&self, histogram: &ExemplarHistogram, labels: &[KeyValue]) {
        self.series_mut(histogram, labels, |_| ());
    }

    /// Keeps native buckets for every family from now on (exponential OTLP push).
    pub(crate) fn keep_native_for_all(&self) {
        self.native_for_all.store(true, Ordering::Relaxed);
    }

    /// Runs `f` on the state of `histogram`'s series with `labels`, created empty if new.
    fn series_mut(&self, histogram: &ExemplarHistogram, labels: &[KeyValue], f: impl FnOnce(&mut SeriesState)) {
        let hash = series_hash(&histogram.family, labels);
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let Inner { series, index } = &mut *inner;
        let aliases = index.entry(hash).or_default();
        let found = aliases
            .iter()
            .find(|a| *a.family == *histogram.family && a.attributes == labels)
            .map(|a| a.slot);
        let slot = match found {
            Some(slot) => slot,
            None => {
                let mut key: LabelKey = labels
                    .iter()
                    .map(|kv| (sanitize(kv.key.as_str(), false), kv.value.as_str().into_owned()))
                    .collect();
                key.sort();
                let existing = series
                    .iter()
                    .position(|s| *s.histogram.family == *histogram.family && s.key == key);
                let slot = existing.unwrap_or_else(|| {
                    series.push(RecordedSeries {
                        histogram: histogram.clone(),
                        key,
                        attributes: labels.to_vec(),
                        state: SeriesState {
                            classic: ClassicBuckets {
                                counts: vec![0; histogram.bounds.len() + 1],
                                ..ClassicBuckets::default()
                            },
                            exemplars: SeriesExemplars {
                                bounds: histogram.bounds.clone(),
                                slots: vec![None; histogram.bounds.len() + 1],
                            },
                            native: NativeBuckets::default(),
                        },
                    });
                    series.len() - 1
                });
                aliases.push(Alias {
                    family: histogram.family.clone(),
                    attributes: labels.to_vec(),
                    slot,
                });
                slot
            }
        };
        f(&mut series[slot].state);
    }

    /// Adds `value` to the classic buckets of `histogram`'s series with `labels` (the
    /// attributes the observation was recorded with), and for a latency histogram to its
    /// native buckets and, for a traced observation, as the exemplar of its classic bucket.
    pub fn record(&self, histogram: &ExemplarHistogram, labels: &[KeyValue], value: f64, trace: Option<TraceContext>) {
        if value.is_nan() {
            return;
        }
        let native = histogram.native || self.native_for_all.load(Ordering::Relaxed);
        self.series_mut(histogram, labels, |series| Self::observe(series, value, native, trace));
    }

    fn observe(series: &mut SeriesState, value: f64, native: bool, trace: Option<TraceContext>) {
        let bucket = series.exemplars.bucket_of(value);
        let classic = &mut series.classic;
        classic.counts[bucket] += 1;
        classic.sum += value;
        classic.count += 1;
        if !native {
            return;
        }
        series.native.observe(value);
        if let Some(trace) = trace {
            let timestamp_s = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            series.exemplars.slots[bucket] = Some(Exemplar {
                trace,
                value,
                timestamp_s,
            });
        }
    }

    /// A consistent copy of the latency series for one `/metrics` answer.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let mut snapshot = HistogramSnapshot::default();
        for s in inner.series.iter().filter(|s| s.histogram.native) {
            snapshot
                .families
                .entry(s.histogram.family.clone())
                .or_default()
                .insert(s.key.clone(), s.state.clone());
        }
        snapshot
    }

    /// A copy of every series, in the order they were created, for an OTLP export.
    pub fn export(&self) -> Vec<ExportedSeries> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner
            .series
            .iter()
            .map(|s| ExportedSeries {
                histogram: s.histogram.clone(),
                attributes: s.attributes.clone(),
                state: s.state.clone(),
            })
            .collect()
    }
}

/// The index hash of one series as recorded: its family and its attributes in order. Values
/// are hashed by variant without formatting (no allocation on the recording path).
fn series_hash(family: &str, labels: &[KeyValue]) -> u64 {
    let mut h = DefaultHasher::new();
    family.hash(&mut h);
    for kv in labels {
        kv.key.as_str().hash(&mut h);
        match &kv.value {
            Value::Bool(b) => b.hash(&mut h),
            Value::I64(i) => i.hash(&mut h),
            Value::F64(f) => f.to_bits().hash(&mut h),
            Value::String(s) => s.as_str().hash(&mut h),
            other => other.as_str().hash(&mut h),
        }
    }
    h.finish()
}

/// A value a histogram takes: token counts and byte sizes (`u64`) or seconds (`f64`).
pub trait Observed: Copy {
    fn as_f64(self) -> f64;
}

impl Observed for u64 {
    fn as_f64(self) -> f64 {
        self as f64
    }
}

impl Observed for f64 {
    fn as_f64(self) -> f64 {
        self
    }
}

/// A histogram recorded once, in the store (`/metrics` and OTLP push read it there).
pub struct Histogram<T> {
    family: ExemplarHistogram,
    store: Arc<HistogramStore>,
    value: PhantomData<fn(T)>,
}

impl<T: Observed> Histogram<T> {
    pub fn new(family: ExemplarHistogram, store: Arc<HistogramStore>) -> Self {
        Self {
            family,
            store,
            value: PhantomData,
        }
    }

    pub fn record(&self, value: T, labels: &[KeyValue]) {
        self.record_traced(value.as_f64(), labels, None);
    }

    fn record_traced(&self, value: f64, labels: &[KeyValue], trace: Option<TraceContext>) {
        self.store.record(&self.family, labels, value, trace);
    }
}

/// A latency histogram: one call records the observation in its classic and native buckets
/// and, for a traced request, as its bucket's exemplar.
pub struct LatencyHistogram(Histogram<f64>);

impl LatencyHistogram {
    pub fn new(histogram: Histogram<f64>) -> Self {
        Self(histogram)
    }

    pub fn record(&self, value: f64, labels: &[KeyValue], trace: Option<TraceContext>) {
        self.0.record_traced(value, labels, trace);
    }
}

/// Prometheus names allow `[a-zA-Z0-9_:]` (labels: no `:`); the exporter turns anything
/// else (the semantic conventions' dots) into `_`.
fn sanitize(name: &str, colons: bool) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || (colons && c == ':') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

mod collector;
pub use collector::StoreCollector;

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(n: u8) -> TraceContext {
        TraceContext {
            trace_id: [n; 16],
            span_id: [n; 8],
        }
    }

    fn label(name: &str, value: &str) -> LabelPair {
        let mut p = LabelPair::default();
        p.set_name(name.to_owned());
        p.set_value(value.to_owned());
        p
    }

    #[test]
    fn names_are_the_exposed_ones() {
        let h = ExemplarHistogram::new("gen_ai.server.time_to_first_token", "s", vec![1.0]);
        assert_eq!(h.family(), "gen_ai_server_time_to_first_token_seconds");
        let h = ExemplarHistogram::new("vllm:time_to_first_token", "s", vec![1.0]);
        assert_eq!(h.family(), "vllm:time_to_first_token_seconds");
    }

    #[test]
    fn each_observation_lands_in_its_bucket_and_the_latest_wins() {
        let store = HistogramStore::default();
        let h = ExemplarHistogram::new("vllm:e2e", "s", vec![0.5, 1.0, 2.0]);
        let labels = [KeyValue::new("model_name", "m"), KeyValue::new("engine", "0")];
        let key = [label("engine", "0"), label("model_name", "m")];
        store.record(&h, &labels, 1.0, Some(trace(2))); // on a bound: that bucket (le is inclusive)
        let first = store.snapshot();
        let on_bound = first
            .series("vllm:e2e_seconds", &key)
            .unwrap()
            .exemplars
            .for_bucket(1.0);
        assert_eq!(on_bound.map(|e| e.trace), Some(trace(2)));
        store.record(&h, &labels, 0.9, Some(trace(3))); // replaces trace 2 in (0.5, 1.0]
        store.record(&h, &labels, 1.5, Some(trace(1)));
        store.record(&h, &labels, 1.6, None); // untraced: native buckets only
        store.record(&h, &labels, 9.0, Some(trace(4)));
        let snapshot = store.snapshot();
        // The encoder's label order (sorted by the exporter) finds the series.
        let state = snapshot.series("vllm:e2e_seconds", &key).expect("series");
        assert_eq!(state.native.count(), 5, "every observation, traced or not");
        assert!((state.native.sum() - 14.0).abs() < 1e-9);
        let series = &state.exemplars;
        assert_eq!(series.for_bucket(0.5), None);
        let in_one = series.for_bucket(1.0).unwrap();
        assert_eq!((in_one.trace, in_one.value), (trace(3), 0.9));
        assert!(in_one.timestamp_s > 1.7e9, "{}", in_one.timestamp_s);
        assert_eq!(
            series.for_bucket(2.0).unwrap().trace,
            trace(1),
            "the untraced 1.6 replaces nothing"
        );
        assert_eq!(series.for_bucket(f64::INFINITY).unwrap().value, 9.0);
        assert_eq!(series.for_bucket(3.0), None, "not a bound");
        assert!(snapshot.series("vllm:e2e_seconds", &[label("engine", "0")]).is_none());
    }

    #[test]
    fn one_series_whatever_the_attribute_order() {
        let store = HistogramStore::default();
        let h = ExemplarHistogram::new("vllm:ttft", "s", vec![1.0]);
        let (m, e) = (KeyValue::new("model_name", "m"), KeyValue::new("engine", "0"));
        store.record(&h, &[m.clone(), e.clone()], 0.5, None);
        store.record(&h, &[e.clone(), m.clone()], 0.7, Some(trace(5)));
        store.record(&h, &[m.clone(), e.clone()], 2.0, None);
        // Another value of a label is another series; an integer value is hashed as one.
        store.record(&h, &[KeyValue::new("code", 200_i64)], 0.1, None);
        store.record(&h, &[KeyValue::new("code", 500_i64)], 0.1, None);
        let snapshot = store.snapshot();
        assert_eq!(snapshot.series_count(), 3);
        let key = [label("engine", "0"), label("model_name", "m")];
        let state = snapshot.series("vllm:ttft_seconds", &key).expect("series");
        assert_eq!(state.native.count(), 3);
        assert_eq!(state.exemplars.for_bucket(1.0).map(|x| x.trace), Some(trace(5)));
        let ok = snapshot.series("vllm:ttft_seconds", &[label("code", "200")]).unwrap();
        assert_eq!(ok.native.count(), 1);
        // The push copy keeps the attributes as first recorded, names unsanitized.
        let exported = store.export();
        assert_eq!(exported.len(), 3);
        assert_eq!(exported[0].attributes, [m, e]);
        assert_eq!(exported[0].histogram.name(), "vllm:ttft");
        assert_eq!(exported[0].state.classic.count(), 3);
    }

    #[test]
    fn memory_is_bounded_by_series_not_by_observations() {
        let store = HistogramStore::default();
        let h = ExemplarHistogram::new("gen_ai.server.request.duration", "s", vec![0.1, 1.0]);
        for i in 0..10_000u32 {
            let op = if i % 2 == 0 { "chat" } else { "text_completion" };
            let labels = [KeyValue::new("gen_ai.operation.name", op)];
            store.record(&h, &labels, f64::from(i % 7) * 0.3, Some(trace((i % 250) as u8)));
        }
        let snapshot = store.snapshot();
        assert_eq!(snapshot.series_count(), 2);
        let chat = snapshot
            .series(
                "gen_ai_server_request_duration_seconds",
                &[label("gen_ai_operation_name", "chat")],
            )
            .unwrap();
        assert_eq!(chat.exemplars.slots.len(), 3);
        assert!(
            chat.native.positive_buckets().count() <= 7,
            "one native bucket per distinct value"
        );
    }

    /// The text `/metrics` writes for `store`, gathered through a registry as `/metrics` does.
    fn exposed(store: &Arc<HistogramStore>) -> String {
        use crate::stats::exposition::{ExpositionFormat, encode};
        let registry = prometheus::Registry::new();
        registry.register(Box::new(StoreCollector::new(store.clone()))).unwrap();
        encode(&registry.gather(), ExpositionFormat::PrometheusText, &store.snapshot())
    }

    #[test]
    fn a_declared_series_shows_at_zero_until_observed_and_then_only_once() {
        let store = Arc::new(HistogramStore::default());
        let e2e = ExemplarHistogram::described("vllm:e2e", "s", "End to end.", vec![0.5, 1.0], true);
        let labels = [KeyValue::new("model_name", "m"), KeyValue::new("engine", "0")];
        store.declare(&e2e, &labels);
        assert_eq!(
            exposed(&store),
            "# HELP vllm:e2e_seconds End to end.\n\
             # TYPE vllm:e2e_seconds histogram\n\
             vllm:e2e_seconds_bucket{engine=\"0\",model_name=\"m\",le=\"0.5\"} 0\n\
             vllm:e2e_seconds_bucket{engine=\"0\",model_name=\"m\",le=\"1.0\"} 0\n\
             vllm:e2e_seconds_bucket{engine=\"0\",model_name=\"m\",le=\"+Inf\"} 0\n\
             vllm:e2e_seconds_sum{engine=\"0\",model_name=\"m\"} 0\n\
             vllm:e2e_seconds_count{engine=\"0\",model_name=\"m\"} 0\n"
        );
        // Observed in another attribute order: the same series, counted once.
        store.record(&e2e, &[labels[1].clone(), labels[0].clone()], 0.7, None);
        store.record(&e2e, &labels, 3.0, None);
        let text = exposed(&store);
        assert!(text.contains("vllm:e2e_seconds_bucket{engine=\"0\",model_name=\"m\",le=\"0.5\"} 0\n"));
        assert!(text.contains("vllm:e2e_seconds_bucket{engine=\"0\",model_name=\"m\",le=\"1.0\"} 1\n"));
        assert!(text.contains("vllm:e2e_seconds_bucket{engine=\"0\",model_name=\"m\",le=\"+Inf\"} 2\n"));
        assert!(text.contains("vllm:e2e_seconds_sum{engine=\"0\",model_name=\"m\"} 3.7\n"));
        assert!(text.contains("vllm:e2e_seconds_count{engine=\"0\",model_name=\"m\"} 2\n"));
        assert_eq!(text.matches("_count{").count(), 1, "{text}");
    }

    #[test]
    fn families_are_sorted_and_a_classic_family_has_no_native_state() {
        let store = Arc::new(HistogramStore::default());
        let tokens = ExemplarHistogram::described(
            "vllm:request_prompt_tokens",
            "{token}",
            "Prompt.",
            vec![1.0, 10.0],
            false,
        );
        let body = ExemplarHistogram::described("http.server.request.body.size", "By", "Body.", vec![], false);
        let ttft = ExemplarHistogram::described("vllm:ttft", "s", "TTFT.", vec![1.0], true);
        for engine in ["1", "0"] {
            store.record(&tokens, &[KeyValue::new("engine", engine)], 5.0, Some(trace(1)));
        }
        store.record(&body, &[KeyValue::new("http.route", "/v1")], 120.0, None);
        store.record(&ttft, &[], 0.5, Some(trace(2)));
        let text = exposed(&store);
        let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE")).collect();
        assert_eq!(
            types,
            [
                "# TYPE http_server_request_body_size_bytes histogram",
                "# TYPE vllm:request_prompt_tokens histogram",
                "# TYPE vllm:ttft_seconds histogram",
            ]
        );
        // No bound but +Inf: the encoder writes it from the count.
        assert!(text.contains("http_server_request_body_size_bytes_bucket{http_route=\"/v1\",le=\"+Inf\"} 1\n"));
        let engine0 = text.find("vllm:request_prompt_tokens_bucket{engine=\"0\"").unwrap();
        let engine1 = text.find("vllm:request_prompt_tokens_bucket{engine=\"1\"").unwrap();
        assert!(engine0 < engine1, "series sorted by label value");
        let snapshot = store.snapshot();
        assert!(
            snapshot
                .series("vllm:request_prompt_tokens", &[label("engine", "0")])
                .is_none()
        );
        assert_eq!(snapshot.series("vllm:ttft_seconds", &[]).unwrap().native.count(), 1);
        assert_eq!(snapshot.series_count(), 1, "only latency series carry native state");
    }
}
