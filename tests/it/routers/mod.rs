//! kiln behind the routers users put in front of vLLM and SGLang replicas, from PyPI:
//! vllm-router (`KILN_TEST_VLLM_ROUTER`) and SGLang's model gateway, smg (`KILN_TEST_SMG`),
//! each in front of two real kiln processes on loopback. Through each router and policy the
//! official `openai` client's completions, chat and streaming work; requests spread across
//! the replicas (each replica's own `vllm:request_success_total`); `power_of_two` sends new
//! requests to the replica that is not busy with requests sent to it directly; a session sticks to one
//! replica under consistent hashing; a repeated prefix lands where it is cached under
//! `cache_aware` (that replica's `vllm:prefix_cache_hits_total`), and a prefix warmed on one
//! replica is credited to it by vllm-router's `kv_aware` from kiln's KV events; a replica killed mid-traffic
//! costs the clients no more than the counted errors, and is taken back after its restart.

mod data_parallel;
mod fleet;
mod fleet_prometheus;
mod kv_aware;
mod load_aware;
mod smg;
mod vllm_router;
