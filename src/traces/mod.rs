//! Request traces over OTLP: the sampling decision at arrival (parent-based by default, as
//! the OpenTelemetry specification's variables say), spans built at the end from the
//! engine's timestamps (`span`), and export off the hot path (`export`).

pub mod config;
pub mod export;
pub mod phase_spans;
pub mod span;
pub mod wall_clock;

use std::time::{Duration, Instant};

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId};
use opentelemetry::{Context, InstrumentationScope};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, Sampler, SamplingDecision, ShouldSample};

use std::sync::Arc;

use crate::otlp::OtlpError;
use crate::stats::span_exports::SpanExportCounters;
use config::{TracesConfig, TracesDetail};
use export::SpanQueue;
use span::{RequestSpans, SERVER_SPAN_NAME, SpanPlan, WallClock};

/// Samples, builds and queues the spans of every traced request; one per server.
pub struct Tracer {
    sampler: Sampler,
    ids: RandomIdGenerator,
    clock: WallClock,
    scope: InstrumentationScope,
    queue: SpanQueue,
    detail: TracesDetail,
}

impl Tracer {
    /// Starts the exporter thread; a bad endpoint or header stops startup.
    pub fn start(cfg: &TracesConfig, resource: Resource, counters: Arc<SpanExportCounters>) -> Result<Self, OtlpError> {
        Ok(Self {
            sampler: cfg.sampler.sampler(),
            ids: RandomIdGenerator::default(),
            clock: WallClock::now(),
            scope: InstrumentationScope::builder("kiln")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            queue: SpanQueue::start(cfg, resource, counters)?,
            detail: cfg.detail,
        })
    }

    /// The span of a request that arrived at `start` under `parent` (the context extracted
    /// from `traceparent`/`tracestate`, or an empty one), or `None` when it is not sampled.
    pub fn sample(&self, parent: &Context, start: Instant) -> Option<SpanPlan> {
        let remote = parent.span().span_context().clone();
        let (trace_id, parent_span_id) = if remote.is_valid() {
            (remote.trace_id(), remote.span_id())
        } else {
            (self.ids.new_trace_id(), SpanId::INVALID)
        };
        let parent = remote.is_valid().then_some(parent);
        let result = self
            .sampler
            .should_sample(parent, trace_id, SERVER_SPAN_NAME, &SpanKind::Server, &[], &[]);
        if result.decision != SamplingDecision::RecordAndSample {
            return None;
        }
        Some(SpanPlan {
            context: SpanContext::new(
                trace_id,
                self.ids.new_span_id(),
                TraceFlags::SAMPLED,
                false,
                result.trace_state,
            ),
            parent_span_id,
            parent_is_remote: parent_span_id != SpanId::INVALID,
            start,
        })
    }

    /// A fresh span id, for the child spans of a fanned-out body.
    pub fn new_span_id(&self) -> SpanId {
        self.ids.new_span_id()
    }

    /// Builds the request's spans and queues them for export (never blocks).
    pub fn finish(&self, request: RequestSpans) {
        let phase_ids = (self.detail == TracesDetail::Phases).then_some(&self.ids as &dyn IdGenerator);
        self.queue.push(request.build(&self.clock, &self.scope, phase_ids));
    }

    /// Exports what is queued, waiting at most `timeout` (the collector may be gone).
    pub fn shutdown(&self, timeout: Duration) {
        self.queue.shutdown(timeout);
    }
}

/// Engine-side identity of a traced span (plain bytes for the scheduler and exemplars).
pub fn engine_trace(context: &SpanContext) -> crate::engine::trace_context::TraceContext {
    crate::engine::trace_context::TraceContext {
        trace_id: context.trace_id().to_bytes(),
        span_id: context.span_id().to_bytes(),
    }
}

/// The trace id of an incoming context, when it carries a valid one (sampled or not).
pub fn incoming_trace_id(parent: &Context) -> Option<TraceId> {
    let context = parent.span().span_context().clone();
    context.is_valid().then(|| context.trace_id())
}
