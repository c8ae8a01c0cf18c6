//! vllm-router's data-parallel mode in front of one `kiln -dp 2`: the router reads `dp_size`
//! from `/get_server_info`, addresses `url@0` and `url@1` and pins each request with
//! `X-data-parallel-rank`. Under round robin, requests that share a long prefix alternate
//! between the two engines (each engine's `vllm:request_success_total`), which kiln's own
//! choice would not do (it sends repeats of a prefix to the engine that cached it): the pins
//! are honoured.

use super::fleet::{Router, SHARED_PREFIX, serves_the_openai_client};
use crate::common::process::{Launch, free_port};
use crate::common::wait::wait_for;

/// The sum of `family`'s series of engine `engine`.
fn engine_counter(metrics: &str, family: &str, engine: usize) -> f64 {
    let label = format!("engine=\"{engine}\"");
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) && l.contains(&label))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

#[test]
#[ignore = "needs vllm-router and the openai client (KILN_TEST_VLLM_ROUTER, KILN_TEST_PYTHON); .ci/run provides them"]
fn vllm_router_pins_the_ranks_of_one_data_parallel_kiln() {
    let kiln = Launch::default().arg("-dp", "2").start();
    let url = kiln.url("");
    let args: Vec<String> = [
        "--worker-urls",
        &url,
        "--policy",
        "round_robin",
        "--intra-node-data-parallel-size",
        "2",
        "--prometheus-port",
        &free_port().to_string(),
        "--worker-startup-check-interval",
        "1",
        "--health-check-interval-secs",
        "1",
    ]
    .map(String::from)
    .to_vec();
    let router = Router::start("KILN_TEST_VLLM_ROUTER", &args, free_port());
    serves_the_openai_client(&router, 4);
    let served = || {
        let metrics = kiln
            .client
            .get(kiln.url("/metrics"))
            .send()
            .and_then(|r| r.text())
            .expect("metrics");
        [0, 1].map(|e| engine_counter(&metrics, "vllm:request_success_total", e))
    };
    let before = served();
    let burst = router.traffic(&["burst", "8", "1", "-", SHARED_PREFIX]);
    assert_eq!(burst["ok"], 8, "{burst}\n{}", router.logs());
    wait_for("both engines' counts", || {
        let after = served();
        let moved = [after[0] - before[0], after[1] - before[1]];
        if moved == [4.0, 4.0] {
            Ok(())
        } else {
            Err(format!("{moved:?}"))
        }
    });
}
