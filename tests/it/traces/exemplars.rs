//! From a slow bucket to its request, end to end: a chat request with a caller's
//! `traceparent` goes to the real `kiln` binary, which exports its span to a real rotel
//! receiver, while the real Prometheus (exemplar storage on) scrapes kiln's OpenMetrics. The
//! trace id Prometheus returns for the TTFT bucket is the one rotel received.

use serde_json::json;

use crate::common::prometheus_server::PrometheusServer;
use crate::common::wait::wait_for;
use crate::traces::{Rotel, chat, kiln_to, spans_of};

#[test]
#[ignore = "needs rotel (KILN_TEST_ROTEL) and the prometheus server (KILN_TEST_PROMETHEUS); .ci/run provides them"]
fn a_ttft_bucket_in_prometheus_links_to_the_trace_rotel_received() {
    let dir = tempfile::tempdir().unwrap();
    let rotel = Rotel::start(dir.path(), false);
    let kiln = kiln_to(&rotel, false);
    let prometheus = PrometheusServer::start_with_exemplars("kiln", &[format!("127.0.0.1:{}", kiln.port)]);

    let trace_id = "5b8efff798038103d269b633813fc60c";
    let body = json!({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 3});
    let (headers, _) = chat(&kiln, Some(&format!("00-{trace_id}-eee19b7ec3c1b174-01")), None, body);
    let request_id = headers["x-request-id"].to_str().unwrap().to_owned();

    // The receiver got the request's span, under the caller's trace.
    let spans = spans_of(&rotel, trace_id, 1);
    assert_eq!(spans[0].trace_id, trace_id);
    assert_eq!(spans[0].attributes["gen_ai.request.id"], format!("Str({request_id})"));

    // Prometheus scraped kiln (OpenMetrics) and stored the TTFT bucket's exemplar: the same
    // trace id, and the span id of the span rotel received.
    let query = "vllm:time_to_first_token_seconds_bucket";
    wait_for(&format!("an exemplar with trace {trace_id} for {query}"), || {
        let ids: Vec<String> = prometheus
            .query_exemplars(&kiln.client, query)
            .into_iter()
            .filter_map(|(_, e)| e["labels"]["trace_id"].as_str().map(str::to_owned))
            .collect();
        if ids.iter().any(|id| id == trace_id) {
            Ok(())
        } else {
            Err(format!("{ids:?}"))
        }
    });
}
