#!/usr/bin/env bash
# Before/after of one change on the default model, alternating: bench_engine (default cases)
# and bench_serving (64 prompts of 128 tokens, 8 at a time, 128 tokens out, ignore_eos) against
# each build's own server, ROUNDS times. Summarise with summarize.py OUT ROUNDS BEFORE_NAME AFTER_NAME.
#   BEFORE=<folder with kiln, bench_engine, bench_serving> AFTER=<same for the change> \
#     ROUNDS=3 OUT=bench-results/before-after/<date>-<what> bench-results/before-after/run.sh
set -euo pipefail
ROUNDS="${ROUNDS:-3}"
OUT="${OUT:?a results folder}"
MODEL="${MODEL:-$KILN_TEST_MODEL}"
BEFORE="${BEFORE:?a folder with the before build}"
AFTER="${AFTER:?a folder with the after build}"
mkdir -p "$OUT"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
serve_bench() { # $1 label $2 round $3 build folder
  local label=$1 round=$2 dir=$3
  local port; port=$(free_port)
  "$dir/kiln" serve --model "$MODEL" --host 127.0.0.1 --port "$port" >"$OUT/$label-$round-server.log" 2>&1 &
  local pid=$!
  trap "kill $pid 2>/dev/null || true" EXIT
  for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$port/v1/models" 2>/dev/null | grep -q '"id"' && break; sleep 0.5; done
  "$dir/bench_serving" --base-url "http://127.0.0.1:$port" --num-prompts 64 --max-concurrency 8 --input-len 128 \
    --output-len 128 --ignore-eos --scrape-metrics --output-json "$OUT/$label-$round-serving.json" \
    >"$OUT/$label-$round-serving.txt" 2>&1
  kill "$pid"; wait "$pid" || true
}
log() { echo "$(date +%T) $* load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/log"; }
grep -m1 'model name' /proc/cpuinfo | tee "$OUT/cpu.txt"
for r in $(seq 1 "$ROUNDS"); do
  for label in before after; do
    dir=$BEFORE; [[ $label == after ]] && dir=$AFTER
    log "round $r $label"
    "$dir/bench_engine" --model "$MODEL" --output-json "$OUT/$label-$r-engine.json" >"$OUT/$label-$r-engine.txt" 2>&1
    serve_bench "$label" "$r" "$dir"
  done
done
log done
