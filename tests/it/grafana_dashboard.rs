//! `deploy/grafana/kiln.json`: every panel query, with Grafana's variables filled in, runs
//! through a real Prometheus scraping kiln (tiny model) under a little traffic and must
//! return data; the template variables' selectors must find kiln's job. `.ci/run` sets
//! `KILN_TEST_PROMETHEUS`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::prometheus_server::PrometheusServer;
use crate::common::start_tiny;

/// Grafana's variables as the dashboard would resolve them against this one job: "All" is the
/// variables' `allValue`; the rate interval spans several 1 s scrapes.
const VARIABLES: [(&str, &str); 7] = [
    ("${datasource}", "prometheus"),
    ("$__rate_interval", "10s"),
    ("$__interval", "2s"),
    ("$__range", "60s"),
    ("$job", "kiln"),
    ("$instance", ".+"),
    ("$datasource", "prometheus"),
];

fn fill(query: &str) -> String {
    let filled = VARIABLES.iter().fold(query.to_string(), |q, (k, v)| q.replace(k, v));
    assert!(!filled.contains('$'), "unfilled variable in {filled}");
    filled
}

/// (panel title, query) of every panel target.
fn panel_queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let title = panel["title"].as_str().expect("title").to_string();
            out.push((title, target["expr"].as_str().expect("expr").to_string()));
        }
    }
    out
}

/// A result with at least one number (not NaN): the panel draws something.
fn has_data(result: &[Value]) -> bool {
    result.iter().any(|r| {
        r["value"][1]
            .as_str()
            .and_then(|v| v.parse::<f64>().ok())
            .is_some_and(f64::is_finite)
    })
}

#[test]
#[ignore = "needs the prometheus server (KILN_TEST_PROMETHEUS); .ci/run provides it"]
fn every_panel_of_kilns_dashboard_shows_data_from_a_real_prometheus() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/kiln.json")).expect("dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("dashboard JSON");
    let queries = panel_queries(&dashboard);
    assert!(queries.len() >= 15, "only {} panel queries", queries.len());

    let t = start_tiny(|_| {});
    let prometheus = PrometheusServer::start("kiln", &[t.server.addr.to_string()]);

    // A little traffic for the whole wait: both GenAI operations, and a 404 beside the 200s.
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = {
        let (stop, url, client) = (stop.clone(), t.server.url("/"), t.client.clone());
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut sent = 0u32;
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline && sent < 20_000 {
                let body = json!({"prompt": format!("n{sent}"), "max_tokens": 3, "ignore_eos": true});
                let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3});
                for (path, body) in [("v1/completions", body), ("v1/chat/completions", chat)] {
                    let status = client
                        .post(format!("{url}{path}"))
                        .json(&body)
                        .send()
                        .expect("request")
                        .status();
                    assert_eq!(status, 200, "{path}");
                }
                let _ = client.get(format!("{url}v1/nothing-here")).send();
                sent += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

    let deadline = Instant::now() + Duration::from_secs(90);
    let mut empty: Vec<&(String, String)> = queries.iter().collect();
    while !empty.is_empty() {
        empty.retain(|(_, q)| !has_data(&prometheus.query(&t.client, &fill(q))));
        if Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    stop.store(true, Ordering::Relaxed);
    traffic.join().expect("traffic thread");
    let missing: Vec<String> = empty.iter().map(|(title, q)| format!("{title}: {q}")).collect();
    assert!(missing.is_empty(), "panels without data:\n{}", missing.join("\n"));

    // The template variables: their selectors must find kiln under its job and instance.
    for variable in dashboard["templating"]["list"].as_array().expect("templating") {
        let Some(definition) = variable["definition"].as_str() else {
            continue;
        };
        let selector = definition
            .strip_prefix("label_values(")
            .and_then(|d| d.rsplit_once(','))
            .map(|(s, _)| s)
            .expect("label_values(selector, label)");
        let label = variable["name"].as_str().expect("name");
        let found = prometheus.query(&t.client, &fill(selector));
        assert!(
            found
                .iter()
                .any(|s| s["metric"][label].as_str().is_some_and(|v| !v.is_empty())),
            "variable {label}: {selector} found no {label}: {found:?}"
        );
    }
}
