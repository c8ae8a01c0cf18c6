//! The load-reading policy (`power_of_two` in both routers) reads each replica's own load
//! (vllm-router polls `GET /get_load`, smg `GET /v1/loads`), not only what the router itself
//! sent there: with one replica kept busy by requests sent to it directly, past the router,
//! the router sends new requests to the other.

use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};

use super::fleet::{Fleet, Router, delta};
use crate::common::wait::wait_for;

/// Requests sent straight to the busy replica: three waves of its 8 sequences, each as long
/// as the tiny model's context allows, so that it stays loaded while the routed ones run.
const PINNED: usize = 24;
const PINNED_TOKENS: u32 = 3800;
/// Requests through the router, one at a time.
const ROUTED: usize = 20;

/// The load the router holds for `url`, from its `GET /get_loads` (vllm-router: `workers[]`
/// with `load`; smg: `loads[]` with `num_total_reqs`).
fn router_view(router: &Router, url: &str) -> Option<f64> {
    let body: Value = reqwest::blocking::get(format!("{}/get_loads", router.url))
        .ok()?
        .json()
        .ok()?;
    let workers = body["workers"].as_array().or_else(|| body["loads"].as_array())?;
    let worker = workers.iter().find(|w| w["worker"] == url)?;
    worker["load"].as_f64().or_else(|| worker["num_total_reqs"].as_f64())
}

/// The replica's own `GET /get_load`.
fn replica_load(url: &str) -> f64 {
    reqwest::blocking::get(format!("{url}/get_load"))
        .and_then(|r| r.json::<Value>())
        .ok()
        .and_then(|v| v["load"].as_f64())
        .unwrap_or(0.0)
}

/// Long completions sent straight to `url`, each on a thread of its own.
fn pin_requests(url: &str) -> Vec<JoinHandle<u16>> {
    (0..PINNED)
        .map(|i| {
            let url = format!("{url}/v1/completions");
            std::thread::spawn(move || {
                let client = reqwest::blocking::Client::builder()
                    .timeout(Duration::from_secs(600))
                    .build()
                    .expect("client");
                let body = json!({"prompt": format!("Keep busy {i}"), "max_tokens": PINNED_TOKENS, "ignore_eos": true});
                client.post(&url).json(&body).send().map_or(0, |r| r.status().as_u16())
            })
        })
        .collect()
}

/// Replica 0 busy with requests it got directly; of the router's requests, at most a fifth
/// go there (random choice would send half).
pub fn the_load_reading_policy_prefers_the_less_loaded_replica(fleet: &Fleet, router: &Router) {
    let busy = fleet.urls()[0].clone();
    let pinned = pin_requests(&busy);
    wait_for("the router to see replica 0 loaded", || {
        match router_view(router, &busy) {
            Some(load) if load >= 8.0 => Ok(()),
            seen => Err(format!("{seen:?} (the replica says {})", replica_load(&busy))),
        }
    });
    let before = fleet.served();
    let burst = router.traffic(&["burst", &ROUTED.to_string(), "1"]);
    assert_eq!(burst["errors"], json!([]), "{burst}\n{}", router.logs());
    let moved = delta(&fleet.served(), &before);
    let still_busy = replica_load(&busy);
    for handle in pinned {
        assert_eq!(handle.join().expect("pinned request thread"), 200);
    }
    assert!(
        still_busy >= 4.0,
        "the pinned requests ended before the routed ones (load {still_busy}): lengthen them"
    );
    // Replica 1 gets only routed requests; the rest of them went to the busy replica.
    let to_busy = ROUTED as f64 - moved[1];
    eprintln!("power_of_two with replica 0 busy: {to_busy} of {ROUTED} routed there");
    assert!(
        to_busy <= ROUTED as f64 / 5.0,
        "{to_busy} of {ROUTED} went to the busy replica: {moved:?}\n{}",
        router.logs()
    );
}
