#!/usr/bin/env bash
# What LoRA adapters cost, side by side: llama.cpp's llama-server and kiln on the same GGUF base,
# serving the same four GGUF adapters (llama.cpp's own conversions, made by
# make_bench_adapters.py --llama-cpp), measured with the same client (bench_serving) at 1, 8
# and 32 streams. For each server and concurrency, two loads alternate on one running server:
# "base" (every request on the base model) and "mixed" (requests round robin over the four
# adapters and the base, as bench_lora's mixed load). The figure of merit is mixed over base
# output tok/s on each server; the absolute tok/s of both servers stand beside it.
#
#   python3 examples/make_bench_adapters.py MODEL.gguf /tmp/bench-adapters --llama-cpp LLAMA_SRC
#   examples/lora_side_by_side.sh /tmp/bench-adapters
#
# llama.cpp: adapters loaded with --lora and --lora-init-without-apply; a request picks one with
# `"lora": [{"id": k, "scale": 1.0}]` (the others get scale 0 and are left out), the base with
# adapter 0 at scale 0. kiln: --lora-modules and
# `"model": "aK"`. Environment: as llama_cpp_side_by_side.sh (KILN_MODEL_GGUF, KILN_BIN,
# KILN_BENCH_SERVING, KILN_LLAMA_CPP_DIR, LLAMA_THREADS), plus CONCURRENCIES ("1 8 32"),
# INPUT_LEN (128), OUTPUT_LEN (64), NUM_PROMPTS (default 4 x concurrency, at least 10),
# ROUNDS (2: base and mixed alternate this many times; the medians are reported), COUNT (4).
set -euo pipefail
cd "$(dirname "$0")/.."

# llama.cpp build paths, find_model, free_port, wait_ready, stop_server, served_model.
# shellcheck source=common/llama_cpp_servers.sh
source examples/common/llama_cpp_servers.sh

ADAPTERS="${1:?usage: examples/lora_side_by_side.sh ADAPTERS_DIR (from make_bench_adapters.py --llama-cpp)}"
KILN_BIN="${KILN_BIN:-target/release/kiln}"
BENCH="${KILN_BENCH_SERVING:-target/release/examples/bench_serving}"
CONCURRENCIES="${CONCURRENCIES:-1 8 32}"
INPUT_LEN="${INPUT_LEN:-128}"
OUTPUT_LEN="${OUTPUT_LEN:-64}"
ROUNDS="${ROUNDS:-2}"
COUNT="${COUNT:-4}"
LLAMA_THREADS="${LLAMA_THREADS:-$(nproc)}"
SLOTS=32
KV_TOKENS=$((SLOTS * 256))
OUT_DIR="${SIDE_BY_SIDE_DIR:-bench-results/lora/side-by-side}"

MODEL="$(find_model)"
[[ -x "$LLAMA_SERVER" ]] || die "$LLAMA_SERVER is missing; build it with examples/llama_cpp_side_by_side.sh --build-only"
[[ -x "$KILN_BIN" ]] || die "$KILN_BIN is missing; build it with: cargo build --release"
[[ -x "$BENCH" ]] || die "$BENCH is missing; build it with: cargo build --release --example bench_serving"
for k in $(seq 1 "$COUNT"); do
  [[ -f "$ADAPTERS/a$k.gguf" ]] || die "$ADAPTERS/a$k.gguf is missing: run make_bench_adapters.py with --llama-cpp"
done
mkdir -p "$OUT_DIR"

# The mixed load's request fields, round robin: each adapter, then the base.
cycle_json() {
  local server="$1" k items=()
  for k in $(seq 1 "$COUNT"); do
    if [[ $server == llama ]]; then
      items+=("{\"lora\":[{\"id\":$((k - 1)),\"scale\":1.0}]}")
    else
      items+=("{\"model\":\"a$k\"}")
    fi
  done
  if [[ $server == llama ]]; then items+=('{"lora":[{"id":0,"scale":0.0}]}'); else items+=('{}'); fi
  local IFS=,
  echo "[${items[*]}]"
}

bench_server() {
  local server="$1" base="$2" model c n round load cycle
  model="$(served_model "$base")"
  cycle="$(cycle_json "$server")"
  curl -fsS --max-time 120 "$base/v1/completions" -H 'content-type: application/json' \
    -d "{\"model\": \"$model\", \"prompt\": \"Hello\", \"max_tokens\": 8, \"temperature\": 0}" >/dev/null
  for c in $CONCURRENCIES; do
    n="${NUM_PROMPTS:-$((4 * c > 10 ? 4 * c : 10))}"
    for round in $(seq 1 "$ROUNDS"); do
      for load in base mixed; do
        log "$server: concurrency $c, $load, round $round ($n prompts)"
        # llama.cpp gives a request with no (or an empty) `lora` list every loaded adapter at
        # its load-time scale, 1.0 even with --lora-init-without-apply: its base requests list
        # adapter 0 at scale 0, which leaves every adapter out.
        local extra=()
        if [[ $load == mixed ]]; then
          extra=(--body-cycle "$cycle")
        elif [[ $server == llama ]]; then
          extra=(--body-cycle '[{"lora":[{"id":0,"scale":0.0}]}]')
        fi
        "$BENCH" --base-url "$base" --model "$model" --endpoint completions \
          --num-prompts "$n" --max-concurrency "$c" --seed 0 \
          --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --ignore-eos "${extra[@]}" \
          --output-json "$OUT_DIR/$server-c$c-$load-r$round.json" >/dev/null
      done
    done
  done
}

adapter_flags=()
kiln_modules=()
for k in $(seq 1 "$COUNT"); do
  adapter_flags+=(--lora "$ADAPTERS/a$k.gguf")
  kiln_modules+=("a$k=$ADAPTERS/a$k.gguf")
done

port="$(free_port)"
log "llama-server with $COUNT adapters ($LLAMA_THREADS threads) on 127.0.0.1:$port"
"$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port "$port" -np "$SLOTS" -c "$KV_TOKENS" -cb \
  -t "$LLAMA_THREADS" -tb "$LLAMA_THREADS" --no-cache-prompt --cache-ram 0 --no-webui \
  "${adapter_flags[@]}" --lora-init-without-apply >"$OUT_DIR/llama.log" 2>&1 &
SERVER_PID=$!
wait_ready "http://127.0.0.1:$port/health" '"ok"' "$OUT_DIR/llama.log"
bench_server llama "http://127.0.0.1:$port"
stop_server

port="$(free_port)"
log "kiln with $COUNT adapters on 127.0.0.1:$port"
KILN_ENABLE_PREFIX_CACHING=false "$KILN_BIN" serve --model "$MODEL" --host 127.0.0.1 --port "$port" \
  --block-size 16 --num-gpu-blocks-override "$((KV_TOKENS / 16))" --max-num-seqs "$SLOTS" \
  --enable-lora --max-loras "$COUNT" --lora-modules "${kiln_modules[@]}" \
  >"$OUT_DIR/kiln.log" 2>&1 &
SERVER_PID=$!
wait_ready "http://127.0.0.1:$port/v1/models" '"a1"' "$OUT_DIR/kiln.log"
bench_server kiln "http://127.0.0.1:$port"
stop_server

CPU_MODEL="$(grep -m 1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)"
CPU_FLAGS="$(grep -m 1 '^flags' /proc/cpuinfo | cut -d: -f2- | tr ' ' '\n' \
  | grep -E '^(avx2|fma|f16c|avx512[a-z_0-9]*|avx_vnni)$' | tr '\n' ' ' || true)"
export OUT_DIR CONCURRENCIES ROUNDS MODEL CPU_MODEL CPU_FLAGS INPUT_LEN OUTPUT_LEN COUNT LLAMA_CPP_PYTHON_VERSION
python3 - <<'EOF'
import json, os, statistics
out, rounds = os.environ["OUT_DIR"], int(os.environ["ROUNDS"])
rows, summary = [], {}
for c in os.environ["CONCURRENCIES"].split():
    for server in ("llama", "kiln"):
        tps = {}
        for load in ("base", "mixed"):
            runs = [json.load(open(f"{out}/{server}-c{c}-{load}-r{r}.json")) for r in range(1, rounds + 1)]
            assert all(run["failed"] == 0 for run in runs), f"{server} c{c} {load}: failed requests"
            tps[load] = statistics.median(run["output_throughput"] for run in runs)
        ratio = tps["mixed"] / tps["base"]
        summary.setdefault(c, {})[server] = {"base_tok_s": tps["base"], "mixed_tok_s": tps["mixed"], "mixed_over_base": ratio}
        rows.append(f"| {c} | {server} | {tps['base']:.1f} | {tps['mixed']:.1f} | {ratio:.2f}x |")
print("| streams | server | base tok/s | mixed tok/s | mixed / base |")
print("|---|---|---|---|---|")
print("\n".join(rows))
json.dump({
    "model": os.environ["MODEL"], "adapters": int(os.environ["COUNT"]), "rounds": rounds,
    "input_len": int(os.environ["INPUT_LEN"]), "output_len": int(os.environ["OUTPUT_LEN"]),
    "llama_cpp_python_version": os.environ["LLAMA_CPP_PYTHON_VERSION"],
    "cpu_model": os.environ["CPU_MODEL"], "cpu_flags": os.environ["CPU_FLAGS"].split(),
    "load_average": open("/proc/loadavg").read().split()[:3], "by_concurrency": summary,
}, open(f"{out}/summary.json", "w"), indent=1)
EOF
