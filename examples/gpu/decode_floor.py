"""Decode steps against the memory-bandwidth floor for the weights.

A decode step reads every weight once (the tied output head reads the embedding matrix;
the embedding lookup itself reads one row), whatever the batch, so the floor of a step is
weight bytes / bandwidth. The bandwidth is measured here, on the device the engine ran on
(CUDA when torch sees one, else the CPU), as a large device-to-device copy.
"""

import argparse
import json
import time
from pathlib import Path

import torch
from safetensors import safe_open


def weight_bytes(model: Path) -> int:
    total = 0
    for path in model.glob("*.safetensors"):
        with safe_open(path, "pt") as f:
            for name in f.keys():
                t = f.get_slice(name)
                n = 1
                for d in t.get_shape():
                    n *= d
                total += n * 4  # kiln holds float32 weights on CUDA and reads them all
    return total


def copy_bandwidth(device: str, gib: float = 1.0) -> float:
    """Bytes read plus written per second of the median of 10 copies."""
    n = int(gib * (1 << 30) / 4)
    src = torch.ones(n, device=device)
    dst = torch.empty_like(src)
    times = []
    for _ in range(11):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        dst.copy_(src)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    times = sorted(times[1:])
    return 2 * n * 4 / times[len(times) // 2]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--bench", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    a = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    bandwidth = copy_bandwidth(device)
    weights = weight_bytes(a.model)
    floor_ms = weights / bandwidth * 1e3
    bench = json.loads(a.bench.read_text())
    print(f"device {device}; weights {weights / 1e6:.0f} MB; copy bandwidth "
          f"{bandwidth / 1e9:.0f} GB/s; floor {floor_ms:.3f} ms a step")
    print("| streams | tok/s | ms a step | floor ms | step / floor |")
    print("|---|---|---|---|---|")
    rows = []
    for key, value in bench.items():
        if not key.startswith("decode_") or "tok_s" not in value:
            continue
        streams = 1 if key == "decode_long_context" else int(key.split("_")[1])
        step_ms = streams / value["tok_s"] * 1e3
        label = f"1 at {value['context']} context" if key == "decode_long_context" else str(streams)
        print(f"| {label} | {value['tok_s']:.1f} | {step_ms:.3f} | {floor_ms:.3f} | {step_ms / floor_ms:.1f}x |")
        rows.append({"case": key, "streams": streams, "tok_s": value["tok_s"], "step_ms": step_ms,
                     "floor_ms": floor_ms})
    a.out.write_text(json.dumps({"device": device, "weight_bytes": weights,
                                 "copy_bandwidth_bytes_s": bandwidth, "cases": rows}, indent=1))


if __name__ == "__main__":
    main()
