#!/usr/bin/env bash
# Issue 28 before/after: before (918ca10), after (main, defaults) and after_b (main with sync
# scheduling in bench_engine; with the old scheduling policy in serving: no step-time budget, no
# partial-prefill limits, no prefix cache), alternating. Summarize with summarize.py OUT ROUNDS.
#   BEFORE=<918ca10's kiln and bench_engine> AFTER=<main's kiln, bench_engine, bench_serving> \
#     ROUNDS=4 OUT=bench-results/issue28-before-after/DATE bench-results/issue28-before-after/run.sh
set -euo pipefail
ROUNDS="${ROUNDS:-3}"
OUT="${OUT:-bench-results/issue28-before-after/new}"
MODEL="${MODEL:-$KILN_TEST_MODEL}"
BEFORE="${BEFORE:?a folder with 918ca10s kiln and bench_engine}"
AFTER="${AFTER:?a folder with mains kiln, bench_engine and bench_serving}"
CLIENT=$AFTER/bench_serving
mkdir -p "$OUT"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
serve_bench() { # $1 label $2 round $3 kiln binary, rest: server args
  local label=$1 round=$2 bin=$3; shift 3
  local port; port=$(free_port)
  "$bin" serve --model "$MODEL" --host 127.0.0.1 --port "$port" "$@" >"$OUT/$label-$round-server.log" 2>&1 &
  local pid=$!
  trap "kill $pid 2>/dev/null || true" EXIT
  for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$port/v1/models" 2>/dev/null | grep -q '"id"' && break; sleep 0.5; done
  "$CLIENT" --base-url "http://127.0.0.1:$port" --num-prompts 64 --max-concurrency 8 --input-len 128 --output-len 128 \
     --ignore-eos --scrape-metrics --output-json "$OUT/$label-$round-serving.json" >"$OUT/$label-$round-serving.txt" 2>&1
  kill "$pid"; wait "$pid" || true
}
log() { echo "$(date +%T) $* load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/log"; }
for r in $(seq 1 "$ROUNDS"); do
  log "round $r before"
  $BEFORE/bench_engine --model "$MODEL" --output-json "$OUT/before-$r-engine.json" >"$OUT/before-$r-engine.txt" 2>&1
  serve_bench before "$r" $BEFORE/kiln
  log "round $r after"
  $AFTER/bench_engine --model "$MODEL" --output-json "$OUT/after-$r-engine.json" >"$OUT/after-$r-engine.txt" 2>&1
  serve_bench after "$r" $AFTER/kiln
  log "round $r after_b"
  $AFTER/bench_engine --model "$MODEL" --sync-scheduling --output-json "$OUT/after_b-$r-engine.json" >"$OUT/after_b-$r-engine.txt" 2>&1
  serve_bench after_b "$r" $AFTER/kiln --max-step-ms 0 --no-enable-prefix-caching \
    --max-num-partial-prefills 256 --max-long-partial-prefills 256
done
log done
