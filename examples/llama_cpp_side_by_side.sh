#!/usr/bin/env bash
# Side by side: llama.cpp's llama-server and kiln on the same GGUF, the same machine and the same
# benchmark (kiln's bench_serving). llama.cpp runs in both of its KV layouts (one unified buffer,
# `-kvu`, and a KV slice per slot, its default with `-np`); the summary compares kiln with the
# faster one at each concurrency and records both. Results go to bench-results/side-by-side/
# (the short case) or bench-results/side-by-side-long/.
#
#   examples/llama_cpp_side_by_side.sh                 # build llama-server once, bench both
#   examples/llama_cpp_side_by_side.sh --case long     # 2048-token prompts, 256 out, 1 and 8 streams
#   examples/llama_cpp_side_by_side.sh --only kiln     # re-bench kiln, keep llama.cpp's results
#   examples/llama_cpp_side_by_side.sh --build-only    # just build and cache llama-server and llama-quantize
#   examples/llama_cpp_side_by_side.sh --build-quantize  # just llama-quantize (CI: the cheap target)
#
# Cases: short = 128 prompt and 128 output tokens at 1, 8 and 32 streams, 32 slots of 512 tokens;
# long = 2048 and 256 at 1 and 8 streams, 8 slots of 2560 tokens (room for one whole request each).
# Environment overrides: KILN_LLAMA_CPP_DIR (build cache, default ~/.cache/kiln/llama.cpp),
# KILN_MODEL_GGUF (default: the first *.gguf under .ci/cache, /tmp/model or kiln's cache),
# INPUT_LEN, OUTPUT_LEN, NUM_PROMPTS (default max(8, 4 x concurrency)), CONCURRENCIES, SEED (0),
# SLOTS, CTX_PER_SLOT (KV-cache tokens per slot), LLAMA_KV_MODES ("unified per-slot"),
# KILN_BIN (default target/release/kiln: another build to compare), KILN_BENCH_SERVING (the
# bench_serving binary, so a rebuild during a run cannot swap it), LLAMA_THREADS (llama.cpp's
# -t and -tb, default nproc; several, e.g. "1 2", run each layout at each count, named
# `per-slot-t1` and so on: on a loaded machine llama.cpp's spinning threads can do better
# with fewer), SIDE_BY_SIDE_DIR (where results go, e.g. one folder per model), KILN_ARGS (extra
# `kiln serve` flags, e.g. "--cpu-activations int8"; recorded in kiln.args).
set -euo pipefail
cd "$(dirname "$0")/.."

# llama.cpp build paths, find_model, free_port, wait_ready, stop_server, served_model.
# shellcheck source=common/llama_cpp_servers.sh
source examples/common/llama_cpp_servers.sh

KILN_BIN="${KILN_BIN:-target/release/kiln}"
BENCH="${KILN_BENCH_SERVING:-target/release/examples/bench_serving}"
KILN_BLOCK_SIZE=16
THREADS="$(nproc)"
LLAMA_THREADS="${LLAMA_THREADS:-$THREADS}"

usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  cat <<EOF

Options:
  --case short|long   the workload (default short)
  --only llama|kiln   bench one server only (the other's earlier results still go in the summary)
  --build-only        build and cache llama-server and llama-quantize, then stop
  --build-quantize    build and cache llama-quantize only, print its path, then stop
  -h, --help          this help
EOF
}

ONLY=""
BUILD_ONLY=0
CASE=short
while [[ $# -gt 0 ]]; do
  case "$1" in
    --case) CASE="${2:-}"; shift 2 ;;
    --case=*) CASE="${1#--case=}"; shift ;;
    --only) ONLY="${2:-}"; shift 2 ;;
    --only=*) ONLY="${1#--only=}"; shift ;;
    --build-only) BUILD_ONLY=1; shift ;;
    --build-quantize) BUILD_ONLY=quantize; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$ONLY" in
  ""|llama|kiln) ;;
  *) echo "--only takes llama or kiln, not '$ONLY'" >&2; exit 2 ;;
esac
case "$CASE" in
  short)
    OUT_DIR="${SIDE_BY_SIDE_DIR:-bench-results/side-by-side}"
    INPUT_LEN="${INPUT_LEN:-128}" OUTPUT_LEN="${OUTPUT_LEN:-128}"
    CONCURRENCIES="${CONCURRENCIES:-1 8 32}" SLOTS="${SLOTS:-32}" CTX_PER_SLOT="${CTX_PER_SLOT:-512}" ;;
  long)
    OUT_DIR="${SIDE_BY_SIDE_DIR:-bench-results/side-by-side-long}"
    INPUT_LEN="${INPUT_LEN:-2048}" OUTPUT_LEN="${OUTPUT_LEN:-256}"
    CONCURRENCIES="${CONCURRENCIES:-1 8}" SLOTS="${SLOTS:-8}" CTX_PER_SLOT="${CTX_PER_SLOT:-2560}" ;;
  *) echo "--case takes short or long, not '$CASE'" >&2; exit 2 ;;
esac
NUM_PROMPTS="${NUM_PROMPTS:-}"
SEED="${SEED:-0}"
LLAMA_KV_MODES="${LLAMA_KV_MODES:-unified per-slot}"
# A layout's results are named after it alone when llama.cpp runs at one thread count.
llama_setting() {
  if [[ "$LLAMA_THREADS" == *" "* ]]; then echo "$1-t$2"; else echo "$1"; fi
}
LLAMA_SETTINGS="$(for m in $LLAMA_KV_MODES; do for t in $LLAMA_THREADS; do llama_setting "$m" "$t"; done; done | xargs)"
# Both servers get room for SLOTS streams of CTX_PER_SLOT tokens: llama.cpp as -np SLOTS
# -c SLOTS*CTX_PER_SLOT, kiln as the same number of tokens in paged blocks.
KV_TOKENS=$((SLOTS * CTX_PER_SLOT))


# --- llama.cpp: download the sdist, build vendor/llama.cpp once, cache the binaries ----------

# Builds the named targets (llama-server, llama-quantize) that are not cached yet.
build_llama_cpp() {
  local targets=() target
  for target in "$@"; do
    if [[ -x "$BUILD_DIR/bin/$target" ]]; then
      log "$target cached: $BUILD_DIR/bin/$target"
    else
      targets+=("$target")
    fi
  done
  [[ ${#targets[@]} -gt 0 ]] || return 0
  if ! command -v cmake >/dev/null; then
    log "installing cmake (Debian package)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends cmake >/dev/null
  fi

  local sdist_dir="$CACHE_DIR/sdist"
  local sdist="$sdist_dir/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
  if [[ ! -f "$sdist" ]]; then
    log "downloading llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION (sdist)"
    mkdir -p "$sdist_dir"
    # --no-binary for this package only: with ':all:' pip would also build the sdist's build
    # dependencies (cmake itself) from source just to read its metadata.
    python3 -m pip download --quiet --disable-pip-version-check --no-deps \
      --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$sdist_dir"
  fi
  [[ -f "$sdist" ]] || die "pip did not leave $sdist"

  local src_dir="$CACHE_DIR/src-$LLAMA_CPP_PYTHON_VERSION"
  if [[ ! -d "$src_dir" ]]; then
    mkdir -p "$src_dir.tmp"
    tar -xzf "$sdist" -C "$src_dir.tmp"
    mv "$src_dir.tmp" "$src_dir" # only a complete extraction gets the final name
  fi
  local llama_src
  llama_src="$(find "$src_dir" -maxdepth 3 -type d -path '*/vendor/llama.cpp' | head -n 1)"
  [[ -n "$llama_src" && -f "$llama_src/CMakeLists.txt" ]] || die "no vendor/llama.cpp in $sdist"

  log "building ${targets[*]} from $llama_src (Release, native CPU${NATIVE_FLAGS:+ without AMX, which this VM does not grant}, $THREADS jobs)"
  local start=$SECONDS
  # CPU only; static so the binary runs on its own; nothing fetched at build time (no curl, no
  # prebuilt web UI from Hugging Face, no OpenSSL: the server only reads a local file).
  nice -n 10 cmake -S "$llama_src" -B "$BUILD_DIR" \
    -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON \
    -DCMAKE_C_FLAGS="$NATIVE_FLAGS" -DCMAKE_CXX_FLAGS="$NATIVE_FLAGS" \
    -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_HIP=OFF -DGGML_SYCL=OFF \
    -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    >"$CACHE_DIR/cmake-configure.log" 2>&1 \
    || { tail -n 40 "$CACHE_DIR/cmake-configure.log" >&2; die "cmake configure failed"; }
  # Progress to stderr: --build-quantize prints only the binary's path on stdout.
  nice -n 10 cmake --build "$BUILD_DIR" --config Release --target "${targets[@]}" -j"$THREADS" >&2
  for target in "${targets[@]}"; do
    [[ -x "$BUILD_DIR/bin/$target" ]] || die "the build did not produce $BUILD_DIR/bin/$target"
  done
  log "built ${targets[*]} in $((SECONDS - start)) s"
}

if [[ $BUILD_ONLY == quantize ]]; then
  build_llama_cpp llama-quantize
  echo "$LLAMA_QUANTIZE"
  exit 0
fi
build_llama_cpp llama-server llama-quantize
if [[ $BUILD_ONLY == 1 ]]; then
  exit 0
fi

# --- model and kiln's binaries ----------------------------------------------------------------

MODEL="$(find_model)"
log "model: $MODEL"
[[ -x "$BENCH" ]] || die "$BENCH is missing; build it with: cargo build --release --example bench_serving"
if [[ "$ONLY" != llama && ! -x "$KILN_BIN" ]]; then
  die "$KILN_BIN is missing; build it with: cargo build --release"
fi
command -v curl >/dev/null || die "curl is needed to poll the servers"

# --- running a server -------------------------------------------------------------------------

bench_server() {
  local name="$1" base="$2" model c n
  model="$(served_model "$base")"
  log "$name serves '$model'"
  # One short request first so lazy initialisation is not billed to the c=1 run.
  curl -fsS --max-time 120 "$base/v1/completions" -H 'content-type: application/json' \
    -d "{\"model\": \"$model\", \"prompt\": \"Hello\", \"max_tokens\": 8, \"temperature\": 0}" >/dev/null
  for c in $CONCURRENCIES; do
    n="${NUM_PROMPTS:-$((4 * c > 8 ? 4 * c : 8))}"
    log "$name: concurrency $c, $n prompts, input $INPUT_LEN, output $OUTPUT_LEN"
    "$BENCH" --base-url "$base" --model "$model" --endpoint completions \
      --num-prompts "$n" --max-concurrency "$c" --seed "$SEED" \
      --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --ignore-eos \
      --output-json "$OUT_DIR/$name-c$c.json"
  done
}

# One llama-server run in one KV layout: "unified" (-kvu: one buffer shared by all slots, like
# kiln's paged pool; on this build every sequence then attends over the whole buffer) or
# "per-slot" (llama.cpp's default with -np: each slot owns CTX_PER_SLOT tokens).
run_llama() {
  local mode="$1" threads="$2" setting="$3" port log_file="$OUT_DIR/llama-$3.log" kv_flag=()
  case "$mode" in
    unified) kv_flag=(-kvu) ;;
    per-slot) ;;
    *) die "LLAMA_KV_MODES takes unified and per-slot, not '$mode'" ;;
  esac
  port="$(free_port)"
  rm -f "$OUT_DIR"/llama-"$setting"-c*.json # no stale results if this run fails half-way
  log "starting llama-server ($mode KV, $threads threads) on 127.0.0.1:$port"
  # -cb: continuous batching; no prompt reuse across requests (--no-cache-prompt, --cache-ram 0),
  # as kiln's prefix caching is off by default.
  "$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port "$port" \
    -np "$SLOTS" -c "$KV_TOKENS" "${kv_flag[@]}" -cb -t "$threads" -tb "$threads" \
    --no-cache-prompt --cache-ram 0 --no-webui >"$log_file" 2>&1 &
  SERVER_PID=$!
  wait_ready "http://127.0.0.1:$port/health" '"ok"' "$log_file"
  bench_server "llama-$setting" "http://127.0.0.1:$port"
  stop_server
}

run_kiln() {
  local port log_file="$OUT_DIR/kiln.log"
  port="$(free_port)"
  rm -f "$OUT_DIR"/kiln-c*.json
  log "starting kiln on 127.0.0.1:$port"
  # The same KV capacity as llama.cpp (KV_TOKENS tokens) and the same 32 concurrent sequences.
  # Prompt caching off, as llama.cpp's below (the env var, which older builds read too).
  echo "${KILN_ARGS:-}" >"$OUT_DIR/kiln.args"
  # shellcheck disable=SC2086 # KILN_ARGS splits into flags on purpose
  KILN_ENABLE_PREFIX_CACHING=false "$KILN_BIN" serve --model "$MODEL" --host 127.0.0.1 --port "$port" \
    --block-size "$KILN_BLOCK_SIZE" --num-gpu-blocks-override "$((KV_TOKENS / KILN_BLOCK_SIZE))" \
    --max-num-seqs "$SLOTS" ${KILN_ARGS:-} >"$log_file" 2>&1 &
  SERVER_PID=$!
  # /health answers while the model loads; /v1/models lists it once it can serve.
  wait_ready "http://127.0.0.1:$port/v1/models" "\"id\"" "$log_file"
  bench_server kiln "http://127.0.0.1:$port"
  stop_server
}

mkdir -p "$OUT_DIR"
if [[ "$ONLY" != kiln ]]; then
  for mode in $LLAMA_KV_MODES; do
    for threads in $LLAMA_THREADS; do
      run_llama "$mode" "$threads" "$(llama_setting "$mode" "$threads")"
    done
  done
fi
[[ "$ONLY" == llama ]] || run_kiln

# --- summary ----------------------------------------------------------------------------------

CPU_MODEL="$(grep -m 1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)"
# "Intel(R) Xeon(R) Processor" names several generations under KVM; family and model tell them apart.
CPU_FAMILY_MODEL="$(awk -F': ' '/^cpu family/ && !f {f = $2} /^model[[:space:]]*:/ && !m {m = $2} END {print "family " f " model " m}' /proc/cpuinfo)"
CPU_FLAGS="$(grep -m 1 '^flags' /proc/cpuinfo | cut -d: -f2- | tr ' ' '\n' \
  | grep -E '^(sse4_2|avx|avx2|fma|f16c|avx512[a-z_0-9]*|amx[a-z_0-9]*|avx_vnni)$' | tr '\n' ' ' || true)"
# The kernel path kiln chose (its start-up log line), if kiln ran in this invocation.
KILN_KERNELS="$(grep -o 'path="[a-z0-9]*"\|path=[a-z0-9]*' "$OUT_DIR/kiln.log" 2>/dev/null | head -n 1 || true)"
export OUT_DIR CONCURRENCIES INPUT_LEN OUTPUT_LEN NUM_PROMPTS SEED MODEL LLAMA_CPP_PYTHON_VERSION \
  CPU_MODEL CPU_FLAGS KILN_KERNELS THREADS KV_TOKENS SLOTS CTX_PER_SLOT LLAMA_KV_MODES CASE NATIVE_FLAGS \
  CPU_FAMILY_MODEL LLAMA_THREADS LLAMA_SETTINGS
DATE="$(date -u)" ARCH="$(uname -m)" python3 - <<'EOF'
import json, os

env = os.environ
out = env["OUT_DIR"]

def load(server, c):
    try:
        with open(f"{out}/{server}-c{c}.json") as f:
            r = json.load(f)
    except (OSError, ValueError):
        return None
    return {
        "output_tok_s": r.get("output_throughput"),
        "ttft_p50_ms": (r.get("ttft_ms") or {}).get("p50"),
        "tpot_p50_ms": (r.get("tpot_ms") or {}).get("p50"),
        "completed": r.get("completed"),
        "failed": r.get("failed"),
    }

def ratio(k, l):
    return k / l if isinstance(k, (int, float)) and isinstance(l, (int, float)) and l else None

def fmt(x, nd=1):
    return "-" if x is None else f"{x:.{nd}f}"

modes = env["LLAMA_SETTINGS"].split()
rows = []
for c in map(int, env["CONCURRENCIES"].split()):
    by_mode = {m: load(f"llama-{m}", c) for m in modes}
    ran = {m: r for m, r in by_mode.items() if r and r.get("output_tok_s")}
    # The peer at its best for this workload: the layout with the higher output throughput.
    best_mode = max(ran, key=lambda m: ran[m]["output_tok_s"]) if ran else None
    llama, kiln = (ran.get(best_mode) if best_mode else None), load("kiln", c)
    row = {"concurrency": c, "llama.cpp": llama, "llama.cpp_setting": best_mode,
           "llama.cpp_by_kv_layout": by_mode, "kiln": kiln, "kiln_over_llama": {}}
    for k in ("output_tok_s", "ttft_p50_ms", "tpot_p50_ms"):
        row["kiln_over_llama"][k] = ratio((kiln or {}).get(k), (llama or {}).get(k))
    rows.append(row)

print()
print(f"case {env['CASE']}: {env['INPUT_LEN']} prompt / {env['OUTPUT_LEN']} output tokens; "
      f"{env['CPU_MODEL']} ({env['THREADS']} threads; {env['CPU_FLAGS'].strip()})")
print("output tok/s: higher is better; TTFT and TPOT: lower is better. "
      "ratio = kiln / llama.cpp at its faster KV layout")
head = ("conc", "llama.cpp tok/s by layout", "best", "kiln tok/s", "ratio", "llama TTFT",
        "kiln TTFT", "ratio", "llama TPOT", "kiln TPOT", "ratio")
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for r in rows:
    l, k, q = r["llama.cpp"] or {}, r["kiln"] or {}, r["kiln_over_llama"]
    layouts = ", ".join(f"{m} {fmt((v or {}).get('output_tok_s'))}"
                        for m, v in r["llama.cpp_by_kv_layout"].items())
    cells = [str(r["concurrency"]), layouts, r["llama.cpp_setting"] or "-",
             fmt(k.get("output_tok_s")), fmt(q["output_tok_s"], 2)]
    for key in ("ttft_p50_ms", "tpot_p50_ms"):
        cells += [fmt(l.get(key)), fmt(k.get(key)), fmt(q[key], 2)]
    print("| " + " | ".join(cells) + " |")
failed = [(s, r["concurrency"]) for r in rows for s in ("llama.cpp", "kiln")
          if r[s] and r[s].get("failed")]
for s, c in failed:
    print(f"warning: {s} had failed requests at concurrency {c}")

summary = {
    "date": env["DATE"],
    "case": env["CASE"],
    "arch": env["ARCH"],
    "cpu": env["CPU_MODEL"],
    "cpu_family_model": env["CPU_FAMILY_MODEL"],
    "cpu_flags": env["CPU_FLAGS"].split(),
    "kiln_kernels": env["KILN_KERNELS"] or None,
    "nproc": int(env["THREADS"]),
    "llama_cpp_threads": [int(t) for t in env["LLAMA_THREADS"].split()],
    "llama_cpp_python_version": env["LLAMA_CPP_PYTHON_VERSION"],
    "llama_cpp_kv_layouts": modes,
    "llama_cpp_build": "GGML_NATIVE=ON " + (env["NATIVE_FLAGS"] or "(all native features)"),
    "model": env["MODEL"],
    "input_len": int(env["INPUT_LEN"]),
    "output_len": int(env["OUTPUT_LEN"]),
    "num_prompts": env["NUM_PROMPTS"] or "max(8, 4 x concurrency)",
    "seed": int(env["SEED"]),
    "slots": int(env["SLOTS"]),
    "ctx_per_slot": int(env["CTX_PER_SLOT"]),
    "kv_cache_tokens": int(env["KV_TOKENS"]),
    "results": rows,
}
with open(f"{out}/summary.json", "w") as f:
    json.dump(summary, f, indent=2)
print(f"\nwrote {out}/summary.json")
EOF
