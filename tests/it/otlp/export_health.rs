//! `kiln_otlp_metric_exports_total{result}`: a real kiln pushing to a real receiver
//! (oteltap, `KILN_TEST_OTELTAP`) counts successes, and the counter itself reaches the
//! collector; pushing to a closed loopback port counts failures. Both read from `/metrics`.

use kiln::executor::fake::FakeBehaviour;

use crate::common::oteltap::Oteltap;
use crate::common::process::free_port;
use crate::common::wait::wait_until;
use crate::common::{Tiny, metric_value, scrape_until, start_fake};

const EXPORTS: &str = "kiln_otlp_metric_exports_total";

/// A kiln pushing metrics every 200 ms to `http://127.0.0.1:{port}/v1/metrics`.
fn pushing_to(port: u16) -> Tiny {
    start_fake(FakeBehaviour::default(), |c| {
        c.telemetry.otlp_endpoint = format!("http://127.0.0.1:{port}/v1/metrics");
        c.telemetry.otlp_interval_s = 0.2;
        c.telemetry.otlp_timeout_s = 2.0;
    })
}

fn exports(text: &str, result: &str) -> f64 {
    metric_value(text, EXPORTS, &format!("result=\"{result}\"")).expect("both result series exist")
}

#[test]
#[ignore = "needs oteltap (KILN_TEST_OTELTAP); .ci/run provides it"]
fn successful_pushes_are_counted_and_the_count_is_pushed_too() {
    let port = free_port();
    let tap = Oteltap::start(port);
    let t = pushing_to(port);
    let text = scrape_until(&t, |m| {
        metric_value(m, EXPORTS, "result=\"success\"").is_some_and(|v| v >= 2.0)
    });
    assert_eq!(exports(&text, "failure"), 0.0, "{text}");
    // The counter is an instrument like the others: it reaches the collector itself.
    wait_until("the export counter at oteltap", || {
        tap.received().lines().any(|l| {
            serde_json::from_str::<serde_json::Value>(l).is_ok_and(|m| m["name"] == "kiln_otlp_metric_exports")
        })
    });
}

#[test]
fn pushes_to_a_closed_port_are_counted_as_failures() {
    let t = pushing_to(free_port());
    let text = scrape_until(&t, |m| {
        metric_value(m, EXPORTS, "result=\"failure\"").is_some_and(|v| v >= 2.0)
    });
    assert_eq!(exports(&text, "success"), 0.0, "{text}");
    assert!(text.contains(&format!("# TYPE {EXPORTS} counter")));
}

#[test]
fn without_otlp_both_series_read_zero() {
    let t = start_fake(FakeBehaviour::default(), |_| {});
    let (_, text) = t.get_text("/metrics");
    assert_eq!(exports(&text, "success"), 0.0);
    assert_eq!(exports(&text, "failure"), 0.0);
}
