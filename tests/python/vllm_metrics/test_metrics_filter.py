# SPDX-License-Identifier: Apache-2.0
# Ported from vLLM (tests/entrypoints/serve/instrumentator/test_metrics_filter.py, see
# README.md): vLLM's assertions verbatim where kiln's families allow; every change is marked
# `# kiln:` next to its assertion.
#
# kiln: vLLM's fixture registers four synthetic metrics in a throwaway registry
# (vllm:num_requests_waiting = 2, counter vllm:tokens = 10, vllm:unrequested = 3, histogram
# vllm:request_latency_seconds); over HTTP the live server's own families stand in for them:
# vllm:num_requests_waiting (0 on an idle server), vllm:prompt_tokens for vllm:tokens,
# vllm:num_requests_running for vllm:unrequested and vllm:e2e_request_latency_seconds for
# vllm:request_latency_seconds. kiln's series carry model_name and engine (as vLLM's real
# ones do), so samples are read with prometheus_client's parser rather than as unlabelled
# text lines.

import time

import requests
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.parser import text_string_to_metric_families

# kiln: kiln gzips /metrics when the client accepts it (METRICS.md, docs/04-metrics.md);
# vLLM's endpoint does not, and its test client accepts gzip. These requests accept none.
IDENTITY = {"Accept-Encoding": "identity"}


def _get(server, params=None, headers=None):
    return requests.get(
        server.url_for("metrics"), params=params, headers={**IDENTITY, **(headers or {})}
    )


def _value(text: str, sample_name: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == sample_name:
                return sample.value
    return None


def _scrape_once_recorded(server, sample: str, within_s: float = 30.0):
    """kiln: an HTTP request is counted by the stats actor after its response goes out,
    so a scrape made at once may come first; scrape until `sample` shows (bounded)."""
    deadline = time.monotonic() + within_s
    while True:
        response = _get(server)
        if sample in response.text or time.monotonic() > deadline:
            return response
        time.sleep(0.1)


def test_single_process_unfiltered_metrics_remain_available(server):
    # kiln: GET /v1/models in place of the fixture's /test route.
    requests.get(server.url_for("v1", "models"))
    response = _scrape_once_recorded(server, "http_requests_total{")

    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE_PLAIN_0_0_4
    assert "content-encoding" not in response.headers
    # kiln: "vllm:num_requests_waiting 2.0" in text: the live gauge, 0 when idle.
    assert _value(response.text, "vllm:num_requests_waiting") == 0.0
    # kiln: "vllm:unrequested 3.0" in text: another live gauge.
    assert _value(response.text, "vllm:num_requests_running") == 0.0
    assert "http_requests_total{" in response.text


def test_single_process_name_parameters_filter_metrics(server):
    response = _get(
        server,
        params=[
            ("name[]", "vllm:num_requests_waiting"),
            ("name[]", "vllm:prompt_tokens_total"),
        ],
    )

    assert response.status_code == 200
    # kiln: values of the live families (see the header).
    assert _value(response.text, "vllm:num_requests_waiting") == 0.0
    assert _value(response.text, "vllm:prompt_tokens_total") == 0.0
    assert "vllm:prompt_tokens_created" not in response.text
    assert "vllm:num_requests_running" not in response.text


def test_metrics_preserves_existing_non_get_behavior(server):
    # kiln: vLLM answers HEAD, POST, PUT and OPTIONS on /metrics with 200 (its ASGI app
    # ignores the method). kiln answers HEAD as GET without a body; POST and PUT get 405
    # with `Allow: GET, HEAD` (RFC 9110: /metrics is read-only), a deliberate difference
    # (docs/04-metrics.md). OPTIONS is answered by the CORS layer when CORS is on.
    head = requests.head(server.url_for("metrics"))
    assert head.status_code == 200
    for method in ("POST", "PUT"):
        response = requests.request(method, server.url_for("metrics"))
        assert response.status_code == 405, method
        assert "GET" in response.headers["allow"]


def test_histogram_family_name_does_not_select_samples(server):
    response = _get(server, params=[("name[]", "vllm:e2e_request_latency_seconds")])

    assert response.status_code == 200
    assert response.content == b""


def test_histogram_sample_names_can_be_filtered(server):
    response = _get(
        server,
        params=[
            ("name[]", "vllm:e2e_request_latency_seconds_bucket"),
            ("name[]", "vllm:e2e_request_latency_seconds_sum"),
        ],
    )

    assert response.status_code == 200
    assert "vllm:e2e_request_latency_seconds_bucket{" in response.text
    # kiln: "…_sum " (unlabelled) in vLLM's fixture; kiln's series are labelled.
    assert "vllm:e2e_request_latency_seconds_sum{" in response.text
    assert "vllm:e2e_request_latency_seconds_count" not in response.text


def test_openmetrics_content_negotiation(server):
    response = _get(
        server,
        headers={"Accept": "application/openmetrics-text; version=1.0.0"},
    )

    assert response.status_code == 200
    assert response.headers["content-type"].startswith(
        "application/openmetrics-text; version=1.0.0"
    )
    assert response.text.endswith("# EOF\n")


def test_unknown_metric_name_returns_empty_response(server):
    response = _get(server, params=[("name[]", "vllm:does_not_exist")])

    assert response.status_code == 200
    assert response.content == b""


def test_multiprocess_http_metric_is_emitted_once(server):
    # kiln: one process, one registry; the requests of this file so far went to
    # GET /v1/models (one series) and to /metrics (an excluded handler).
    response = _get(server, params=[("name[]", "http_requests_total")])

    assert response.status_code == 200
    assert response.text.count("# HELP http_requests_total ") == 1
    assert response.text.count("# TYPE http_requests_total counter") == 1
    assert response.text.count("http_requests_total{") == 1
