"""Reads `vllm:lora_requests_info` from kiln's /metrics the way the Gateway API Inference
Extension's endpoint picker (and llm-d's) does for LoRA affinity: with the classic text
parser (prometheus_client's here), over the family's series it skips those whose running
and waiting adapter labels are both empty, takes the one with the largest value (the update
time), splits `running_lora_adapters` and `waiting_lora_adapters` on commas and reads
`max_lora` as an integer. Prints one JSON object: {"max_lora", "running", "waiting",
"updated", "series"} ("series": how many series the family has), or {"error": ...}.

Usage: lora_info_reader.py URL
"""

import json
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

LORA_INFO = "vllm:lora_requests_info"


def read(url):
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode("utf-8")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    family = families.get(LORA_INFO)
    if family is None:
        raise LookupError(f"metric family {LORA_INFO!r} not found")
    samples = [s for s in family.samples if s.name == LORA_INFO]
    latest = None
    for s in samples:
        if not s.labels.get("running_lora_adapters") and not s.labels.get("waiting_lora_adapters"):
            continue
        if latest is None or s.value > latest.value:
            latest = s
    if latest is None:
        raise LookupError("no series with running or waiting adapters")
    split = lambda v: [a for a in v.split(",") if a]
    return {
        # int() refuses "2.0" or "": the picker's strconv.Atoi would too.
        "max_lora": int(latest.labels["max_lora"]),
        "running": split(latest.labels.get("running_lora_adapters", "")),
        "waiting": split(latest.labels.get("waiting_lora_adapters", "")),
        "updated": latest.value,
        "series": len(samples),
    }


def main():
    try:
        result = read(sys.argv[1])
    except Exception as e:  # a scrape the picker could not use
        result = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
