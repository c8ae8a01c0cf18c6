#!/usr/bin/env bash
# Where a one-stream token goes between the engine and the socket. Runs kiln with the
# executor's per-step debug line on, drives it with bench_serving, and prints the client's
# TPOT beside the executor's busy time per decode step (the engine's own step), its idle gap
# between steps (scheduling and delivery), and the CPU each server thread used. If TPOT is
# close to the busy time and the idle gap is small, the cost is in the step, not in HTTP.
#
#   examples/engine_socket_gap.sh                  # 1 stream, 8 prompts of 128 + 128 tokens
#   C=8 N=32 examples/engine_socket_gap.sh         # other concurrencies
#
# Environment: KILN_MODEL_GGUF (default: the first *.gguf under .ci/cache), C, N, INPUT_LEN,
# OUTPUT_LEN, OUT (default bench-results/engine-socket-gap), KILN_ARGS (extra serve flags).
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL="${KILN_MODEL_GGUF:-$(find .ci/cache -maxdepth 1 -name '*.gguf' | sort | head -n 1)}"
[[ -f "$MODEL" ]] || { echo "no model: set KILN_MODEL_GGUF or fetch it into .ci/cache" >&2; exit 1; }
for bin in target/release/kiln target/release/examples/bench_serving; do
  [[ -x "$bin" ]] || { echo "$bin is missing: cargo build --release --bins --examples" >&2; exit 1; }
done
OUT="${OUT:-bench-results/engine-socket-gap}"
mkdir -p "$OUT"
PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

RUST_LOG=info,kiln::executor::actor=debug target/release/kiln serve --model "$MODEL" \
  --host 127.0.0.1 --port "$PORT" ${KILN_ARGS:-} >"$OUT/kiln.log" 2>&1 &
PID=$!
trap 'kill "$PID" 2>/dev/null || true' EXIT
base="http://127.0.0.1:$PORT"
for _ in $(seq 600); do
  curl -fsS --max-time 2 "$base/v1/models" 2>/dev/null | grep -q '"id"' && break
  kill -0 "$PID" 2>/dev/null || { tail -n 20 "$OUT/kiln.log" >&2; exit 1; }
  sleep 0.5
done
served="$(curl -fsS "$base/v1/models" | python3 -c 'import json, sys; print(json.load(sys.stdin)["data"][0]["id"])')"
curl -fsS "$base/v1/completions" -H 'content-type: application/json' \
  -d "{\"model\": \"$served\", \"prompt\": \"Hello\", \"max_tokens\": 8}" >/dev/null

# Per-thread CPU ticks (utime + stime) by thread name, before and after.
thread_ticks() { for t in /proc/"$PID"/task/*; do echo "$(tr ' ' _ <"$t/comm") $(awk '{print $14 + $15}' "$t/stat")"; done; }
thread_ticks >"$OUT/threads-before.txt"
first_line=$(($(wc -l <"$OUT/kiln.log") + 1))
target/release/examples/bench_serving --base-url "$base" --model "$served" --endpoint completions \
  --num-prompts "${N:-8}" --max-concurrency "${C:-1}" --seed 0 --input-len "${INPUT_LEN:-128}" \
  --output-len "${OUTPUT_LEN:-128}" --ignore-eos --output-json "$OUT/bench.json" >/dev/null
thread_ticks >"$OUT/threads-after.txt"
tail -n +"$first_line" "$OUT/kiln.log" >"$OUT/steps.log"

python3 - "$OUT" "$(getconf CLK_TCK)" <<'PY'
import collections, json, re, statistics, sys
out, hz = sys.argv[1], int(sys.argv[2])
def ticks(name):
    total = collections.Counter()
    for line in open(f"{out}/{name}"):
        thread, value = line.rsplit(" ", 1)
        total[thread] += int(value)
    return total
before, after = ticks("threads-before.txt"), ticks("threads-after.txt")
cpu = {t: (after[t] - before.get(t, 0)) / hz for t in after if after[t] > before.get(t, 0)}
busy, idle, prefill = [], [], []
for line in open(f"{out}/steps.log"):
    if "executed a step" not in line:
        continue
    fields = dict(re.findall(r"(\w+)\W+(\d+)", line))
    if not fields.get("sequences"):
        continue
    if fields.get("tokens") == fields.get("sequences"):  # decode only
        busy.append(int(fields["busy_us"]) / 1e3)
        if "idle_us" in fields:
            idle.append(int(fields["idle_us"]) / 1e3)
    elif fields.get("sequences") == "1":  # one prompt's prefill, alone in its step
        prefill.append(int(fields["busy_us"]) / 1e3)
bench = json.load(open(f"{out}/bench.json"))
report = {
    "tpot_p50_ms": bench["tpot_ms"]["p50"],
    "decode_steps": len(busy),
    "executor_busy_p50_ms": statistics.median(busy) if busy else None,
    "executor_idle_p50_ms": statistics.median(idle) if idle else None,
    "ttft_p50_ms": bench["ttft_ms"]["p50"],
    "prefill_steps": len(prefill),
    "prefill_step_busy_p50_ms": statistics.median(prefill) if prefill else None,
    "server_thread_cpu_s": cpu,
}
json.dump(report, open(f"{out}/gap.json", "w"), indent=1)
print("| what | value |\n|---|---|")
for key, value in report.items():
    print(f"| {key} | {value} |")
PY
