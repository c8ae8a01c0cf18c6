use std::time::Duration;

use opentelemetry::trace::{TraceId, TraceState};

use super::*;
use crate::engine::intervals::RequestTimestamps;
use crate::engine::timeline::{RequestEventKind, RequestEvents};

fn plan(start: Instant) -> SpanPlan {
    SpanPlan {
        context: SpanContext::new(
            TraceId::from_bytes([7; 16]),
            SpanId::from_bytes([1; 8]),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        parent_span_id: SpanId::from_bytes([9; 8]),
        parent_is_remote: true,
        start,
    }
}

fn end(t0: Instant, completion_tokens: usize) -> EngineRequestEnd {
    let at = |ms| Some(t0 + Duration::from_millis(ms));
    let timestamps = RequestTimestamps {
        arrival: t0,
        queued: at(1),
        scheduled: at(3),
        first_token: at(10),
        last_token: at(40),
        finished: at(41),
    };
    let mut events = RequestEvents::default();
    events.record(RequestEventKind::Scheduled, t0 + Duration::from_millis(3));
    events.record(RequestEventKind::FirstToken, t0 + Duration::from_millis(10));
    EngineRequestEnd {
        reason: FinishReason::Length,
        usage: TokenUsage {
            prompt_tokens: 5,
            completion_tokens,
            cached_prompt_tokens: 0,
        },
        timings: timestamps.intervals(completion_tokens),
        timeline: Some(Box::new(RequestTimeline { timestamps, events })),
    }
}

fn request(t0: Instant, engine_requests: Vec<EngineRequestSpan>) -> RequestSpans {
    RequestSpans {
        plan: plan(t0),
        request_id: "req-1".into(),
        model: "tiny".into(),
        lora_name: None,
        operation: "chat",
        params: SpanParams {
            max_tokens: Some(4),
            temperature: 0.5,
            top_p: 0.9,
            top_k: Some(3),
            n: 1,
        },
        prompt_tokens: 5,
        engine_requests,
        ended: t0 + Duration::from_millis(50),
    }
}

fn attr<'a>(span: &'a SpanData, key: &str) -> &'a Value {
    &span
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .unwrap_or_else(|| panic!("{key} missing"))
        .value
}

#[test]
fn one_engine_request_is_the_server_span_with_its_latencies_and_events() {
    let t0 = Instant::now();
    let clock = WallClock::now();
    let spans = request(
        t0,
        vec![EngineRequestSpan {
            context: None,
            engine_request_id: "req-1-0".into(),
            end: Some(end(t0, 4)),
        }],
    )
    .build(&clock, &InstrumentationScope::builder("kiln").build(), None);
    assert_eq!(spans.len(), 1);
    let s = &spans[0];
    assert_eq!(s.name, SERVER_SPAN_NAME);
    assert_eq!(s.span_kind, SpanKind::Server);
    assert_eq!(s.parent_span_id, SpanId::from_bytes([9; 8]));
    assert_eq!(s.start_time, clock.at(t0));
    assert_eq!(
        s.end_time,
        clock.at(t0 + Duration::from_millis(41)),
        "ends when the engine finished"
    );
    assert_eq!(attr(s, "gen_ai.usage.completion_tokens"), &Value::I64(4));
    assert_eq!(attr(s, "gen_ai.usage.output_tokens"), &Value::I64(4));
    assert_eq!(attr(s, "gen_ai.request.top_k"), &Value::I64(3));
    assert_eq!(attr(s, "gen_ai.latency.time_to_first_token"), &Value::F64(0.01));
    assert_eq!(attr(s, "gen_ai.latency.time_in_queue"), &Value::F64(0.002));
    let names: Vec<&str> = s.events.iter().map(|e| e.name.as_ref()).collect();
    assert_eq!(names, ["scheduled", "first_token"]);
    assert_eq!(s.events[1].timestamp, clock.at(t0 + Duration::from_millis(10)));
}

#[test]
fn a_fanned_out_body_gets_a_child_span_per_engine_request() {
    let t0 = Instant::now();
    let clock = WallClock::now();
    let p = plan(t0);
    let children: Vec<EngineRequestSpan> = (0..2u8)
        .map(|i| EngineRequestSpan {
            context: Some(p.child(SpanId::from_bytes([i + 20; 8]))),
            engine_request_id: format!("req-1-{i}"),
            end: (i == 0).then(|| end(t0, 3)),
        })
        .collect();
    let spans = request(t0, children).build(&clock, &InstrumentationScope::builder("kiln").build(), None);
    assert_eq!(spans.len(), 3);
    let server = &spans[0];
    assert_eq!(attr(server, "gen_ai.usage.completion_tokens"), &Value::I64(3));
    assert!(
        matches!(server.status, Status::Error { .. }),
        "one engine request failed"
    );
    for child in &spans[1..] {
        assert_eq!(child.parent_span_id, server.span_context.span_id());
        assert_eq!(child.span_context.trace_id(), server.span_context.trace_id());
        assert_eq!(child.span_kind, SpanKind::Internal);
    }
    assert_eq!(attr(&spans[1], "gen_ai.request.id"), &Value::from("req-1-0"));
    assert_eq!(spans[1].events.len(), 2);
}

/// `end(t0, n)` with two prefill chunks: 3 tokens in 3-6 ms, 2 tokens in 6-10 ms.
fn end_with_chunks(t0: Instant) -> EngineRequestEnd {
    let mut e = end(t0, 4);
    let at = |ms| t0 + Duration::from_millis(ms);
    let events = &mut e.timeline.as_mut().unwrap().events;
    for (start, stop, position, tokens) in [(3, 6, 0, 3), (6, 10, 3, 2)] {
        events.record_prefill_chunk(crate::engine::timeline::PrefillChunk {
            start: at(start),
            end: at(stop),
            position,
            tokens,
        });
    }
    e
}

#[test]
fn phase_spans_hang_under_the_span_that_stands_for_the_engine_request() {
    use super::super::phase_spans::{DECODE_SPAN_NAME, PREFILL_SPAN_NAME, QUEUE_SPAN_NAME};
    let t0 = Instant::now();
    let clock = WallClock::now();
    let scope = InstrumentationScope::builder("kiln").build();
    let ids = opentelemetry_sdk::trace::RandomIdGenerator::default();
    let one = || {
        vec![EngineRequestSpan {
            context: None,
            engine_request_id: "req-1-0".into(),
            end: Some(end_with_chunks(t0)),
        }]
    };
    // Off by default: the same request yields only its server span.
    assert_eq!(request(t0, one()).build(&clock, &scope, None).len(), 1);

    let spans = request(t0, one()).build(&clock, &scope, Some(&ids));
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            SERVER_SPAN_NAME,
            QUEUE_SPAN_NAME,
            PREFILL_SPAN_NAME,
            PREFILL_SPAN_NAME,
            DECODE_SPAN_NAME
        ]
    );
    let server = &spans[0];
    let at = |ms| clock.at(t0 + Duration::from_millis(ms));
    for phase in &spans[1..] {
        assert_eq!(phase.parent_span_id, server.span_context.span_id());
        assert_eq!(phase.span_context.trace_id(), server.span_context.trace_id());
        assert_ne!(phase.span_context.span_id(), server.span_context.span_id());
        assert_eq!(phase.span_kind, SpanKind::Internal);
    }
    assert_eq!(
        (spans[1].start_time, spans[1].end_time),
        (at(0), at(3)),
        "arrival to scheduled"
    );
    assert_eq!((spans[2].start_time, spans[2].end_time), (at(3), at(6)));
    assert_eq!(attr(&spans[2], "kiln.prefill.tokens"), &Value::I64(3));
    assert_eq!(attr(&spans[3], "kiln.prefill.position"), &Value::I64(3));
    assert_eq!(attr(&spans[3], "kiln.prefill.tokens"), &Value::I64(2));
    assert_eq!(
        (spans[4].start_time, spans[4].end_time),
        (at(10), at(41)),
        "first token to end"
    );

    // A fanned-out body: each choice's phases under that choice's span.
    let p = plan(t0);
    let children: Vec<EngineRequestSpan> = (0..2u8)
        .map(|i| EngineRequestSpan {
            context: Some(p.child(SpanId::from_bytes([i + 20; 8]))),
            engine_request_id: format!("req-1-{i}"),
            end: Some(end_with_chunks(t0)),
        })
        .collect();
    let spans = request(t0, children).build(&clock, &scope, Some(&ids));
    assert_eq!(spans.len(), 1 + 2 * 5);
    for choice in spans.iter().filter(|s| s.name == CHOICE_SPAN_NAME) {
        let phases = spans
            .iter()
            .filter(|s| s.parent_span_id == choice.span_context.span_id())
            .count();
        assert_eq!(phases, 4, "queue, two prefill chunks, decode");
    }
}
