# SPDX-License-Identifier: Apache-2.0
# Ported from vLLM (tests/entrypoints/serve/instrumentator/test_fault_tolerance_metrics.py,
# see README.md); every change is marked `# kiln:` next to its assertion.
#
# kiln: vLLM drives the engine states through a mocked engine client. Over HTTP the driver
# starts kiln on the fake executor, set to panic on the step that runs token 7 (a prompt of
# [5, 6] gets 7 first) and to take a while to restart: a request puts the engine through
# "healthy" -> restarting (vLLM's "unhealthy") -> "healthy" again, which the test observes
# at /metrics.

import threading
import time

import requests
from prometheus_client.parser import text_string_to_metric_families


def _samples(server, path="metrics", name="vllm:engine_healthy"):
    response = requests.get(server.url_for(path))
    assert response.status_code == 200
    return [
        sample
        for family in text_string_to_metric_families(response.text)
        if family.name == name
        for sample in family.samples
    ]


def _wait_for(server, value, path, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        samples = _samples(server, path)
        if samples and samples[0].value == value:
            return samples
        time.sleep(0.05)
    raise AssertionError(f"vllm:engine_healthy never became {value}")


def _ft_metrics_follow_local_health(server, path):
    # kiln: (status, errored, expected) of vLLM's table, as kiln's executor goes through
    # them: healthy 1; a panicking step: restarting, 0 (vLLM's "unhealthy"); back 1.
    samples = _samples(server, path)
    assert len(samples) == 1
    assert samples[0].labels == {"engine": "0"}  # kiln: engine 0 (vLLM's mock says 2)
    assert samples[0].value == 1
    # The request fails with its batch once the executor is back: it runs in a thread while
    # the test watches the gauge go to 0 and back.
    failing = threading.Thread(
        target=lambda: requests.post(
            server.url_for("v1", "completions"),
            json={"prompt": [5, 6], "max_tokens": 5, "ignore_eos": True},
        )
    )
    failing.start()
    for expected in (0, 1):
        samples = _wait_for(server, expected, path)
        assert len(samples) == 1
        assert samples[0].labels == {"engine": "0"}
        assert samples[0].value == expected
    failing.join(timeout=60)


def test_ft_metrics_follow_local_health_metrics(server):
    _ft_metrics_follow_local_health(server, "metrics")


def test_ft_metrics_follow_local_health_metrics_slash(server):
    _ft_metrics_follow_local_health(server, "metrics/")


def test_ft_metrics_are_local_with_shared_multiprocess_metrics(server):
    # kiln: the single-process part of vLLM's test: the gauge, and the name[] filter.
    for path in ("metrics", "metrics/"):
        samples = _samples(server, path)
        assert samples[0].labels == {"engine": "0"}
        assert len(samples) == 1
        assert samples[0].value == 1
        assert _samples(server, path + "?name[]=vllm:engine_healthy") == samples
        # kiln: process_cpu_seconds_total stands in for the multiprocess "existing_metric".
        assert _samples(server, path + "?name[]=process_cpu_seconds_total") == []
