//! One HTTP request's identity and outcome, shared by the middleware that logs it and the
//! handler that serves it: the request id (`X-Request-Id` when the client sent a usable one,
//! else the response id), the incoming W3C trace context, and, once its engine requests end,
//! the figures of its access-log line and its spans. Choices report their ends here; when the
//! last holder lets go (the response is done, streamed or not), the spans are queued and the
//! access line's figures are set.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;

use super::choice_parts::ChoiceEnd;
use crate::engine::timeline::RequestTimeline;
use crate::traces::Tracer;
use crate::traces::span::{EngineRequestEnd, RequestSpans};

/// The longest client request id kept; longer ones are replaced by the response id.
const MAX_REQUEST_ID_LEN: usize = 128;

/// What the access line reports about a generation request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenerationOutcome {
    pub model: String,
    /// The LoRA adapter the request went through; `None` for the base model.
    pub lora_name: Option<String>,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// The choices' finish reasons, distinct, in index order, comma-separated.
    pub finish_reason: String,
    pub queue_s: Option<f64>,
    pub ttft_s: Option<f64>,
    pub e2e_s: Option<f64>,
}

/// Per HTTP request, in the request's extensions.
#[derive(Debug, Default)]
pub struct RequestLog {
    /// The request id the client sent, if usable.
    client_request_id: Option<String>,
    /// The W3C context of `traceparent`/`tracestate` (empty when absent or malformed).
    pub parent: Context,
    state: Mutex<LogState>,
}

#[derive(Debug, Default)]
struct LogState {
    /// Set by the handler when the client sent none (the response id).
    request_id: Option<String>,
    trace_id: Option<String>,
    outcome: Option<GenerationOutcome>,
    /// A generation record exists whose outcome is still to come.
    expects_outcome: bool,
    /// What waits for that outcome (the access line), run once it is set.
    on_outcome: Deferred,
}

/// An action put off until an event (Debug says only whether one waits).
#[derive(Default)]
struct Deferred(Option<Box<dyn FnOnce() + Send>>);

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Deferred(waiting)"
        } else {
            "Deferred(none)"
        })
    }
}

struct Headers<'a>(&'a actix_web::http::header::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

impl RequestLog {
    pub fn from_headers(headers: &actix_web::http::header::HeaderMap) -> Self {
        let client_request_id = headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .filter(|id| usable_request_id(id))
            .map(str::to_owned);
        let parent = TraceContextPropagator::new().extract(&Headers(headers));
        let trace_id = crate::traces::incoming_trace_id(&parent).map(|t| t.to_string());
        Self {
            client_request_id,
            parent,
            state: Mutex::new(LogState {
                trace_id,
                ..LogState::default()
            }),
        }
    }

    /// The request's log as the access-log middleware made it (a fresh one without it).
    pub fn of(req: &actix_web::HttpRequest) -> Arc<Self> {
        use actix_web::HttpMessage;
        req.extensions().get::<Arc<Self>>().cloned().unwrap_or_default()
    }

    /// The client's request id, or `fallback` (the response id), which is then recorded.
    pub fn request_id_or(&self, fallback: &str) -> String {
        if let Some(id) = &self.client_request_id {
            return id.clone();
        }
        if let Ok(mut state) = self.state.lock() {
            state.request_id = Some(fallback.to_owned());
        }
        fallback.to_owned()
    }

    /// The id to echo and log: the client's, the handler's, or `None`.
    pub fn request_id(&self) -> Option<String> {
        self.client_request_id
            .clone()
            .or_else(|| self.state.lock().ok()?.request_id.clone())
    }

    /// The request's trace id (its own span's when traced, else the incoming one).
    pub fn trace_id(&self) -> Option<String> {
        self.state.lock().ok()?.trace_id.clone()
    }

    fn set_trace_id(&self, trace_id: String) {
        if let Ok(mut state) = self.state.lock() {
            state.trace_id = Some(trace_id);
        }
    }

    pub fn outcome(&self) -> Option<GenerationOutcome> {
        self.state.lock().ok()?.outcome.clone()
    }

    fn set_outcome(&self, outcome: GenerationOutcome) {
        let waiting = self.state.lock().ok().and_then(|mut state| {
            state.outcome = Some(outcome);
            state.on_outcome.0.take()
        });
        if let Some(run) = waiting {
            run();
        }
    }

    /// Runs `run` once the generation outcome is known: now when there is none to wait for
    /// (no generation, or it already ended), else when its record reports it. The response
    /// body can end before the output thread lets go of the record.
    pub fn when_outcome_known(&self, run: Box<dyn FnOnce() + Send>) {
        let run = match self.state.lock() {
            Ok(mut state) if state.expects_outcome && state.outcome.is_none() => {
                state.on_outcome = Deferred(Some(run));
                return;
            }
            _ => run,
        };
        run();
    }

    fn expect_outcome(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.expects_outcome = true;
        }
    }
}

/// Visible ASCII only, bounded: the id reaches logs, spans and a response header.
fn usable_request_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_REQUEST_ID_LEN && id.bytes().all(|b| b.is_ascii_graphic())
}

/// The ends of one body's engine requests, collected as they come; on drop the spans are
/// queued and the access outcome recorded.
pub struct RequestRecord {
    log: Arc<RequestLog>,
    tracer: Option<(Arc<Tracer>, Mutex<Option<RequestSpans>>)>,
    model: String,
    lora_name: Option<String>,
    prompt_tokens: usize,
    ends: Mutex<Vec<Option<ChoiceEnd>>>,
}

impl RequestRecord {
    /// `spans` is `Some` when the request is sampled; its engine requests are filled in here.
    pub fn new(
        log: Arc<RequestLog>,
        traced: Option<(Arc<Tracer>, RequestSpans)>,
        model: String,
        prompt_tokens: usize,
        choices: usize,
    ) -> Self {
        log.expect_outcome();
        if let Some((_, spans)) = &traced {
            log.set_trace_id(spans.plan.context.trace_id().to_string());
        }
        Self {
            log,
            tracer: traced.map(|(t, s)| (t, Mutex::new(Some(s)))),
            model,
            lora_name: None,
            prompt_tokens,
            ends: Mutex::new(vec![None; choices]),
        }
    }

    /// The LoRA adapter the request went through (`None`: the base model).
    pub fn with_lora(mut self, lora_name: Option<String>) -> Self {
        self.lora_name = lora_name;
        self
    }

    /// Choice `index` ended as the engine reported (its timeline only when traced).
    pub fn choice_ended(&self, index: u32, end: ChoiceEnd, timeline: Option<Box<RequestTimeline>>) {
        if let Ok(mut ends) = self.ends.lock()
            && let Some(slot) = ends.get_mut(index as usize)
        {
            *slot = Some(end);
        }
        if let Some((_, spans)) = &self.tracer
            && let Ok(mut spans) = spans.lock()
            && let Some(request) = spans.as_mut().and_then(|s| s.engine_requests.get_mut(index as usize))
        {
            request.end = Some(EngineRequestEnd {
                reason: end.reason,
                usage: end.usage,
                timings: end.timings,
                timeline,
            });
        }
    }

    fn outcome(&self) -> GenerationOutcome {
        let ends = self.ends.lock().map(|e| e.clone()).unwrap_or_default();
        let finished: Vec<&ChoiceEnd> = ends.iter().flatten().collect();
        let mut reasons: Vec<&str> = Vec::new();
        for end in ends.iter() {
            let reason = end.as_ref().map_or("error", |e| e.reason.as_str());
            if !reasons.contains(&reason) {
                reasons.push(reason);
            }
        }
        let min = |f: fn(&ChoiceEnd) -> Option<f64>| finished.iter().filter_map(|e| f(e)).reduce(f64::min);
        GenerationOutcome {
            model: self.model.clone(),
            lora_name: self.lora_name.clone(),
            prompt_tokens: self.prompt_tokens,
            completion_tokens: finished.iter().map(|e| e.usage.completion_tokens).sum(),
            finish_reason: reasons.join(","),
            queue_s: min(|e| e.timings.queue_s),
            ttft_s: min(|e| e.timings.time_to_first_token_s),
            e2e_s: finished.iter().map(|e| e.timings.e2e_s).reduce(f64::max),
        }
    }
}

impl Drop for RequestRecord {
    fn drop(&mut self) {
        self.log.set_outcome(self.outcome());
        if let Some((tracer, spans)) = &self.tracer
            && let Some(mut spans) = spans.lock().ok().and_then(|mut s| s.take())
        {
            spans.ended = Instant::now();
            tracer.finish(spans);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bounded_visible_ascii_request_ids_are_kept() {
        assert!(usable_request_id("abc-123_XYZ"));
        assert!(!usable_request_id(""));
        assert!(!usable_request_id("has space"));
        assert!(!usable_request_id("tab\there"));
        assert!(!usable_request_id(&"x".repeat(MAX_REQUEST_ID_LEN + 1)));
    }
}
