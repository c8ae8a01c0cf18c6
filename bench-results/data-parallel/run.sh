#!/usr/bin/env bash
# `-dp 2` (two engines, one core each) against `-dp 1` (one engine, both cores) on the
# default model, at 1, 8 and 32 streams, in one run: bench_serving's JSON per case lands in
# $OUT, and summarize.py prints the table. Usage (from the repository root, after
# `cargo build --release --example bench_serving`):
#   MODEL=path/to/model.gguf bench-results/data-parallel/run.sh
set -euo pipefail
KILN=${KILN:-target/release/kiln}
BENCH=${BENCH:-target/release/examples/bench_serving}
OUT=${OUT:-bench-results/data-parallel/$(date +%F)}
PORT=${PORT:-18431}
mkdir -p "$OUT"
for dp in 1 2; do
  "$KILN" serve --model "$MODEL" --port "$PORT" --data-parallel-size "$dp" > "$OUT/kiln-dp$dp.log" 2>&1 &
  pid=$!
  curl -sf --retry 120 --retry-delay 1 --retry-all-errors -o /dev/null "http://127.0.0.1:$PORT/ready"
  for c in 1 8 32; do
    n=$(( c * 4 > 16 ? c * 4 : 16 ))
    "$BENCH" --base-url "http://127.0.0.1:$PORT" --num-prompts "$n" --max-concurrency "$c" \
      --input-len 128 --output-len 64 --ignore-eos --output-json "$OUT/dp$dp-c$c.json" \
      > "$OUT/dp$dp-c$c.txt"
  done
  kill "$pid"
  wait "$pid" || true
done
python3 "$(dirname "$0")/summarize.py" "$OUT"
