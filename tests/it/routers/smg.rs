//! SGLang's model gateway (PyPI `smg`) in front of two kiln replicas with `round_robin`,
//! `power_of_two`, `consistent_hashing` and `cache_aware`. smg takes kiln for vLLM (kiln
//! answers `/version`) and reads its load from `/metrics`.

use super::fleet::{Router, every_policy, router_args};
use crate::common::process::free_port;

#[test]
#[ignore = "needs smg and the openai client (KILN_TEST_SMG, KILN_TEST_PYTHON); .ci/run provides them"]
fn smg_drives_two_kiln_replicas_with_every_policy() {
    every_policy("smg", "consistent_hashing", |fleet, policy| {
        // Loads polled every second (its default is 10 s), as vllm-router polls `/get_load`.
        let mut args = router_args(&["launch"], fleet, policy);
        args.extend(["--load-monitor-interval".to_string(), "1".to_string()]);
        Router::start("KILN_TEST_SMG", &args, free_port())
    });
}
