//! The phase spans of one engine request (`--otlp-traces-detail phases`): under the span that
//! stands for it, one span for its first wait in the queue, one for each prefill chunk the
//! scheduler ran (with its token count and position), and one for decode, from the first
//! token to the end. Built, like every kiln span, from the engine's own timestamps; preemption
//! and swap stay events on the parent.

use std::borrow::Cow;
use std::time::Instant;

use opentelemetry::trace::{SpanContext, SpanKind, Status, TraceFlags};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{IdGenerator, SpanData, SpanEvents, SpanLinks};

use super::wall_clock::WallClock;
use crate::engine::timeline::RequestTimeline;

pub const QUEUE_SPAN_NAME: &str = "llm_request.queue";
pub const PREFILL_SPAN_NAME: &str = "llm_request.prefill";
pub const DECODE_SPAN_NAME: &str = "llm_request.decode";

/// What the phase spans of one engine request hang from and are built with.
pub struct PhaseParent<'a> {
    pub context: &'a SpanContext,
    pub clock: &'a WallClock,
    pub scope: &'a InstrumentationScope,
    pub ids: &'a dyn IdGenerator,
}

/// The queue, prefill-chunk and decode spans of `timeline`, children of `parent`.
pub fn phase_spans(parent: &PhaseParent<'_>, timeline: &RequestTimeline) -> Vec<SpanData> {
    let t = &timeline.timestamps;
    let mut spans = Vec::new();
    if let Some(scheduled) = t.scheduled {
        spans.push(parent.span(QUEUE_SPAN_NAME, t.arrival, scheduled, Vec::new()));
    }
    for chunk in &timeline.events.prefill_chunks {
        let attributes = vec![
            KeyValue::new("kiln.prefill.tokens", i64::from(chunk.tokens)),
            KeyValue::new("kiln.prefill.position", i64::from(chunk.position)),
        ];
        spans.push(parent.span(PREFILL_SPAN_NAME, chunk.start, chunk.end, attributes));
    }
    if let Some(first) = t.first_token {
        let end = t.finished.or(t.last_token).unwrap_or(first);
        spans.push(parent.span(DECODE_SPAN_NAME, first, end, Vec::new()));
    }
    spans
}

impl PhaseParent<'_> {
    fn span(&self, name: &'static str, start: Instant, end: Instant, attributes: Vec<KeyValue>) -> SpanData {
        SpanData {
            span_context: SpanContext::new(
                self.context.trace_id(),
                self.ids.new_span_id(),
                TraceFlags::SAMPLED,
                false,
                self.context.trace_state().clone(),
            ),
            parent_span_id: self.context.span_id(),
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Borrowed(name),
            start_time: self.clock.at(start),
            end_time: self.clock.at(end.max(start)),
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: self.scope.clone(),
        }
    }
}
