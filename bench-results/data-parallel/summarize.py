"""Prints run.sh's table (markdown) and writes summary.json beside the cases, with the CPU
model and flags: output tok/s, TTFT p50 and TPOT p50 per engines x streams."""
import json
import os
import sys

out = sys.argv[1]


def cpu():
    model, flags = "", []
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and not model:
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = [x for x in line.split(":", 1)[1].split() if x.startswith(("avx", "f16c", "fma", "amx"))]
    return model, flags


rows = []
print("| engines x cores each | streams | output tok/s | TTFT p50 ms | TPOT p50 ms | failed |")
print("|---|---|---|---|---|---|")
for dp in (1, 2):
    for c in (1, 8, 32):
        d = json.load(open(os.path.join(out, f"dp{dp}-c{c}.json")))
        row = {
            "data_parallel_size": dp,
            "streams": c,
            "output_tok_s": d["output_throughput"],
            "ttft_p50_ms": d["ttft_ms"].get("p50"),
            "tpot_p50_ms": d["tpot_ms"].get("p50"),
            "failed": d["failed"],
        }
        rows.append(row)
        cores = f"{dp} x {2 // dp}"
        print(f"| {cores} | {c} | {row['output_tok_s']:.1f} | {row['ttft_p50_ms']:.0f} | {row['tpot_p50_ms']:.1f} | {row['failed']} |")
model, flags = cpu()
summary = {"benchmark": "data-parallel", "cpu": model, "flags": flags, "load_average": os.getloadavg(), "rows": rows}
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
