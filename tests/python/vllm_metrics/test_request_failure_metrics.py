# SPDX-License-Identifier: Apache-2.0
# Ported from vLLM (tests/entrypoints/serve/middleware/test_request_failure_metrics.py, see
# README.md): vLLM's cases verbatim where kiln has a route that fails that way; every change
# is marked `# kiln:` next to its assertion.
#
# kiln: vLLM adds routes that raise to the app under test. Over HTTP only kiln's routes
# exist; the driver starts kiln on the fake executor, set to fail the step that runs token 7
# (a prompt of [5, 6] gets 7 first), so a completion fails after generation started. The
# samples are read from /metrics.

import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families


def _num_failures(server, stage: str, code: int) -> float:
    text = requests.get(server.url_for("metrics")).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "vllm:request_failure_total"
        and sample.labels["stage"] == stage
        and sample.labels["code"] == str(code)
    )


# kiln: each of vLLM's paths mapped to the kiln request that fails (or not) the same way.
REQUESTS = {
    # VLLMValidationError("bad parameter", parameter="temperature")
    "/invalid_input": ("POST", "v1/completions", {"prompt": "a", "temperature": -1}),
    "/success": ("GET", "v1/models", None),
    "/does_not_exist": ("GET", "does_not_exist", None),
    # mark_generation_started, then an error: the engine fails the request.
    "/fails_after_generation_started": (
        "POST",
        "v1/completions",
        {"prompt": [5, 6], "max_tokens": 5, "ignore_eos": True},
    ),
    # A streaming response whose generator raises after the first event.
    "/stream_breaks_off": (
        "POST",
        "v1/completions",
        {"prompt": [5, 6], "max_tokens": 5, "ignore_eos": True, "stream": True},
    ),
}


def _requests_recorded(server) -> float:
    """Requests the HTTP metrics have recorded so far (every handler but the probes)."""
    text = requests.get(server.url_for("metrics")).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "http_request_duration_highr_seconds_count"
    )


def _get(server, path: str) -> requests.Response:
    # kiln: kiln records a request a moment after its response (a message to its stats
    # actor); the same record carries the HTTP families, so the test waits until they have
    # counted it before it reads vllm:request_failure_total.
    before = _requests_recorded(server)
    method, route, body = REQUESTS[path]
    response = requests.request(method, server.url_for(route), json=body)
    deadline = time.time() + 30
    while _requests_recorded(server) < before + 1:
        assert time.time() < deadline, "the request was never recorded"
        time.sleep(0.02)
    return response


@pytest.mark.parametrize(
    "path,code,stage,num_recorded",
    [
        ("/invalid_input", 400, "input_processing", 1),
        # kiln: ("/unhandled_error", 500, "input_processing", 1) dropped: README.md.
        ("/success", 200, "input_processing", 0),
        # Unmatched paths and probes are not requests for the model.
        ("/does_not_exist", 404, "input_processing", 0),
        ("/fails_after_generation_started", 500, "non_streaming", 1),
        ("/fails_after_generation_started", 500, "input_processing", 0),
    ],
)
def test_failures_are_counted_by_stage(server, path, code, stage, num_recorded):
    before = _num_failures(server, stage, code)

    response = _get(server, path)

    assert response.status_code == code
    assert _num_failures(server, stage, code) - before == num_recorded


def test_stream_breaking_off_is_counted(server):
    """The status was already sent as 200 when the stream generator raised."""
    before = _num_failures(server, "streaming", 500)

    response = _get(server, "/stream_breaks_off")

    assert response.status_code == 200
    assert _num_failures(server, "streaming", 500) - before == 1
