# SPDX-License-Identifier: Apache-2.0
# Ported from vLLM (tests/v1/metrics/test_priority_labels.py, see README.md): the cases of
# the FCFS policy, which kiln schedules by; every change is marked `# kiln:` next to its
# assertion. The priority-policy cases need `--scheduling-policy priority`, which kiln
# lacks (README.md).
#
# kiln: vLLM feeds PrometheusStatLogger a finished request's stats directly; over HTTP one
# completion finishes on the live server and its series are read from /metrics.

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families


def _collect_samples(server, metric_name: str):
    """Collect all samples for a given metric name from the server's /metrics."""
    text = requests.get(server.url_for("metrics")).text
    samples = []
    for collector in text_string_to_metric_families(text):
        if collector.name == metric_name:
            for sample in collector.samples:
                samples.append(sample)
    return samples


@pytest.fixture(scope="module")
def finished_request(server):
    # kiln: a real request in place of _make_finished_request_stats (priority 3 in vLLM's
    # FCFS case: a client's priority field that FCFS ignores).
    client = server.get_client()
    client.completions.create(
        model=server.model_name, prompt="a", max_tokens=3, extra_body={"priority": 3}
    )


def test_fcfs_metrics_have_no_priority_label(server, finished_request):
    """FCFS mode: metrics should NOT have a 'priority' label."""
    e2e_samples = _collect_samples(server, "vllm:e2e_request_latency_seconds")
    assert len(e2e_samples) > 0
    for sample in e2e_samples:
        assert "priority" not in sample.labels


def test_request_priority_histogram_absent_in_fcfs(server, finished_request):
    """FCFS mode: vllm:request_priority is not registered."""
    assert _collect_samples(server, "vllm:request_priority") == []


def test_fcfs_metrics_have_correct_engine_label(server, finished_request):
    """FCFS mode: finished-request metrics still carry the model/engine labels."""
    samples = _collect_samples(server, "vllm:e2e_request_latency_seconds")
    assert len(samples) > 0
    for sample in samples:
        assert sample.labels["engine"] == "0"
        # kiln: the served model's name in place of the stand-in config's "test-model".
        assert sample.labels["model_name"] == server.model_name
