//! Exemplars end to end. Requests carrying a trace go through kiln's real scheduler and
//! stats actor: the test submits them to the running server's scheduler as the API does,
//! with `Generate::trace` set (what the API will set for traced requests). Their latencies
//! land in histogram buckets with their trace as exemplar; `GET /metrics` answers OpenMetrics
//! 1.0 with those exemplars to a client that asks for it (Prometheus does) and text 0.0.4
//! otherwise; and a real Prometheus with exemplar storage (`KILN_TEST_PROMETHEUS`) scraping
//! kiln returns the trace ids from `/api/v1/query_exemplars`.

use std::sync::Arc;
use std::time::Instant;

use kiln::engine::events::TokenEvent;
use kiln::engine::messages::Generate;
use kiln::engine::request::NewRequest;
use kiln::engine::sampling_params::SamplingParams;
use kiln::engine::trace_context::TraceContext;
use kiln::engine::types::Operation;
use kiln::executor::fake::FakeBehaviour;

use crate::common::prometheus_server::{PrometheusServer, promtool_check_metrics};
use crate::common::wait::wait_until;
use crate::common::{Tiny, scrape_until, start_fake};

/// What Prometheus 2.42 sends.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const TTFT_BUCKET: &str = "vllm:time_to_first_token_seconds_bucket";

/// A trace context of its own for request `n`.
fn trace(n: u8) -> TraceContext {
    let mut trace_id = [0xa0; 16];
    trace_id[15] = n;
    TraceContext {
        trace_id,
        span_id: [n; 8],
    }
}

/// Runs one request with `trace` through the server's scheduler, to its end.
fn traced_request(t: &Tiny, trace: TraceContext) {
    let scheduler = t.server.scheduler.clone();
    actix_web::rt::System::new().block_on(async move {
        let (events, mut received) = tokio::sync::mpsc::unbounded_channel();
        let generate = Generate {
            request: NewRequest {
                id: format!("traced-{}", trace.span_id_hex()),
                prompt_token_ids: vec![5, 6, 7],
                params: Arc::new(SamplingParams {
                    max_tokens: Some(3),
                    ignore_eos: true,
                    ..Default::default()
                }),
                seed: None,
                operation: Operation::Chat,
                arrival: Instant::now(),
                trace: Some(trace),
                lora: None,
            },
            events,
        };
        scheduler
            .send(generate)
            .await
            .expect("the scheduler answers")
            .expect("admitted");
        loop {
            match received.recv().await.expect("the request ends with an event") {
                TokenEvent::Token { .. } | TokenEvent::PromptLogprobs(_) => {}
                TokenEvent::Finished { .. } => break,
                TokenEvent::Failed { error } => panic!("the traced request failed: {error}"),
            }
        }
    });
}

fn get_metrics(t: &Tiny, url: &str, accept: Option<&str>) -> (String, String) {
    let mut request = t.client.get(url);
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    let resp = request.send().expect("metrics");
    assert_eq!(resp.status().as_u16(), 200);
    let content_type = resp.headers()["content-type"].to_str().expect("ascii").to_owned();
    (content_type, resp.text().expect("body"))
}

fn exemplar_lines<'a>(text: &'a str, series: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| l.starts_with(series) && l.contains(" # {trace_id=\""))
        .collect()
}

#[test]
fn metrics_answers_openmetrics_with_exemplars_to_who_asks_and_text_to_the_rest() {
    let port = crate::common::process::free_port();
    let t = start_fake(FakeBehaviour::default(), |c| {
        c.telemetry.metrics_listen = format!("127.0.0.1:{port}");
    });
    let url = format!("http://127.0.0.1:{port}/metrics");
    traced_request(&t, trace(1));
    // The stats actor records after the request ended: wait for its observation.
    let ttft_count = |text: &str| crate::common::metric_value(text, "vllm:time_to_first_token_seconds_count", "");
    wait_until("the TTFT observation", || {
        ttft_count(&get_metrics(&t, &url, None).1) == Some(1.0)
    });

    let (content_type, om) = get_metrics(&t, &url, Some(PROMETHEUS_ACCEPT));
    assert_eq!(content_type, OPENMETRICS);
    assert!(om.ends_with("\n# EOF\n"), "{om}");
    let trace_id = trace(1).trace_id_hex();
    let ttft = exemplar_lines(&om, TTFT_BUCKET);
    assert_eq!(ttft.len(), 1, "{om}");
    assert!(
        ttft[0].contains(&format!("# {{trace_id=\"{trace_id}\",span_id=\"0101010101010101\"}} ")),
        "{}",
        ttft[0]
    );
    for family in [
        "vllm:e2e_request_latency_seconds_bucket",
        "gen_ai_server_request_duration_seconds_bucket",
    ] {
        assert_eq!(exemplar_lines(&om, family).len(), 1, "{family}");
    }
    assert!(om.contains("# TYPE vllm:request_success counter\n"));

    // No Accept, or one without OpenMetrics: text 0.0.4 as before, no exemplars.
    for accept in [None, Some("text/plain"), Some("*/*")] {
        let (content_type, text) = get_metrics(&t, &url, accept);
        assert_eq!(content_type, TEXT, "{accept:?}");
        assert!(exemplar_lines(&text, TTFT_BUCKET).is_empty() && !text.contains("# EOF"));
    }

    // gzip still applies to OpenMetrics.
    let resp = t
        .client
        .get(&url)
        .header("accept", PROMETHEUS_ACCEPT)
        .header("accept-encoding", "gzip")
        .send()
        .expect("metrics");
    assert_eq!(resp.headers()["content-encoding"], "gzip");
    assert_eq!(resp.headers()["content-type"], OPENMETRICS);
}

#[test]
fn the_public_listener_negotiates_too() {
    let t = start_fake(FakeBehaviour::default(), |_| {});
    traced_request(&t, trace(2));
    let url = t.server.url("/metrics");
    scrape_until(&t, |text| {
        crate::common::metric_value(text, "vllm:e2e_request_latency_seconds_count", "") == Some(1.0)
    });
    let (content_type, om) = get_metrics(&t, &url, Some("application/openmetrics-text"));
    assert_eq!(content_type, OPENMETRICS);
    assert!(om.contains(&trace(2).trace_id_hex()), "{om}");
    assert_eq!(get_metrics(&t, &url, None).0, TEXT);
}

#[test]
#[ignore = "needs the prometheus server (KILN_TEST_PROMETHEUS) and promtool (KILN_TEST_PROMTOOL); .ci/run provides them"]
fn prometheus_scrapes_openmetrics_and_returns_the_trace_ids_as_exemplars() {
    let t = start_fake(FakeBehaviour::default(), |_| {});
    let prometheus = PrometheusServer::start_with_exemplars("kiln", &[t.server.addr.to_string()]);
    let client = &t.client;
    let ready = format!("http://127.0.0.1:{}/-/ready", prometheus.port);
    wait_until("Prometheus ready", || {
        client.get(&ready).send().is_ok_and(|r| r.status().is_success())
    });
    // The scrape is healthy and its samples are stored.
    wait_until("a healthy scrape", || {
        let up = prometheus.query(client, "up{job=\"kiln\"}");
        up.first().and_then(|s| s["value"][1].as_str()) == Some("1")
    });
    // Each traced request's exemplar reaches Prometheus before the next one can replace it
    // in kiln's store (the latest per bucket wins), so every trace id must come back.
    let traces: Vec<TraceContext> = (1..=3).map(trace).collect();
    for trace in &traces {
        traced_request(&t, *trace);
        let id = trace.trace_id_hex();
        wait_until("the trace's exemplar in Prometheus", || {
            prometheus
                .query_exemplars(&t.client, TTFT_BUCKET)
                .iter()
                .any(|(_, e)| e["labels"]["trace_id"] == id.as_str())
        });
    }
    let exemplars = prometheus.query_exemplars(&t.client, TTFT_BUCKET);
    for trace in &traces {
        let (series, exemplar) = exemplars
            .iter()
            .find(|(_, e)| e["labels"]["trace_id"] == trace.trace_id_hex().as_str())
            .expect("every fed trace id is stored");
        assert_eq!(exemplar["labels"]["span_id"], trace.span_id_hex().as_str());
        // It sits in the bucket its value belongs to: at most that bucket's `le`.
        let value: f64 = exemplar["value"].as_str().expect("value").parse().expect("number");
        let le: f64 = series["le"]
            .as_str()
            .expect("le")
            .replace("+Inf", "inf")
            .parse()
            .expect("le");
        assert!(value <= le, "{exemplar} in {series}");
        assert_eq!(series["model_name"], "tiny-llama");
    }
    let e2e = prometheus.query_exemplars(&t.client, "vllm:e2e_request_latency_seconds_bucket");
    assert!(!e2e.is_empty(), "no e2e exemplars");
    let count = prometheus.query(client, "vllm:time_to_first_token_seconds_count{job=\"kiln\"}");
    assert!(!count.is_empty(), "the OpenMetrics scrape stored no samples");
    // Text 0.0.4 stays parseable by Go's own text parser.
    let (_, text) = get_metrics(&t, &t.server.url("/metrics"), None);
    let report = promtool_check_metrics(&text);
    assert!(
        !report.contains("error while linting") && !report.contains("parsing error"),
        "{report}"
    );
}
