#!/usr/bin/env bash
# Mixed load, kiln against llama.cpp's llama-server on one GGUF (issue 31): the same
# bench_mixed_load run against each server in turn (four long prompts prefilling while a client
# sends short requests one after another and streams decode), then one table: the short
# requests' TTFT p50/p99, the streams' ITL p99 and the long prompts' throughput. llama.cpp runs
# at each thread count and KV layout (its best is marked); kiln with its step budget (`fair`)
# and without it (`unbudgeted`, --max-step-ms 0: the throughput the budget must stay within 15 %
# of). Results go to bench-results/mixed-load/.
#
#   examples/mixed_load_side_by_side.sh                  # the issue's workload (minutes per server)
#   LONG_LEN=2000 examples/mixed_load_side_by_side.sh    # a quicker, smaller one
#
# Needs llama-server built (examples/llama_cpp_side_by_side.sh --build-only), and
#   cargo build --release --features testing --tests --bins --examples   (kiln, bench_mixed_load)
# Environment: KILN_MODEL_GGUF (default: as llama_cpp_side_by_side.sh finds it), LONG_PROMPTS (4),
# LONG_LEN (6000 words, about a token each), LONG_N (1), SHORT_LEN (5), SHORT_OUTPUT (4), STREAMS
# (2), STREAM_OUTPUT (64), LLAMA_THREADS ("1 2"), LLAMA_KV_MODES ("unified per-slot"), SLOTS (8),
# CTX_PER_SLOT (8192), KILN_SETTINGS ("fair unbudgeted"; budget-MS: --max-step-ms MS), KILN_BIN,
# KILN_BENCH_MIXED_LOAD, MIXED_LOAD_DIR (where results go).
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=common/llama_cpp_servers.sh
source examples/common/llama_cpp_servers.sh

KILN_BIN="${KILN_BIN:-target/release/kiln}"
BENCH="${KILN_BENCH_MIXED_LOAD:-target/release/examples/bench_mixed_load}"
OUT_DIR="${MIXED_LOAD_DIR:-bench-results/mixed-load}"
LONG_PROMPTS="${LONG_PROMPTS:-4}" LONG_LEN="${LONG_LEN:-6000}" LONG_N="${LONG_N:-1}"
SHORT_LEN="${SHORT_LEN:-5}" SHORT_OUTPUT="${SHORT_OUTPUT:-4}"
STREAMS="${STREAMS:-2}" STREAM_OUTPUT="${STREAM_OUTPUT:-64}"
LLAMA_THREADS="${LLAMA_THREADS:-1 2}" LLAMA_KV_MODES="${LLAMA_KV_MODES:-unified per-slot}"
SLOTS="${SLOTS:-8}" CTX_PER_SLOT="${CTX_PER_SLOT:-8192}"
KILN_SETTINGS="${KILN_SETTINGS:-fair unbudgeted}"
KILN_BLOCK_SIZE=16
KV_TOKENS=$((SLOTS * CTX_PER_SLOT))

[[ -x "$LLAMA_SERVER" ]] || die "$LLAMA_SERVER is missing; build it with: examples/llama_cpp_side_by_side.sh --build-only"
[[ -x "$KILN_BIN" ]] || die "$KILN_BIN is missing; build it with: cargo build --release --features testing --tests --bins --examples"
[[ -x "$BENCH" ]] || die "$BENCH is missing; build it with: cargo build --release --features testing --tests --bins --examples"
command -v curl >/dev/null || die "curl is needed to poll the servers"
MODEL="$(find_model)"
log "model: $MODEL"
mkdir -p "$OUT_DIR"

# Runs bench_mixed_load against the server at $2, into $OUT_DIR/$1.json.
bench_mixed() {
  local name="$1" base="$2" model
  model="$(served_model "$base")"
  # One short request first so lazy initialisation is not billed to the run.
  curl -fsS --max-time 120 "$base/v1/completions" -H 'content-type: application/json' \
    -d "{\"model\": \"$model\", \"prompt\": \"Hello\", \"max_tokens\": 4, \"temperature\": 0}" >/dev/null
  log "$name: $LONG_PROMPTS long prompts of $LONG_LEN words (n=$LONG_N), $STREAMS streams, load $(cut -d' ' -f1-3 /proc/loadavg)"
  "$BENCH" --base-url "$base" --model "$model" --long-prompts "$LONG_PROMPTS" --long-len "$LONG_LEN" \
    --long-n "$LONG_N" --short-len "$SHORT_LEN" --short-output "$SHORT_OUTPUT" --streams "$STREAMS" \
    --stream-output "$STREAM_OUTPUT" --output-json "$OUT_DIR/$name.json" >&2
}

run_llama() {
  local mode="$1" threads="$2" name="llama-$1-t$2" port kv_flag=()
  case "$mode" in
    unified) kv_flag=(-kvu) ;;
    per-slot) ;;
    *) die "LLAMA_KV_MODES takes unified and per-slot, not '$mode'" ;;
  esac
  port="$(free_port)"
  rm -f "$OUT_DIR/$name.json"
  log "starting llama-server ($mode KV, $threads threads) on 127.0.0.1:$port"
  "$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port "$port" -np "$SLOTS" -c "$KV_TOKENS" \
    "${kv_flag[@]}" -cb -t "$threads" -tb "$threads" --no-webui >"$OUT_DIR/$name.log" 2>&1 &
  SERVER_PID=$!
  wait_ready "http://127.0.0.1:$port/health" '"ok"' "$OUT_DIR/$name.log"
  bench_mixed "$name" "http://127.0.0.1:$port"
  stop_server
}

run_kiln() {
  local setting="$1" name="kiln-$1" port extra=()
  case "$setting" in
    fair) ;;
    unbudgeted) extra=(--max-step-ms 0) ;;
    budget-[0-9]*) extra=(--max-step-ms "${setting#budget-}") ;;
    *) die "KILN_SETTINGS takes fair, unbudgeted and budget-MS (e.g. budget-400), not '$setting'" ;;
  esac
  port="$(free_port)"
  rm -f "$OUT_DIR/$name.json"
  log "starting kiln ($setting) on 127.0.0.1:$port"
  "$KILN_BIN" serve --model "$MODEL" --host 127.0.0.1 --port "$port" --block-size "$KILN_BLOCK_SIZE" \
    --num-gpu-blocks-override "$((KV_TOKENS / KILN_BLOCK_SIZE))" --max-num-seqs "$SLOTS" \
    "${extra[@]}" >"$OUT_DIR/$name.log" 2>&1 &
  SERVER_PID=$!
  wait_ready "http://127.0.0.1:$port/v1/models" '"id"' "$OUT_DIR/$name.log"
  bench_mixed "$name" "http://127.0.0.1:$port"
  stop_server
}

for mode in $LLAMA_KV_MODES; do
  for threads in $LLAMA_THREADS; do
    run_llama "$mode" "$threads"
  done
done
for setting in $KILN_SETTINGS; do
  run_kiln "$setting"
done

export OUT_DIR MODEL LONG_PROMPTS LONG_LEN LONG_N STREAMS
python3 - <<'PY'
import glob, json, os

out = os.environ["OUT_DIR"]
runs = {}
for path in sorted(glob.glob(f"{out}/*.json")):
    name = os.path.basename(path)[:-5]
    if name == "summary":
        continue
    with open(path) as f:
        runs[name] = json.load(f)
llama = {n: r for n, r in runs.items() if n.startswith("llama-")}
# llama.cpp at its best: the setting with the highest long-prompt throughput.
best = max(llama, key=lambda n: llama[n]["long_prompt_tokens_per_s"]) if llama else None

def ms(x):
    return "-" if x is None else f"{x:.0f}"

print(f"\nmixed load on {os.environ['MODEL']}: {os.environ['LONG_PROMPTS']} long prompts of "
      f"{os.environ['LONG_LEN']} words (n={os.environ['LONG_N']}), {os.environ['STREAMS']} decode streams")
print("| server | short TTFT p50 ms | short TTFT p99 ms | stream ITL p99 ms | long prompt tok/s | long wall s | errors | load |")
print("|---|---|---|---|---|---|---|---|")
for name, r in runs.items():
    mark = " (best llama.cpp)" if name == best else ""
    load = " ".join(r.get("load_average", []))
    print(f"| {name}{mark} | {ms(r['short_ttft']['p50_ms'])} | {ms(r['short_ttft']['p99_ms'])} | "
          f"{ms(r['stream_itl']['p99_ms'])} | {r['long_prompt_tokens_per_s']:.1f} | {r['long_wall_s']:.1f} | "
          f"{len(r['errors'])} | {load} |")
with open(f"{out}/summary.json", "w") as f:
    json.dump({"best_llama_cpp": best, "runs": runs}, f, indent=2)
print(f"\nwrote {out}/summary.json")
PY
