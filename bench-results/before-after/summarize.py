"""Table of a before/after run (run.sh): every figure per round, and the ratio of the means."""
import json, statistics as st, sys

out, rounds = sys.argv[1], int(sys.argv[2])
names = sys.argv[3:5] if len(sys.argv) >= 5 else ["before", "after"]
rows = [
    ("engine", "prefill 512 tokens, tok/s", lambda e: e["prefill"]["tok_s"]),
    ("engine", "decode 1 stream, tok/s", lambda e: e["decode_1"]["tok_s"]),
    ("engine", "decode 8 streams, tok/s", lambda e: e["decode_8"]["tok_s"]),
    ("engine", "decode 32 streams, tok/s", lambda e: e["decode_32"]["tok_s"]),
    ("engine", "decode at 4096 context, tok/s", lambda e: e["decode_long_context"]["tok_s"]),
    ("serving", "output tok/s", lambda s: s["output_throughput"]),
    ("serving", "TTFT p50 ms", lambda s: s["ttft_ms"]["p50"]),
    ("serving", "TTFT p99 ms", lambda s: s["ttft_ms"]["p99"]),
    ("serving", "TPOT p50 ms", lambda s: s["tpot_ms"]["p50"]),
    ("serving", "ITL p50 ms", lambda s: s["itl_ms"]["p50"]),
    ("serving", "ITL p99 ms", lambda s: s["itl_ms"]["p99"]),
    ("serving", "e2e p50 ms", lambda s: s["e2e_ms"]["p50"]),
]
print(f"| figure | {names[0]} | {names[1]} | after / before |")
print("|---|---|---|---|")
for kind, name, f in rows:
    v = {k: [f(json.load(open(f"{out}/{k}-{r}-{kind}.json"))) for r in range(1, rounds + 1)] for k in ("before", "after")}
    fm = lambda xs: " / ".join(f"{x:.1f}" for x in xs)
    print(f"| {kind}: {name} | {fm(v['before'])} | {fm(v['after'])} | {st.mean(v['after']) / st.mean(v['before']):.2f} |")
