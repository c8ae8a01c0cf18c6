"""Reads kiln's /metrics the way the Gateway API Inference Extension's endpoint picker does.

The endpoint picker (and llm-d's) parses the classic Prometheus text format, takes for each
metric the first series of its family (vLLM sets no timestamps, so "the latest" is the
first), and reads `block_size` and `num_gpu_blocks` from the labels of
`vllm:cache_config_info` as integers. This does the same with prometheus_client's text
parser, every INTERVAL_MS, COUNT times, and prints one JSON object per scrape:
{"waiting", "running", "kv_cache_usage", "block_size", "num_gpu_blocks", "series"}, where
"series" counts each family's series by model_name, or {"error": ...} for a scrape that did
not parse or lacked a metric.

Usage: gateway_metrics_reader.py URL COUNT INTERVAL_MS
"""

import json
import sys
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"
KV_USAGE = "vllm:kv_cache_usage_perc"
CACHE_CONFIG = "vllm:cache_config_info"


def first_series(families, name):
    family = families.get(name)
    if family is None:
        raise LookupError(f"metric family {name!r} not found")
    samples = [s for s in family.samples if s.name == name]
    if not samples:
        raise LookupError(f"no metrics available for {name!r}")
    return samples[0]


def read(url):
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode("utf-8")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    config = first_series(families, CACHE_CONFIG)
    series = {}
    for name in (WAITING, RUNNING, KV_USAGE, CACHE_CONFIG):
        counts = {}
        for s in families[name].samples:
            if s.name == name:
                model = s.labels.get("model_name", "")
                counts[model] = counts.get(model, 0) + 1
        series[name] = counts
    return {
        "waiting": first_series(families, WAITING).value,
        "running": first_series(families, RUNNING).value,
        "kv_cache_usage": first_series(families, KV_USAGE).value,
        # int() refuses "16.0" or "": the picker's strconv.Atoi would too.
        "block_size": int(config.labels["block_size"]),
        "num_gpu_blocks": int(config.labels["num_gpu_blocks"]),
        "series": series,
    }


def main():
    url, count, interval_ms = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    next_at = time.monotonic()
    for _ in range(count):
        try:
            result = read(url)
        except Exception as e:  # a scrape the picker could not use
            result = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(result), flush=True)
        next_at += interval_ms / 1000
        time.sleep(max(0.0, next_at - time.monotonic()))


if __name__ == "__main__":
    main()
