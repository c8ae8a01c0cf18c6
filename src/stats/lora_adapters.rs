//! kiln's per-adapter families (`kiln_lora_*`, METRICS.md "LoRA adapters"): requests running
//! and waiting, prompt and generated tokens, time to first token and end-to-end latency, each
//! with `lora_name` (`""` for the base model) beside the engine labels, so that summed over
//! `lora_name` they equal the engine families without it; and the run-time adapter changes.
//!
//! Recorded only with `--enable-lora` (a step whose `SchedulerStats::lora` is set). An
//! adapter's series start at zero the first time an engine reports it served (at start for
//! the `--lora-modules`, at its load for one loaded at run time). An unloaded adapter's
//! series stay: its counters and histograms keep their totals (so the sums still equal the
//! unlabelled families, and `rate()` does not see a counter vanish) and its gauges drop to
//! 0. `--max-cpu-loras` bounds the adapters served at once; the names ever served since
//! start bound the series.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

use actix::Message;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge};

use super::builder::InstrumentBuilder;
use super::data::{IterationStats, SchedulerStats};
use super::family::{HistogramSpec, Spec, engine_metric_name, lora};
use super::histogram_store::{ExemplarHistogram, HistogramStore, LatencyHistogram};

/// The outcome of one `POST /v1/load_lora_adapter` or `/v1/unload_lora_adapter`
/// (`kiln_lora_adapter_loads_total{result}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdapterChange {
    Loaded,
    /// A load refused: the adapter did not read or fit, or the name or the limit refused it.
    Failed,
    Unloaded,
}

impl AdapterChange {
    fn as_str(self) -> &'static str {
        match self {
            Self::Loaded => "loaded",
            Self::Failed => "failed",
            Self::Unloaded => "unloaded",
        }
    }
}

/// A run-time adapter change, sent by the load and unload endpoints.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct RecordAdapterChange {
    pub change: AdapterChange,
    /// Seconds spent reading and installing the adapter; `None` when nothing was read.
    pub load_seconds: Option<f64>,
}

/// A histogram and what declaring one of its series needs.
struct Declarable {
    histogram: LatencyHistogram,
    series: ExemplarHistogram,
}

impl Declarable {
    fn new(b: &InstrumentBuilder<'_>, s: Spec, bounds: &[f64], store: &Arc<HistogramStore>) -> Self {
        Self {
            histogram: b.latency_histogram_with(s, bounds, store),
            series: ExemplarHistogram::described(
                &engine_metric_name("", s.name),
                s.unit,
                s.description,
                bounds.to_vec(),
                true,
            ),
        }
    }

    fn from_family(b: &InstrumentBuilder<'_>, h: HistogramSpec, store: &Arc<HistogramStore>) -> Self {
        Self::new(b, h.spec, &b.config().buckets.bounds(h.buckets), store)
    }
}

/// What the families have seen: adapter names by id (ids are never reused) and, per
/// engine, the adapters whose series exist.
#[derive(Default)]
struct Seen {
    names: BTreeMap<u32, Arc<str>>,
    series: BTreeSet<(usize, Option<u32>)>,
    changes_declared: bool,
}

pub(super) struct LoraAdapterInstruments {
    requests: Gauge<u64>,
    prompt_tokens: Counter<u64>,
    generation_tokens: Counter<u64>,
    time_to_first_token: Declarable,
    e2e_request_latency: Declarable,
    changes: Counter<u64>,
    load_time: Declarable,
    store: Arc<HistogramStore>,
    seen: Mutex<Seen>,
}

impl LoraAdapterInstruments {
    /// `b` builds without initial series: these are declared when LoRA is first reported.
    pub(super) fn new(b: &InstrumentBuilder<'_>, store: &Arc<HistogramStore>) -> Self {
        Self {
            requests: b.gauge_u64(lora::REQUESTS),
            prompt_tokens: b.counter(lora::PROMPT_TOKENS),
            generation_tokens: b.counter(lora::GENERATION_TOKENS),
            time_to_first_token: Declarable::from_family(b, lora::TIME_TO_FIRST_TOKEN, store),
            e2e_request_latency: Declarable::from_family(b, lora::E2E_REQUEST_LATENCY, store),
            changes: b.counter(lora::ADAPTER_LOADS),
            load_time: Declarable::new(b, lora::ADAPTER_LOAD_TIME, &lora::ADAPTER_LOAD_BUCKETS, store),
            store: store.clone(),
            seen: Mutex::new(Seen::default()),
        }
    }

    /// One step of engine `index` (labels `model`); nothing without LoRA.
    pub(super) fn record_step(&self, index: usize, model: &[KeyValue; 2], s: &SchedulerStats, it: &IterationStats) {
        let Some(load) = &s.lora else {
            return;
        };
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if !seen.changes_declared {
            seen.changes_declared = true;
            for result in lora::CHANGE_RESULTS {
                self.changes
                    .add(0, &[model[0].clone(), KeyValue::new("result", result)]);
            }
            self.declare(&self.load_time, &model[..1]);
        }
        for (id, name) in &load.adapters {
            seen.names.entry(*id).or_insert_with(|| Arc::from(name.as_str()));
        }
        let served = std::iter::once(None).chain(load.adapters.iter().map(|(id, _)| Some(*id)));
        let used = load.requests.iter().map(|r| r.lora);
        let tokens = it.lora.tokens.iter().map(|t| t.lora);
        let ttft = it.lora.time_to_first_token_s.iter().map(|(l, _)| *l);
        let finished = it.finished.iter().map(|f| f.lora);
        for lora in served.chain(used).chain(tokens).chain(ttft).chain(finished) {
            if seen.series.insert((index, lora)) {
                self.start_series(&self.labels(&seen, model, lora));
            }
        }
        // Every adapter this engine has served: those with no request read 0.
        for &(engine, lora) in seen.series.iter().filter(|(engine, _)| *engine == index) {
            let counts = load
                .requests
                .iter()
                .find(|r| r.lora == lora)
                .copied()
                .unwrap_or_default();
            let labels = self.labels(&seen, model, lora);
            debug_assert_eq!(engine, index);
            for (state, n) in [("running", counts.running), ("waiting", counts.waiting)] {
                let mut with_state = labels.to_vec();
                with_state.push(KeyValue::new("state", state));
                self.requests.record(n as u64, &with_state);
            }
        }
        for t in &it.lora.tokens {
            let labels = self.labels(&seen, model, t.lora);
            self.prompt_tokens.add(t.prompt, &labels);
            self.generation_tokens.add(t.generation, &labels);
        }
        for (lora, ttft) in &it.lora.time_to_first_token_s {
            let labels = self.labels(&seen, model, *lora);
            self.time_to_first_token
                .histogram
                .record(ttft.seconds, &labels, ttft.trace);
        }
        for f in &it.finished {
            let labels = self.labels(&seen, model, f.lora);
            self.e2e_request_latency
                .histogram
                .record(f.intervals.e2e_s, &labels, f.trace);
        }
    }

    /// A run-time adapter change (labels `model_name` alone: loads happen in the API
    /// server, for every engine at once, as `admission_rejections_total` counts).
    pub(super) fn record_change(&self, model_name: &KeyValue, msg: RecordAdapterChange) {
        let model = [model_name.clone()];
        let mut with_result = model.to_vec();
        with_result.push(KeyValue::new("result", msg.change.as_str()));
        self.changes.add(1, &with_result);
        if let Some(seconds) = msg.load_seconds {
            self.load_time.histogram.record(seconds, &model, None);
        }
    }

    /// `[model_name, engine, lora_name]` of adapter `lora` (`""` for the base model).
    fn labels(&self, seen: &Seen, model: &[KeyValue; 2], lora: Option<u32>) -> [KeyValue; 3] {
        let name: Arc<str> = match lora {
            None => Arc::from(""),
            Some(id) => seen
                .names
                .get(&id)
                .cloned()
                .unwrap_or_else(|| Arc::from(id.to_string())),
        };
        [model[0].clone(), model[1].clone(), KeyValue::new("lora_name", name)]
    }

    /// An adapter's counters at 0 and its histograms declared, so they show from now on.
    fn start_series(&self, labels: &[KeyValue; 3]) {
        self.prompt_tokens.add(0, labels);
        self.generation_tokens.add(0, labels);
        self.declare(&self.time_to_first_token, labels);
        self.declare(&self.e2e_request_latency, labels);
    }

    fn declare(&self, h: &Declarable, labels: &[KeyValue]) {
        self.store.declare(&h.series, labels);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::types::FinishReason;
    use crate::stats::data::{FinishedRequestStats, LoraLoad, LoraRequests, LoraTokens, Observation};
    use crate::stats::exporter::test_support::{config, finished, value};
    use crate::stats::exporter::{build_telemetry, render_metrics};

    /// What `/metrics` writes: the registry gathers the declared series too.
    fn scrape(t: &crate::stats::exporter::Telemetry) -> String {
        render_metrics(&t.registry).expect("render")
    }

    fn served(adapters: &[(u32, &str)], requests: Vec<LoraRequests>) -> SchedulerStats {
        SchedulerStats {
            num_running: requests.iter().map(|r| r.running).sum(),
            num_waiting: requests.iter().map(|r| r.waiting).sum(),
            lora: Some(LoraLoad {
                max_loras: 2,
                adapters: adapters.iter().map(|(id, n)| (*id, n.to_string())).collect(),
                requests,
                ..LoraLoad::default()
            }),
            ..SchedulerStats::default()
        }
    }

    fn under(lora: Option<u32>) -> FinishedRequestStats {
        FinishedRequestStats {
            lora,
            ..finished(FinishReason::Stop, 3)
        }
    }

    #[test]
    fn per_adapter_series_sum_to_the_totals_and_outlive_their_adapter() {
        let t = build_telemetry(&config("vllm:")).unwrap();
        let i = t.instruments.as_ref().unwrap();
        let text = scrape(&t);
        assert!(!text.contains("kiln_lora_"), "nothing without LoRA");
        // Start: the base and adapter 1 served, idle: their series exist at 0.
        i.record_step_for_test(&served(&[(1, "a")], vec![]), &IterationStats::default());
        let text = scrape(&t);
        let v = |text: &str, name: &str, labels: &[(&str, &str)]| value(text, name, labels);
        for lora in ["", "a"] {
            let l = [("lora_name", lora), ("engine", "0")];
            assert_eq!(v(&text, "kiln_lora_prompt_tokens_total", &l), Some(0.0), "{lora}");
            assert_eq!(v(&text, "kiln_lora_time_to_first_token_seconds_count", &l), Some(0.0));
            assert_eq!(v(&text, "kiln_lora_e2e_request_latency_seconds_count", &l), Some(0.0));
            let running = [("lora_name", lora), ("state", "running")];
            assert_eq!(v(&text, "kiln_lora_requests", &running), Some(0.0));
        }
        for result in ["loaded", "failed", "unloaded"] {
            let l = [("result", result)];
            assert_eq!(v(&text, "kiln_lora_adapter_loads_total", &l), Some(0.0));
        }
        assert_eq!(v(&text, "kiln_lora_adapter_load_seconds_count", &[]), Some(0.0));
        // A step: a prompt under `a` and one under the base, one token each, both finished.
        let requests = vec![
            LoraRequests {
                lora: Some(1),
                running: 1,
                waiting: 2,
            },
            LoraRequests {
                lora: None,
                running: 1,
                waiting: 0,
            },
        ];
        let step = IterationStats {
            num_prompt_tokens: 17,
            num_generation_tokens: 2,
            time_to_first_token_s: vec![Observation::from(0.2), Observation::from(0.3)],
            finished: vec![under(Some(1)), under(None)],
            lora: super::super::data::LoraIteration {
                tokens: vec![
                    LoraTokens {
                        lora: Some(1),
                        prompt: 10,
                        generation: 1,
                    },
                    LoraTokens {
                        lora: None,
                        prompt: 7,
                        generation: 1,
                    },
                ],
                time_to_first_token_s: vec![(Some(1), 0.2.into()), (None, 0.3.into())],
            },
            ..IterationStats::default()
        };
        i.record_step_for_test(&served(&[(1, "a")], requests), &step);
        let text = scrape(&t);
        let a = [("lora_name", "a")];
        let base = [("lora_name", "")];
        assert_eq!(v(&text, "kiln_lora_prompt_tokens_total", &a), Some(10.0));
        assert_eq!(v(&text, "kiln_lora_prompt_tokens_total", &base), Some(7.0));
        assert_eq!(v(&text, "vllm:prompt_tokens_total", &[]), Some(17.0));
        assert_eq!(v(&text, "kiln_lora_generation_tokens_total", &a), Some(1.0));
        assert_eq!(v(&text, "kiln_lora_e2e_request_latency_seconds_count", &a), Some(1.0));
        assert_eq!(
            v(&text, "kiln_lora_time_to_first_token_seconds_count", &base),
            Some(1.0)
        );
        let waiting = [("lora_name", "a"), ("state", "waiting")];
        assert_eq!(v(&text, "kiln_lora_requests", &waiting), Some(2.0));
        // `a` unloaded: its gauges read 0, its totals stay (the sums still hold).
        i.record_step_for_test(&served(&[], vec![]), &IterationStats::default());
        let text = scrape(&t);
        assert_eq!(v(&text, "kiln_lora_requests", &waiting), Some(0.0));
        assert_eq!(v(&text, "kiln_lora_prompt_tokens_total", &a), Some(10.0));
    }

    #[actix::test]
    async fn adapter_changes_are_counted_by_result_and_loads_timed() {
        use actix::Actor;
        let t = build_telemetry(&config("vllm:")).unwrap();
        let stats = crate::stats::actor::StatsActor::new(
            t.instruments.clone(),
            crate::stats::actor::StatsActorConfig { log_interval: None },
        )
        .start();
        let loaded = RecordAdapterChange {
            change: AdapterChange::Loaded,
            load_seconds: Some(0.02),
        };
        stats.do_send(loaded);
        stats.do_send(RecordAdapterChange {
            change: AdapterChange::Failed,
            load_seconds: None,
        });
        let unloaded = RecordAdapterChange {
            change: AdapterChange::Unloaded,
            load_seconds: None,
        };
        stats.send(unloaded).await.unwrap();
        let text = render_metrics(&t.registry).unwrap();
        for result in ["loaded", "failed", "unloaded"] {
            let l = [("result", result)];
            assert_eq!(value(&text, "kiln_lora_adapter_loads_total", &l), Some(1.0), "{result}");
        }
        assert_eq!(value(&text, "kiln_lora_adapter_load_seconds_count", &[]), Some(1.0));
        assert_eq!(
            value(&text, "kiln_lora_adapter_load_seconds_bucket", &[("le", "0.025")]),
            Some(1.0)
        );
    }
}
