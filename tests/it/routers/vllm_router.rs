//! vllm-router (PyPI `vllm-router`, the vLLM project's Rust router) in front of two kiln
//! replicas with `round_robin`, `power_of_two`, `consistent_hash` and `cache_aware`.

use super::fleet::{Router, every_policy, router_args};
use crate::common::process::free_port;

#[test]
#[ignore = "needs vllm-router and the openai client (KILN_TEST_VLLM_ROUTER, KILN_TEST_PYTHON); .ci/run provides them"]
fn vllm_router_drives_two_kiln_replicas_with_every_policy() {
    every_policy("vllm-router", "consistent_hash", |fleet, policy| {
        let mut args = router_args(&[], fleet, policy);
        args.extend(["--log-level".to_string(), "info".to_string()]);
        Router::start("KILN_TEST_VLLM_ROUTER", &args, free_port())
    });
}
