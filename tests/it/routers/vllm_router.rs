//! vllm-router (PyPI `vllm-router`, the vLLM project's Rust router) in front of two kiln
//! replicas with `round_robin`, `power_of_two`, `consistent_hash` and `cache_aware`.

use super::fleet::{
    Fleet, Router, a_repeated_prefix_lands_where_it_is_cached, consistent_hashing_keeps_a_session_on_one_replica,
    requests_spread, serves_the_openai_client, survives_a_replica_killed_mid_traffic,
};
use crate::common::process::free_port;

fn vllm_router(fleet: &Fleet, policy: &str) -> Router {
    let mut args: Vec<String> = vec!["--worker-urls".into()];
    args.extend(fleet.urls());
    for (flag, value) in [
        ("--policy", policy),
        ("--prometheus-port", &free_port().to_string()),
        ("--worker-startup-check-interval", "1"),
        ("--health-check-interval-secs", "1"),
        ("--health-success-threshold", "1"),
        ("--log-level", "info"),
    ] {
        args.extend([flag.to_string(), value.to_string()]);
    }
    Router::start("KILN_TEST_VLLM_ROUTER", &args, free_port())
}

#[test]
#[ignore = "needs vllm-router and the openai client (KILN_TEST_VLLM_ROUTER, KILN_TEST_PYTHON); .ci/run provides them"]
fn vllm_router_drives_two_kiln_replicas_with_every_policy() {
    let mut fleet = Fleet::start(2);
    {
        let router = vllm_router(&fleet, "round_robin");
        serves_the_openai_client(&router, 4);
        requests_spread(&fleet, &router, 8, 4.0);
    }
    {
        let router = vllm_router(&fleet, "power_of_two");
        serves_the_openai_client(&router, 4);
        requests_spread(&fleet, &router, 12, 1.0);
    }
    {
        let router = vllm_router(&fleet, "consistent_hash");
        serves_the_openai_client(&router, 4);
        consistent_hashing_keeps_a_session_on_one_replica(&fleet, &router);
    }
    {
        let router = vllm_router(&fleet, "cache_aware");
        serves_the_openai_client(&router, 4);
        a_repeated_prefix_lands_where_it_is_cached(&fleet, &router);
    }
    // Round robin, so that the killed replica is sure to have requests in flight.
    let router = vllm_router(&fleet, "round_robin");
    let errors = survives_a_replica_killed_mid_traffic(&mut fleet, &router);
    eprintln!("vllm-router: {errors} client errors of 40 with a replica killed mid-traffic");
}
