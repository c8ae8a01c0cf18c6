//! SGLang's model gateway (PyPI `smg`) in front of two kiln replicas with `round_robin`,
//! `power_of_two`, `consistent_hashing` and `cache_aware`. smg takes kiln for vLLM (kiln
//! answers `/version`) and reads its load from `/metrics`.

use super::fleet::{
    Fleet, Router, a_repeated_prefix_lands_where_it_is_cached, consistent_hashing_keeps_a_session_on_one_replica,
    requests_spread, serves_the_openai_client, survives_a_replica_killed_mid_traffic,
};
use crate::common::process::free_port;

fn smg(fleet: &Fleet, policy: &str) -> Router {
    let mut args: Vec<String> = vec!["launch".into(), "--worker-urls".into()];
    args.extend(fleet.urls());
    for (flag, value) in [
        ("--policy", policy),
        ("--prometheus-port", &free_port().to_string()),
        ("--worker-startup-check-interval", "1"),
        ("--health-check-interval-secs", "1"),
        ("--health-success-threshold", "1"),
    ] {
        args.extend([flag.to_string(), value.to_string()]);
    }
    Router::start("KILN_TEST_SMG", &args, free_port())
}

#[test]
#[ignore = "needs smg and the openai client (KILN_TEST_SMG, KILN_TEST_PYTHON); .ci/run provides them"]
fn smg_drives_two_kiln_replicas_with_every_policy() {
    let mut fleet = Fleet::start(2);
    {
        let router = smg(&fleet, "round_robin");
        serves_the_openai_client(&router, 4);
        requests_spread(&fleet, &router, 8, 4.0);
    }
    {
        let router = smg(&fleet, "power_of_two");
        serves_the_openai_client(&router, 4);
        requests_spread(&fleet, &router, 12, 1.0);
    }
    {
        let router = smg(&fleet, "consistent_hashing");
        serves_the_openai_client(&router, 4);
        consistent_hashing_keeps_a_session_on_one_replica(&fleet, &router);
    }
    {
        let router = smg(&fleet, "cache_aware");
        serves_the_openai_client(&router, 4);
        a_repeated_prefix_lands_where_it_is_cached(&fleet, &router);
    }
    // Round robin, so that the killed replica is sure to have requests in flight.
    let router = smg(&fleet, "round_robin");
    let errors = survives_a_replica_killed_mid_traffic(&mut fleet, &router);
    eprintln!("smg: {errors} client errors of 40 with a replica killed mid-traffic");
}
