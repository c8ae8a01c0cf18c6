# SPDX-License-Identifier: Apache-2.0
# Ported from vLLM (tests/v1/metrics/test_histogram_buckets.py, see README.md): vLLM's
# snapshots verbatim; every change is marked `# kiln:` next to its assertion.
#
# kiln: vLLM reads the bounds from a PrometheusStatLogger built in-process and from its
# histogram_buckets() function; over HTTP they are read from a fresh kiln's /metrics, where
# every histogram is exposed from start-up. The driver starts kiln with --kv-cache-metrics
# for the default tests, and with --custom-histogram-buckets for the override tests
# (KILN_CUSTOM_BUCKETS says which value; the tests of the other kind are deselected).

import json
import os

import requests
from prometheus_client.parser import text_string_to_metric_families

DEFAULT_BUCKET_SNAPSHOTS: dict[str, list[float]] = {
    "request_latency": [
        0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
        60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
    ],
    "time_to_first_token": [
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
        5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
    ],
    "inter_token_latency": [
        0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
        7.5, 10.0, 20.0, 40.0, 80.0,
    ],
    "iteration_tokens": [
        1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
    ],
    "request_params_n": [1, 2, 5, 10, 20],
    "request_num_preemptions": [1, 2, 3, 4, 5, 10, 20],
    "kv_cache_residency": [
        0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30,
        60, 120, 300, 600, 1200, 1800,
    ],
}

METRIC_FAMILIES: dict[str, str] = {
    "vllm:e2e_request_latency_seconds": "request_latency",
    "vllm:request_queue_time_seconds": "request_latency",
    "vllm:request_inference_time_seconds": "request_latency",
    "vllm:request_prefill_time_seconds": "request_latency",
    "vllm:request_decode_time_seconds": "request_latency",
    "vllm:time_to_first_token_seconds": "time_to_first_token",
    "vllm:inter_token_latency_seconds": "inter_token_latency",
    "vllm:request_time_per_output_token_seconds": "inter_token_latency",
    "vllm:iteration_tokens_total": "iteration_tokens",
    "vllm:request_params_n": "request_params_n",
    "vllm:request_num_preemptions": "request_num_preemptions",
    "vllm:request_prompt_tokens": "request_tokens",
    "vllm:request_generation_tokens": "request_tokens",
    "vllm:request_max_num_generation_tokens": "request_tokens",
    "vllm:request_params_max_tokens": "request_tokens",
    "vllm:request_prefill_kv_computed_tokens": "request_tokens",
    "vllm:kv_block_lifetime_seconds": "kv_cache_residency",
    "vllm:kv_block_idle_before_evict_seconds": "kv_cache_residency",
    "vllm:kv_block_reuse_gap_seconds": "kv_cache_residency",
}

BUCKET_FAMILY_KEYS = {
    "request_latency",
    "time_to_first_token",
    "inter_token_latency",
    "iteration_tokens",
    "request_params_n",
    "request_num_preemptions",
    "request_tokens",
    "kv_cache_residency",
}

# The request_tokens series for a 32768-token model, as vLLM's snapshot lists it.
REQUEST_TOKENS_32768 = [
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000,
]


def collect_histogram_buckets(server) -> dict[str, list[float]]:
    """Read back each vllm:* histogram's finite bucket bounds by metric name."""
    # kiln: from the server's /metrics instead of prometheus_client.REGISTRY.
    text = requests.get(server.url_for("metrics")).text
    found: dict[str, list[float]] = {}
    for metric in text_string_to_metric_families(text):
        if metric.name.startswith("vllm:") and metric.type == "histogram":
            found[metric.name] = sorted(
                {
                    float(sample.labels["le"])
                    for sample in metric.samples
                    if sample.name.endswith("_bucket") and sample.labels["le"] != "+Inf"
                }
            )
    return found


def test_default_bucket_snapshots(server):
    """Static families must expose exactly today's default boundaries."""
    # kiln: histogram_buckets(family) is vLLM's Python API; the same snapshots are read
    # from every histogram of the family on /metrics.
    found = collect_histogram_buckets(server)
    for metric_name, family in METRIC_FAMILIES.items():
        if family in DEFAULT_BUCKET_SNAPSHOTS:
            assert found[metric_name] == DEFAULT_BUCKET_SNAPSHOTS[family], metric_name


def test_request_tokens_bucket_snapshot(server):
    """The 1-2-5 token-count series must be stable for a given model len."""
    # kiln: the served model's context in place of max_model_len=32768: vLLM's series cut
    # at it (histogram_buckets(..., max_model_len) is vLLM's Python API).
    expected = [b for b in REQUEST_TOKENS_32768 if b <= server.max_model_len]
    assert collect_histogram_buckets(server)["vllm:request_prompt_tokens"] == expected


def test_bucket_family_keys():
    """The declared families are exactly these, and each one feeds a histogram."""
    assert set(METRIC_FAMILIES.values()) == BUCKET_FAMILY_KEYS


def test_prometheus_logger_default_buckets(server):
    """Every core engine histogram must use its family's defaults."""
    # kiln: TEST_MODEL (distilgpt2, 1024 tokens) is the served model; its context sets
    # the request_tokens series.
    found = collect_histogram_buckets(server)
    assert set(found) == set(METRIC_FAMILIES)
    for metric_name, family in METRIC_FAMILIES.items():
        if family == "request_tokens":
            expected = [b for b in REQUEST_TOKENS_32768 if b <= server.max_model_len]
        else:
            expected = DEFAULT_BUCKET_SNAPSHOTS[family]
        assert found[metric_name] == [float(b) for b in expected], metric_name


def _custom() -> dict[str, list[float]]:
    value = os.environ.get("KILN_CUSTOM_BUCKETS")
    assert value, "KILN_CUSTOM_BUCKETS: the driver sets it with --custom-histogram-buckets"
    return json.loads(value)


def test_histogram_buckets_override_precedence(server):
    """A present family key wins verbatim; absent keys keep defaults."""
    overrides = {
        "request_latency": [0.5, 1.0],
        "request_tokens": [16.0, 4096.0],
    }
    # kiln: the server runs with these overrides (the driver passes them).
    assert _custom() == overrides
    found = collect_histogram_buckets(server)
    assert found["vllm:e2e_request_latency_seconds"] == [0.5, 1.0]
    # An override replaces the max_model_len-derived series entirely.
    assert found["vllm:request_prompt_tokens"] == [16.0, 4096.0]
    assert (
        found["vllm:time_to_first_token_seconds"]
        == DEFAULT_BUCKET_SNAPSHOTS["time_to_first_token"]
    )


def test_prometheus_logger_applies_overrides(server):
    """Every family must honour an override, with a distinct list each."""
    overridden: dict[str, list[float]] = {
        family: [index + 1.0, index + 2.0]
        for index, family in enumerate(sorted(BUCKET_FAMILY_KEYS))
    }
    # kiln: the server runs with these overrides (the driver passes them).
    assert _custom() == overridden
    found = collect_histogram_buckets(server)
    assert set(found) == set(METRIC_FAMILIES)
    for metric_name, family in METRIC_FAMILIES.items():
        assert found[metric_name] == overridden[family], metric_name
