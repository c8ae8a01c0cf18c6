//! Spans of one HTTP generation request, built when it ends from the engine's own
//! timestamps (no tracing bridge, no second clock): one SERVER span named `llm_request`, as
//! vLLM names it, started at arrival and parented by the incoming W3C context; when the body
//! fans out into several engine requests (prompt lists, `n` > 1), one INTERNAL child span
//! each. Attributes are vLLM's (`gen_ai.request.*`, `gen_ai.usage.prompt_tokens`,
//! `gen_ai.latency.*`) plus the GenAI semantic-convention names; no prompt or completion text.

use std::borrow::Cow;
use std::time::Instant;

use opentelemetry::trace::{Event, SpanContext, SpanId, SpanKind, Status, TraceFlags};
use opentelemetry::{Array, InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::{IdGenerator, SpanData, SpanEvents, SpanLinks};

use super::phase_spans::{PhaseParent, phase_spans};
pub use super::wall_clock::WallClock;

use crate::engine::events::TokenUsage;
use crate::engine::intervals::RequestIntervals;
use crate::engine::timeline::RequestTimeline;
use crate::engine::types::FinishReason;

/// The SERVER span's name (vLLM's).
pub const SERVER_SPAN_NAME: &str = "llm_request";
/// The SERVER span's attribute naming the LoRA adapter of a request through one (kiln's own:
/// neither vLLM nor the GenAI conventions name one; `gen_ai.request.model` holds the name the
/// client asked for, which is the adapter's too).
pub const LORA_NAME_ATTRIBUTE: &str = "kiln.lora.name";
/// The name of each engine request's span when a body fans out.
pub const CHOICE_SPAN_NAME: &str = "llm_request.choice";

/// The span identity of a sampled request, decided at arrival.
#[derive(Debug, Clone)]
pub struct SpanPlan {
    /// The SERVER span's own context (sampled).
    pub context: SpanContext,
    /// `SpanId::INVALID` for a root span.
    pub parent_span_id: SpanId,
    pub parent_is_remote: bool,
    pub start: Instant,
}

impl SpanPlan {
    /// A child span's context: the same trace, a fresh span id.
    pub fn child(&self, span_id: SpanId) -> SpanContext {
        SpanContext::new(
            self.context.trace_id(),
            span_id,
            TraceFlags::SAMPLED,
            false,
            self.context.trace_state().clone(),
        )
    }
}

/// The request parameters spans record.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpanParams {
    /// `None` when the request left it open (chat without `max_tokens`).
    pub max_tokens: Option<u32>,
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: Option<u32>,
    pub n: u32,
}

/// How one engine request ended, as the engine reported it.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineRequestEnd {
    pub reason: FinishReason,
    pub usage: TokenUsage,
    pub timings: RequestIntervals,
    pub timeline: Option<Box<RequestTimeline>>,
}

/// One engine request of the body.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineRequestSpan {
    /// Its own span when the body fans out; `None` when the SERVER span stands for it.
    pub context: Option<SpanContext>,
    pub engine_request_id: String,
    /// `None` when it failed or never finished.
    pub end: Option<EngineRequestEnd>,
}

/// Everything the spans of one finished HTTP request are built from.
#[derive(Debug, Clone)]
pub struct RequestSpans {
    pub plan: SpanPlan,
    /// `X-Request-Id` when the client sent one, else the response id.
    pub request_id: String,
    pub model: String,
    /// The LoRA adapter the request named (`kiln.lora.name`); `None` for the base model.
    pub lora_name: Option<String>,
    /// `gen_ai.operation.name`: `chat` or `text_completion`.
    pub operation: &'static str,
    pub params: SpanParams,
    /// Prompt tokens as the response's usage counts them (each prompt once).
    pub prompt_tokens: usize,
    pub engine_requests: Vec<EngineRequestSpan>,
    /// When the response was done (the span's end if no engine request finished).
    pub ended: Instant,
}

impl RequestSpans {
    /// The SERVER span, then one child per engine request when the body fans out; with
    /// `phase_ids` (`--otlp-traces-detail phases`), each engine request's phase spans too.
    pub fn build(
        self,
        clock: &WallClock,
        scope: &InstrumentationScope,
        phase_ids: Option<&dyn IdGenerator>,
    ) -> Vec<SpanData> {
        let phases_of = |context: &SpanContext, end: Option<&EngineRequestEnd>| {
            let (Some(ids), Some(timeline)) = (phase_ids, end.and_then(|e| e.timeline.as_deref())) else {
                return Vec::new();
            };
            let parent = PhaseParent {
                context,
                clock,
                scope,
                ids,
            };
            phase_spans(&parent, timeline)
        };
        let completion_tokens: usize = self
            .engine_requests
            .iter()
            .filter_map(|r| r.end.as_ref())
            .map(|e| e.usage.completion_tokens)
            .sum();
        let reasons: Vec<StringValue> = self
            .engine_requests
            .iter()
            .map(|r| StringValue::from(r.end.as_ref().map_or("error", |e| e.reason.as_str())))
            .collect();
        let failed = self.engine_requests.iter().any(|r| r.end.is_none());
        let end = self
            .engine_requests
            .iter()
            .filter_map(|r| r.end.as_ref()?.timeline.as_ref()?.timestamps.finished)
            .max()
            .unwrap_or(self.ended);
        let mut attributes = vec![
            KeyValue::new("gen_ai.request.id", self.request_id.clone()),
            KeyValue::new("gen_ai.operation.name", self.operation),
            KeyValue::new("gen_ai.response.model", self.model.clone()),
            KeyValue::new("gen_ai.request.model", self.model.clone()),
            KeyValue::new("gen_ai.request.temperature", as_sent(self.params.temperature)),
            KeyValue::new("gen_ai.request.top_p", as_sent(self.params.top_p)),
            KeyValue::new("gen_ai.request.n", i64::from(self.params.n)),
            KeyValue::new("gen_ai.usage.prompt_tokens", self.prompt_tokens as i64),
            KeyValue::new("gen_ai.usage.completion_tokens", completion_tokens as i64),
            KeyValue::new("gen_ai.usage.input_tokens", self.prompt_tokens as i64),
            KeyValue::new("gen_ai.usage.output_tokens", completion_tokens as i64),
            KeyValue::new("gen_ai.response.finish_reasons", Value::Array(Array::String(reasons))),
        ];
        if let Some(max_tokens) = self.params.max_tokens {
            attributes.push(KeyValue::new("gen_ai.request.max_tokens", i64::from(max_tokens)));
        }
        if let Some(k) = self.params.top_k {
            attributes.push(KeyValue::new("gen_ai.request.top_k", i64::from(k)));
        }
        if let Some(lora) = &self.lora_name {
            attributes.push(KeyValue::new(LORA_NAME_ATTRIBUTE, lora.clone()));
        }
        let fans_out = self.engine_requests.iter().any(|r| r.context.is_some());
        let mut events = SpanEvents::default();
        if fans_out {
            attributes.push(KeyValue::new("gen_ai.latency.e2e", secs(end, self.plan.start)));
        } else if let Some(end) = self.engine_requests.first().and_then(|r| r.end.as_ref()) {
            attributes.extend(latency_attributes(&end.timings));
            events = span_events(end, clock);
        }
        let server = SpanData {
            span_context: self.plan.context.clone(),
            parent_span_id: self.plan.parent_span_id,
            parent_span_is_remote: self.plan.parent_is_remote,
            span_kind: SpanKind::Server,
            name: Cow::Borrowed(SERVER_SPAN_NAME),
            start_time: clock.at(self.plan.start),
            end_time: clock.at(end),
            attributes,
            dropped_attributes_count: 0,
            events,
            links: SpanLinks::default(),
            status: status(failed),
            instrumentation_scope: scope.clone(),
        };
        let server_span_id = server.span_context.span_id();
        let mut spans = vec![server];
        if !fans_out {
            spans.extend(phases_of(
                &self.plan.context,
                self.engine_requests.first().and_then(|r| r.end.as_ref()),
            ));
        }
        for mut request in self.engine_requests {
            let Some(context) = request.context.take() else {
                continue;
            };
            let phases = phases_of(&context, request.end.as_ref());
            spans.push(child_span(
                context,
                server_span_id,
                request,
                self.plan.start,
                self.ended,
                clock,
                scope,
            ));
            spans.extend(phases);
        }
        spans
    }
}

fn child_span(
    context: SpanContext,
    parent: SpanId,
    request: EngineRequestSpan,
    start: Instant,
    ended: Instant,
    clock: &WallClock,
    scope: &InstrumentationScope,
) -> SpanData {
    let mut attributes = vec![KeyValue::new("gen_ai.request.id", request.engine_request_id)];
    let (end, events) = match &request.end {
        Some(end) => {
            attributes.extend([
                KeyValue::new("gen_ai.usage.prompt_tokens", end.usage.prompt_tokens as i64),
                KeyValue::new("gen_ai.usage.completion_tokens", end.usage.completion_tokens as i64),
                KeyValue::new("gen_ai.usage.input_tokens", end.usage.prompt_tokens as i64),
                KeyValue::new("gen_ai.usage.output_tokens", end.usage.completion_tokens as i64),
                KeyValue::new(
                    "gen_ai.response.finish_reasons",
                    Value::Array(Array::String(vec![StringValue::from(end.reason.as_str())])),
                ),
            ]);
            attributes.extend(latency_attributes(&end.timings));
            let finished = end.timeline.as_ref().and_then(|t| t.timestamps.finished);
            (finished.unwrap_or(ended), span_events(end, clock))
        }
        None => (ended, SpanEvents::default()),
    };
    SpanData {
        span_context: context,
        parent_span_id: parent,
        parent_span_is_remote: false,
        span_kind: SpanKind::Internal,
        name: Cow::Borrowed(CHOICE_SPAN_NAME),
        start_time: clock.at(start),
        end_time: clock.at(end),
        attributes,
        dropped_attributes_count: 0,
        events,
        links: SpanLinks::default(),
        status: status(request.end.is_none()),
        instrumentation_scope: scope.clone(),
    }
}

fn status(failed: bool) -> Status {
    if failed {
        Status::error("an engine request failed")
    } else {
        Status::Unset
    }
}

/// An `f32` parameter as the client wrote it (0.7, not 0.699999988079071).
fn as_sent(value: f32) -> f64 {
    value.to_string().parse().unwrap_or(f64::from(value))
}

fn secs(later: Instant, earlier: Instant) -> f64 {
    later.saturating_duration_since(earlier).as_secs_f64()
}

/// vLLM's latency attributes, from the one `intervals()` the histograms use.
fn latency_attributes(t: &RequestIntervals) -> Vec<KeyValue> {
    let mut out = vec![KeyValue::new("gen_ai.latency.e2e", t.e2e_s)];
    let optional = [
        ("gen_ai.latency.time_in_queue", t.queue_s),
        ("gen_ai.latency.time_to_first_token", t.time_to_first_token_s),
        ("gen_ai.latency.time_in_model_prefill", t.prefill_s),
        ("gen_ai.latency.time_in_model_decode", t.decode_s),
        ("gen_ai.latency.time_in_model_inference", t.inference_s),
    ];
    out.extend(optional.into_iter().filter_map(|(k, v)| Some(KeyValue::new(k, v?))));
    out
}

/// The engine's scheduling events (already capped by the engine) as span events.
fn span_events(end: &EngineRequestEnd, clock: &WallClock) -> SpanEvents {
    let Some(timeline) = &end.timeline else {
        return SpanEvents::default();
    };
    let mut events = SpanEvents::default();
    events.events = timeline
        .events
        .events
        .iter()
        .map(|(kind, at)| Event::new(kind.as_str(), clock.at(*at), Vec::new(), 0))
        .collect();
    events.dropped_count = timeline.events.dropped_events;
    events
}

#[cfg(test)]
mod tests;
