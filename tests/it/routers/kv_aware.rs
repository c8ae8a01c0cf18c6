//! vllm-router's `kv_aware` fed by two kiln replicas' KV events (`--kv-event-source`, one per
//! replica): a prefix warmed on one replica directly, not through the router, is credited to
//! that replica from its events alone, and the router's requests that repeat it land there.
//! Warmed on the second replica first (a router with no credit breaks the tie towards the
//! first), then on the first.

use std::process::Command;

use super::fleet::{Router, SHARED_PREFIX, delta};
use crate::common::process::{KilnProcess, Launch, free_port};
use crate::common::tool;
use crate::common::wait::wait_for;

/// A second long prefix, for the other direction.
const OTHER_PREFIX: &str = "Summarise the minutes of the parish council: the road repairs, the \
    new bus timetable, the village fete on the first Saturday of June, the complaints about \
    the bells, and the vote on the bench beside the pond, item by item, in plain words.";

/// A replica publishing its KV events on a PUB socket of its own (topic "", vLLM's default:
/// the router's static sources subscribe to the empty topic only); its events endpoint.
fn replica() -> (KilnProcess, String) {
    let events = free_port();
    let config = format!(r#"{{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:{events}"}}"#);
    let kiln = Launch::default().arg("--kv-events-config", &config).start();
    (kiln, format!("tcp://127.0.0.1:{events}"))
}

/// `router_traffic.py` straight at one replica (the router never sees it); its summary.
fn direct(kiln: &KilnProcess, args: &[&str]) -> serde_json::Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/router_traffic.py");
    let output = Command::new(tool("KILN_TEST_PYTHON"))
        .arg(script)
        .arg(kiln.url("/v1"))
        .args(args)
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{stdout:?}: {e}"))
}

/// The router's log without its colour codes.
fn plain_log(router: &Router) -> String {
    let log = router.logs();
    let mut out = String::with_capacity(log.len());
    let mut chars = log.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|&c| c == 'm');
        } else {
            out.push(c);
        }
    }
    out
}

/// Event batches from `replica` the router has applied to its index so far.
fn batches_applied(router: &Router, replica: &str) -> usize {
    let source = format!("source={replica} ");
    plain_log(router)
        .lines()
        .filter(|l| l.contains("kv_index live sequence advanced") && l.contains(&source))
        .count()
}

/// The largest `credited_prefix_tokens` of the router's decisions for `replica`.
fn credited_to(router: &Router, replica: &str) -> u64 {
    let worker = format!("worker=\"{replica}\"");
    plain_log(router)
        .lines()
        .filter(|l| l.contains("KV prefix decision") && l.contains(&worker))
        .filter_map(|l| l.split("credited_prefix_tokens=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .max()
        .unwrap_or(0)
}

/// The router's own count of `kv_aware` lookups with `result`.
fn lookups(metrics_port: u16, result: &str) -> f64 {
    let text = reqwest::blocking::get(format!("http://127.0.0.1:{metrics_port}/metrics"))
        .and_then(|r| r.text())
        .unwrap_or_default();
    let series = format!("vllm_router_kv_placement_lookups_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

fn served(replicas: &[KilnProcess; 2]) -> Vec<f64> {
    replicas
        .iter()
        .map(|r| counter(r, "vllm:request_success_total"))
        .collect()
}

fn counter(kiln: &KilnProcess, family: &str) -> f64 {
    let text = kiln
        .client
        .get(kiln.url("/metrics"))
        .send()
        .and_then(|r| r.text())
        .unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) || l.starts_with(&format!("{family} ")))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// Warms `prefix` on replica `home` directly, waits until the router has applied that
/// replica's events for it, then sends 3 requests repeating it through the router: all 3
/// land on `home`, credited with a cached prefix there.
fn a_prefix_warmed_directly_is_credited(
    router: &Router,
    metrics_port: u16,
    replicas: &[KilnProcess; 2],
    home: usize,
    prefix: &str,
) {
    let url = replicas[home].url("");
    let applied = batches_applied(router, &url);
    assert_eq!(direct(&replicas[home], &["burst", "1", "1", "-", prefix])["ok"], 1);
    wait_for("the router to apply the warmed replica's events", || {
        let now = batches_applied(router, &url);
        if now > applied { Ok(()) } else { Err(plain_log(router)) }
    });
    let (before, hits) = (served(replicas), lookups(metrics_port, "hit"));
    let burst = router.traffic(&["burst", "3", "1", "-", prefix]);
    assert_eq!(burst["ok"], 3, "{burst}\n{}", router.logs());
    let moved = delta(&served(replicas), &before);
    let mut expected = vec![0.0, 0.0];
    expected[home] = 3.0;
    assert_eq!(
        moved,
        expected,
        "all 3 on the replica that cached the prefix\n{}",
        plain_log(router)
    );
    assert!(lookups(metrics_port, "hit") >= hits + 3.0, "{}", plain_log(router));
    assert!(
        credited_to(router, &url) >= 16,
        "a block or more credited\n{}",
        plain_log(router)
    );
}

#[test]
#[ignore = "needs vllm-router and the openai client (KILN_TEST_VLLM_ROUTER, KILN_TEST_PYTHON); .ci/run provides them"]
fn vllm_router_kv_aware_credits_the_replica_that_cached_a_prefix() {
    let ((first, first_events), (second, second_events)) = (replica(), replica());
    let replicas = [first, second];
    let metrics_port = free_port();
    let models: serde_json::Value = replicas[0]
        .client
        .get(replicas[0].url("/v1/models"))
        .send()
        .and_then(|r| r.json())
        .expect("/v1/models");
    let model = models["data"][0]["id"].as_str().expect("a model id").to_string();
    let mut args: Vec<String> = vec!["--worker-urls".into()];
    args.extend(replicas.iter().map(|r| r.url("")));
    for (replica, events) in replicas.iter().zip([&first_events, &second_events]) {
        args.extend(["--kv-event-source".into(), format!("{}={events}", replica.url(""))]);
    }
    for (flag, value) in [
        ("--policy", "kv_aware"),
        ("--kv-event-model", &model),
        ("--prometheus-port", &metrics_port.to_string()),
        ("--worker-startup-check-interval", "1"),
        ("--log-level", "debug"),
    ] {
        args.extend([flag.to_string(), value.to_string()]);
    }
    let router = Router::start("KILN_TEST_VLLM_ROUTER", &args, free_port());
    // Until a replica's first batch arrives its subscription may not be up yet: a throwaway
    // prompt (three blocks or more) on each, repeated until the router has applied one.
    for (i, kiln) in replicas.iter().enumerate() {
        let url = kiln.url("");
        let mut round = 0;
        wait_for("the router's subscription to each replica", || {
            if batches_applied(&router, &url) > 0 {
                return Ok(());
            }
            round += 1;
            let filler = format!("replica {i} round {round}: {}", "one two three four five ".repeat(12));
            direct(kiln, &["burst", "1", "1", "-", &filler]);
            Err(plain_log(&router))
        });
    }
    a_prefix_warmed_directly_is_credited(&router, metrics_port, &replicas, 1, SHARED_PREFIX);
    a_prefix_warmed_directly_is_credited(&router, metrics_port, &replicas, 0, OTHER_PREFIX);
}
