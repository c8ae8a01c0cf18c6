//! The stats actor: the one place where engine and HTTP facts become metric recordings.
//!
//! Senders (scheduler, HTTP middleware, admission) `do_send` plain-data messages and never
//! wait, so recording costs them a mailbox push. With telemetry disabled the actor still
//! runs (it keeps the throughput log line) but holds no instruments, and every record is a
//! branch on `None`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Actor, AsyncContext, Context, Handler, Message};
use opentelemetry::KeyValue;

pub use super::data::RecordHttp;
use super::data::{FinishedRequestStats, IterationStats, SchedulerStats};
use super::family::ADMISSION_REJECTION_REASONS;
use super::instruments::{Instruments, operation_index, reason_index};
use super::lora_adapters::RecordAdapterChange;
use super::structured::RecordGrammarCompile;
use super::throughput_log::{DEFAULT_LOG_INTERVAL, ThroughputLog, ThroughputReport};
use crate::engine::types::FinishReason;

/// One engine step: the scheduler's snapshot and what happened during the step.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct RecordStep {
    /// The engine that stepped (its `engine` label).
    pub engine: usize,
    pub scheduler: SchedulerStats,
    pub iteration: IterationStats,
}

/// An HTTP request entered the server (`http.server.active_requests` + 1).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct HttpRequestStarted {
    pub method: &'static str,
}

/// An HTTP request left the server (`http.server.active_requests` - 1).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct HttpRequestFinished {
    pub method: &'static str,
}

/// A request refused before it reached the scheduler (`admission_rejections_total`).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct AdmissionRejected {
    /// `queue_full` or `too_long`: a fixed set chosen by kiln, never by a client.
    pub reason: &'static str,
}

/// The executor panicked and was restarted `restarts` times (`kiln_engine_restarts_total`).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct EngineRestarted {
    pub engine: usize,
    pub restarts: u32,
}

/// How the actor behaves besides recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatsActorConfig {
    /// Interval of the throughput log line and gauges; `None` turns both off.
    pub log_interval: Option<Duration>,
}

impl Default for StatsActorConfig {
    fn default() -> Self {
        Self {
            log_interval: Some(DEFAULT_LOG_INTERVAL),
        }
    }
}

pub struct StatsActor {
    /// `None` when telemetry is disabled: nothing is recorded.
    instruments: Option<Arc<Instruments>>,
    /// One per engine, so each engine's throughput gauges are its own.
    throughput: Vec<ThroughputLog>,
    config: StatsActorConfig,
}

impl StatsActor {
    pub fn new(instruments: Option<Arc<Instruments>>, config: StatsActorConfig) -> Self {
        Self {
            instruments,
            throughput: vec![ThroughputLog::new(Instant::now())],
            config,
        }
    }

    /// The instruments a fact is recorded into (none with telemetry off).
    fn all(&self) -> impl Iterator<Item = &Instruments> {
        self.instruments.iter().map(|i| &**i)
    }

    /// Closes a throughput interval of every engine: sets its gauges, logs unless idle.
    /// Returns engine 0's report.
    fn log_tick(&mut self, now: Instant) -> ThroughputReport {
        let reports: Vec<ThroughputReport> = self.throughput.iter_mut().map(|log| log.tick(now)).collect();
        let several = reports.len() > 1;
        for (engine, report) in reports.iter().enumerate() {
            for i in self.all() {
                let e = &i.engine;
                let m = &i.engine_labels(engine).model;
                e.avg_prompt_throughput.record(report.prompt_toks_per_s, m);
                e.avg_generation_throughput.record(report.generation_toks_per_s, m);
            }
            if !report.idle && several {
                tracing::info!(target: "kiln::stats", engine, "{report}");
            } else if !report.idle {
                tracing::info!(target: "kiln::stats", "{report}");
            }
        }
        reports
            .into_iter()
            .next()
            .unwrap_or_else(|| ThroughputLog::new(now).tick(now))
    }

    /// The throughput log of engine `index`, made on its first step.
    fn throughput_of(&mut self, index: usize) -> &mut ThroughputLog {
        if self.throughput.len() <= index {
            let start = Instant::now();
            self.throughput.resize_with(index + 1, || ThroughputLog::new(start));
        }
        &mut self.throughput[index]
    }
}

impl StatsActor {
    /// `None` when telemetry is disabled.
    pub(super) fn instruments(&self) -> Option<&Instruments> {
        self.instruments.as_deref()
    }
}

impl Actor for StatsActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let start = Instant::now();
        self.throughput
            .iter_mut()
            .for_each(|log| *log = ThroughputLog::new(start));
        if let Some(interval) = self.config.log_interval {
            ctx.run_interval(interval, |act, _| {
                act.log_tick(Instant::now());
            });
        }
    }
}

impl Handler<RecordStep> for StatsActor {
    type Result = ();

    fn handle(&mut self, msg: RecordStep, _: &mut Self::Context) {
        self.throughput_of(msg.engine).observe(&msg.scheduler, &msg.iteration);
        for i in self.all() {
            i.record_step(msg.engine, &msg.scheduler, &msg.iteration);
        }
    }
}

impl Handler<RecordHttp> for StatsActor {
    type Result = ();

    fn handle(&mut self, msg: RecordHttp, _: &mut Self::Context) {
        for i in self.all() {
            i.record_http(&msg);
        }
    }
}

impl Handler<RecordGrammarCompile> for StatsActor {
    type Result = ();

    fn handle(&mut self, msg: RecordGrammarCompile, _: &mut Self::Context) {
        if let Some(i) = self.instruments() {
            i.structured.record_compile(&i.model, msg);
        }
    }
}

impl Handler<RecordAdapterChange> for StatsActor {
    type Result = ();

    fn handle(&mut self, msg: RecordAdapterChange, _: &mut Self::Context) {
        for i in self.all() {
            i.lora_adapters.record_change(&i.model[0], msg);
        }
    }
}

impl Handler<HttpRequestStarted> for StatsActor {
    type Result = ();

    fn handle(&mut self, msg: HttpRequestStarted, _: &mut Self::Context) {
        for i in self.all() {
            i.http.active_requests.add(1, &[method_attr(msg.method)]);
        }
    }
}

impl Handler<HttpRequestFinished> for StatsActor {
    type Result = ();

    fn handle(&mut self, msg: HttpRequestFinished, _: &mut Self::Context) {
        for i in self.all() {
            i.http.active_requests.add(-1, &[method_attr(msg.method)]);
        }
    }
}

impl Handler<AdmissionRejected> for StatsActor {
    type Result = ();

    fn handle(&mut self, msg: AdmissionRejected, _: &mut Self::Context) {
        for i in self.all() {
            i.engine.admission_rejections.add(1, &i.admission_labels(msg.reason));
        }
    }
}

impl Handler<EngineRestarted> for StatsActor {
    type Result = ();

    fn handle(&mut self, msg: EngineRestarted, _: &mut Self::Context) {
        for i in self.all() {
            let m = &i.engine_labels(msg.engine).model;
            i.engine.engine_restarts.add(u64::from(msg.restarts), m);
        }
    }
}

fn method_attr(method: &'static str) -> KeyValue {
    KeyValue::new("http.request.method", method)
}

/// Test-only: answered after every message sent before it (the mailbox is FIFO).
#[cfg(test)]
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct Barrier;

#[cfg(test)]
impl Handler<Barrier> for StatsActor {
    type Result = ();

    fn handle(&mut self, _: Barrier, _: &mut Self::Context) {}
}

/// The recording rules of METRICS.md, kept next to the actor that applies them.
impl Instruments {
    /// `model_name` and `reason`, no `engine`: vLLM counts admission in its API server,
    /// before a request is given to an engine (PR #55812).
    fn admission_labels(&self, reason: &'static str) -> [KeyValue; 2] {
        [self.model[0].clone(), KeyValue::new("reason", reason)]
    }

    /// Creates every gauge and counter series at 0 before the first step, so a scrape of
    /// an idle server already shows `num_requests_waiting` (routers read it) and `rate()`
    /// has a baseline for each `finished_reason` and admission reason.
    pub(super) fn record_initial(&self) {
        for (index, labels) in self.engines.iter().enumerate() {
            self.record_step(index, &SchedulerStats::default(), &IterationStats::default());
            for attrs in &labels.by_reason {
                self.engine.request_success.add(0, attrs);
            }
            let m = &labels.model;
            self.engine.avg_prompt_throughput.record(0.0, m);
            self.engine.avg_generation_throughput.record(0.0, m);
            self.engine.engine_restarts.add(0, m);
            self.structured.record_initial(m);
            self.kv_offload.record_initial(m);
        }
        for reason in ADMISSION_REJECTION_REASONS {
            self.engine.admission_rejections.add(0, &self.admission_labels(reason));
        }
    }

    /// One step of engine `index`.
    fn record_step(&self, index: usize, s: &SchedulerStats, it: &IterationStats) {
        let e = &self.engine;
        let m = &self.engine_labels(index).model;
        e.num_requests_running.record(s.num_running as u64, m);
        e.num_requests_waiting.record(s.num_waiting as u64, m);
        e.num_requests_swapped.record(s.num_swapped as u64, m);
        e.kv_cache_usage_perc.record(s.kv_cache_usage, m);
        e.gpu_cache_usage_perc.record(s.kv_cache_usage, m);
        e.cpu_cache_usage_perc.record(s.cpu_cache_usage, m);
        // Adding 0 is deliberate: every counter series exists from the first step.
        e.num_preemptions.add(s.num_preemptions, m);
        e.prefix_cache_queries.add(s.prefix_cache_queries, m);
        e.prefix_cache_hits.add(s.prefix_cache_hits, m);
        e.prompt_tokens.add(it.num_prompt_tokens, m);
        self.prompt_source.record_step(m, s, it);
        self.flagged.record_step(m, s, it);
        self.structured.record_step(m, it);
        self.step_duration.record_step(m, it);
        self.kv_offload.record_step(m, it);
        self.token_load.record_step(m, &s.tokens);
        self.prefix_hit_rate.record_step(m, s);
        self.lora_info.record_step(s);
        self.lora_adapters.record_step(index, m, s, it);
        e.generation_tokens.add(it.num_generation_tokens, m);
        // vLLM's definition: the prompt tokens computed plus the tokens generated in the step,
        // so a request's first token counts (10 requests of 9 prompt and 10 generated tokens
        // sum to 190), once for every step that ran.
        if it.num_batched_tokens > 0 {
            let tokens = it.num_prefill_tokens_computed + it.num_generation_tokens;
            e.iteration_tokens.record(tokens, m);
        }
        for ttft in &it.time_to_first_token_s {
            e.time_to_first_token.record(ttft.seconds, m, ttft.trace);
        }
        for itl in &it.inter_token_latency_s {
            e.inter_token_latency.record(itl.seconds, m, itl.trace);
        }
        for f in &it.finished {
            self.record_finished(index, f);
        }
    }

    /// Every finished request, whatever its reason; intervals that never happened
    /// (`None`) add no observation. A traced request's latencies become their buckets'
    /// exemplars.
    fn record_finished(&self, index: usize, f: &FinishedRequestStats) {
        let e = &self.engine;
        let labels = self.engine_labels(index);
        let m = &labels.model;
        let iv = &f.intervals;
        e.request_success
            .add(1, &labels.by_reason[reason_index(f.finish_reason)]);
        e.e2e_request_latency.record(iv.e2e_s, m, f.trace);
        let optional = [
            (&e.request_queue_time, iv.queue_s),
            (&e.request_prefill_time, iv.prefill_s),
            (&e.request_decode_time, iv.decode_s),
            (&e.request_inference_time, iv.inference_s),
            (&e.time_per_output_token, iv.time_per_output_token_s),
        ];
        for (hist, value) in optional {
            if let Some(v) = value {
                hist.record(v, m, f.trace);
            }
        }
        e.request_prompt_tokens.record(f.prompt_tokens, m);
        e.request_generation_tokens.record(f.generation_tokens, m);
        e.request_params_max_tokens.record(f.max_tokens, m);
        e.request_max_num_generation_tokens.record(f.max_tokens, m);
        e.request_params_n.record(f.n, m);
        e.request_num_preemptions.record(f.num_preemptions, m);

        // GenAI: duration for all; error.type when the request failed ("_OTHER" is the
        // semconv fallback when no class was given). Abort is the client's choice, not an
        // error, but is no success either, so it adds no TTFT/TPOT.
        let base = &self.gen_ai_base[operation_index(f.operation)];
        let error_type = match (f.error_type, f.finish_reason) {
            (Some(t), _) => Some(t),
            (None, FinishReason::Error) => Some("_OTHER"),
            (None, _) => None,
        };
        match error_type {
            Some(t) => {
                let mut attrs = base.to_vec();
                attrs.push(KeyValue::new("error.type", t));
                self.gen_ai.request_duration.record(iv.e2e_s, &attrs, f.trace);
            }
            None => {
                self.gen_ai.request_duration.record(iv.e2e_s, base, f.trace);
            }
        }
        let success = matches!(f.finish_reason, FinishReason::Stop | FinishReason::Length);
        if success && error_type.is_none() {
            if let Some(ttft) = iv.time_to_first_token_s {
                self.gen_ai.time_to_first_token.record(ttft, base, f.trace);
            }
            if let Some(tpot) = iv.time_per_output_token_s {
                self.gen_ai.time_per_output_token.record(tpot, base, f.trace);
            }
        }
    }

    fn record_http(&self, r: &RecordHttp) {
        let mut attrs = Vec::with_capacity(4);
        attrs.push(method_attr(r.method));
        if let Some(route) = &r.route {
            attrs.push(KeyValue::new("http.route", route.clone()));
        }
        if let Some(status) = r.status {
            attrs.push(KeyValue::new("http.response.status_code", i64::from(status)));
        }
        if let Some(t) = &r.error_type {
            attrs.push(KeyValue::new("error.type", t.clone()));
        }
        let h = &self.http;
        h.request_duration.record(r.duration.as_secs_f64(), &attrs, None);
        h.request_body_size.record(r.request_body_bytes, &attrs);
        h.response_body_size.record(r.response_body_bytes, &attrs);
        self.instrumentator.record(r);
        self.request_failure.record(&self.model[0], r);
    }
}

#[cfg(test)]
impl Instruments {
    pub(crate) fn record_step_for_test(&self, s: &SchedulerStats, it: &IterationStats) {
        self.record_step(0, s, it);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::data::KvTransfer;
    use crate::stats::exporter::test_support::{config, finished, value};
    use crate::stats::exporter::{TelemetryConfig, build_telemetry, render_metrics};

    fn quiet() -> StatsActorConfig {
        StatsActorConfig { log_interval: None }
    }

    fn step_with_three_finished() -> RecordStep {
        RecordStep {
            engine: 0,
            scheduler: SchedulerStats {
                num_running: 1,
                num_waiting: 4,
                num_swapped: 2,
                kv_cache_usage: 0.25,
                cpu_cache_usage: 0.125,
                prefix_cache_queries: 30,
                prefix_cache_hits: 12,
                num_preemptions: 1,
                ..SchedulerStats::default()
            },
            iteration: IterationStats {
                num_prompt_tokens: 30,
                num_generation_tokens: 12,
                num_batched_tokens: 42,
                num_prefill_tokens_computed: 18,
                num_prompt_tokens_cached: 12,
                prefill_kv_computed_tokens: vec![8, 10],
                time_to_first_token_s: vec![0.2.into(), 0.3.into()],
                inter_token_latency_s: vec![0.02.into(); 9],
                step_cost: Default::default(),
                finished: vec![
                    finished(FinishReason::Stop, 5),
                    finished(FinishReason::Length, 7),
                    finished(FinishReason::Error, 0),
                ],
                grammar_mask_seconds: Vec::new(),
                step_duration_s: Some(0.05),
                swapped_out: KvTransfer {
                    bytes: 4096,
                    seconds: 0.25,
                },
                swapped_in: KvTransfer::default(),
                lora: Default::default(),
            },
        }
    }

    #[actix::test]
    async fn a_step_with_three_finished_requests() {
        let t = build_telemetry(&config("vllm:")).unwrap();
        let stats = StatsActor::new(t.instruments.clone(), quiet()).start();
        stats.send(step_with_three_finished()).await.unwrap();
        // A step with nothing batched adds no iteration_tokens observation.
        let idle = RecordStep {
            engine: 0,
            scheduler: SchedulerStats::default(),
            iteration: IterationStats::default(),
        };
        stats.send(idle).await.unwrap();
        let text = render_metrics(&t.registry).unwrap();
        let v = |name: &str, labels: &[(&str, &str)]| value(&text, name, labels);

        assert_eq!(v("vllm:e2e_request_latency_seconds_count", &[]), Some(3.0));
        for (reason, n) in [("stop", 1.0), ("length", 1.0), ("error", 1.0), ("abort", 0.0)] {
            let labels = [("finished_reason", reason), ("model_name", "smollm2")];
            assert_eq!(v("vllm:request_success_total", &labels), Some(n), "{reason}");
        }
        // Invariants of METRICS.md.
        assert_eq!(v("vllm:request_generation_tokens_sum", &[]), Some(12.0));
        assert_eq!(v("vllm:generation_tokens_total", &[]), Some(12.0));
        assert_eq!(v("vllm:request_prompt_tokens_sum", &[]), Some(30.0));
        assert_eq!(v("vllm:prompt_tokens_total", &[]), Some(30.0));
        assert_eq!(
            v("vllm:request_max_num_generation_tokens_sum", &[]),
            v("vllm:request_params_max_tokens_sum", &[]),
            "vLLM exports both from each request's max_tokens"
        );
        assert_eq!(v("vllm:request_max_num_generation_tokens_count", &[]), Some(3.0));
        // The failed request never reached its first token: no interval after queueing.
        assert_eq!(v("vllm:request_queue_time_seconds_count", &[]), Some(3.0));
        assert_eq!(v("vllm:request_decode_time_seconds_count", &[]), Some(2.0));
        assert_eq!(v("vllm:request_time_per_output_token_seconds_count", &[]), Some(2.0));
        assert_eq!(v("vllm:time_to_first_token_seconds_count", &[]), Some(2.0));
        assert_eq!(v("vllm:inter_token_latency_seconds_count", &[]), Some(9.0));
        assert_eq!(v("vllm:iteration_tokens_total_count", &[]), Some(1.0));
        // Prompt tokens computed (18, cached ones not) plus tokens generated (12), not the 42
        // batched.
        assert_eq!(v("vllm:iteration_tokens_total_sum", &[]), Some(30.0));
        // One observation per finished request, none preempted: all in the first bucket.
        assert_eq!(v("vllm:request_num_preemptions_count", &[]), Some(3.0));
        let preemptions = "vllm:request_num_preemptions_bucket";
        assert_eq!(v(preemptions, &[("le", "1.0")]), Some(3.0));
        assert!(v(preemptions, &[("le", "20.0")]).is_some());
        // One step ran on the executor (the idle record carries no step time).
        assert_eq!(v("kiln_step_duration_seconds_count", &[]), Some(1.0));
        // Swap traffic by direction; the direction without traffic is there at 0.
        let out = [("transfer_type", "GPU_to_CPU")];
        let back = [("transfer_type", "CPU_to_GPU")];
        assert_eq!(v("vllm:kv_offload_total_bytes_total", &out), Some(4096.0));
        assert_eq!(v("vllm:kv_offload_total_time_total", &out), Some(0.25));
        assert_eq!(v("vllm:kv_offload_total_bytes_total", &back), Some(0.0));
        assert_eq!(v("kiln_step_duration_seconds_bucket", &[("le", "0.05")]), Some(1.0));
        assert_eq!(v("kiln_step_duration_seconds_bucket", &[("le", "0.02")]), Some(0.0));
        assert_eq!(v("vllm:request_params_n_count", &[]), Some(3.0));
        assert_eq!(v("vllm:prefix_cache_hits_total", &[]), Some(12.0));
        assert_eq!(v("vllm:num_preemptions_total", &[]), Some(1.0));
        // Gauges follow the last step: idle again.
        for g in ["num_requests_running", "num_requests_waiting", "num_requests_swapped"] {
            assert_eq!(v(&format!("vllm:{g}"), &[]), Some(0.0), "{g}");
        }
        assert_eq!(v("vllm:kv_cache_usage_perc", &[]), Some(0.0));
        // GenAI: duration for all three, the failure under its error.type; TTFT for 2.
        let dur = "gen_ai_server_request_duration_seconds_count";
        assert_eq!(v(dur, &[("error_type", "executor_error")]), Some(1.0));
        let ok: f64 = crate::stats::exporter::test_support::samples(&text, dur)
            .iter()
            .filter(|l| !l.contains("error_type"))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum();
        assert_eq!(ok, 2.0);
        assert_eq!(v("gen_ai_server_time_to_first_token_seconds_count", &[]), Some(2.0));
        assert_eq!(v("gen_ai_server_time_per_output_token_seconds_count", &[]), Some(2.0));
    }

    #[actix::test]
    async fn gauges_follow_the_latest_step() {
        let t = build_telemetry(&config("kiln_")).unwrap();
        let stats = StatsActor::new(t.instruments.clone(), quiet()).start();
        stats.send(step_with_three_finished()).await.unwrap();
        let text = render_metrics(&t.registry).unwrap();
        assert_eq!(value(&text, "kiln_num_requests_waiting", &[]), Some(4.0));
        assert_eq!(value(&text, "kiln_num_requests_swapped", &[]), Some(2.0));
        assert_eq!(value(&text, "kiln_gpu_cache_usage_perc", &[]), Some(0.25));
        assert_eq!(value(&text, "kiln_cpu_cache_usage_perc", &[]), Some(0.125));
    }

    #[actix::test]
    async fn admission_rejections_by_reason() {
        let t = build_telemetry(&config("vllm:")).unwrap();
        let stats = StatsActor::new(t.instruments.clone(), quiet()).start();
        stats.do_send(AdmissionRejected { reason: "queue_full" });
        stats.do_send(AdmissionRejected { reason: "queue_full" });
        stats.send(AdmissionRejected { reason: "too_long" }).await.unwrap();
        let text = render_metrics(&t.registry).unwrap();
        let name = "vllm:admission_rejections_total";
        let lines = crate::stats::exporter::test_support::samples(&text, name);
        assert!(lines.iter().all(|l| !l.contains("engine=")), "{lines:?}");
        assert_eq!(value(&text, name, &[("reason", "queue_full")]), Some(2.0));
        assert_eq!(value(&text, name, &[("reason", "too_long")]), Some(1.0));
    }

    #[actix::test]
    async fn engine_restarts_are_counted_under_kilns_own_name() {
        let t = build_telemetry(&config("vllm:")).unwrap();
        let stats = StatsActor::new(t.instruments.clone(), quiet()).start();
        let text = render_metrics(&t.registry).unwrap();
        assert_eq!(value(&text, "kiln_engine_restarts_total", &[]), Some(0.0));
        stats.do_send(EngineRestarted { engine: 0, restarts: 1 });
        stats.send(EngineRestarted { engine: 0, restarts: 2 }).await.unwrap();
        let text = render_metrics(&t.registry).unwrap();
        assert_eq!(value(&text, "kiln_engine_restarts_total", &[]), Some(3.0));
    }

    #[test]
    fn log_tick_sets_the_throughput_gauges() {
        let t = build_telemetry(&config("vllm:")).unwrap();
        let mut actor = StatsActor::new(t.instruments.clone(), quiet());
        let start = Instant::now();
        actor.throughput = vec![ThroughputLog::new(start)];
        let step = step_with_three_finished();
        actor.throughput[0].observe(&step.scheduler, &step.iteration);
        let report = actor.log_tick(start + Duration::from_secs(2));
        assert_eq!(report.prompt_toks_per_s, 9.0);
        let text = render_metrics(&t.registry).unwrap();
        assert_eq!(value(&text, "vllm:avg_prompt_throughput_toks_per_s", &[]), Some(9.0));
        assert_eq!(
            value(&text, "vllm:avg_generation_throughput_toks_per_s", &[]),
            Some(6.0)
        );
        // An idle interval brings the gauges back to 0.
        actor.throughput[0].observe(&SchedulerStats::default(), &IterationStats::default());
        assert!(actor.log_tick(start + Duration::from_secs(4)).idle);
        let text = render_metrics(&t.registry).unwrap();
        assert_eq!(
            value(&text, "vllm:avg_generation_throughput_toks_per_s", &[]),
            Some(0.0)
        );
    }

    #[actix::test]
    async fn disabled_telemetry_records_nothing_but_the_actor_runs() {
        let cfg = TelemetryConfig {
            enabled: false,
            ..config("vllm:")
        };
        let t = build_telemetry(&cfg).unwrap();
        let stats = StatsActor::new(t.instruments.clone(), StatsActorConfig::default()).start();
        stats.send(step_with_three_finished()).await.unwrap();
        stats.send(AdmissionRejected { reason: "too_long" }).await.unwrap();
        stats.send(HttpRequestStarted { method: "GET" }).await.unwrap();
        assert_eq!(render_metrics(&t.registry).unwrap(), "");
    }
}
