# Shared by the llama.cpp side-by-side scripts (sourced, not run): where the pinned llama.cpp
# build lives, finding the model, and starting, polling and stopping one server at a time.
# The sourcing script runs from the repository root with `set -euo pipefail`.

# llama.cpp comes from the copy vendored in this PyPI sdist: a pinned, registry-hosted source.
LLAMA_CPP_PYTHON_VERSION=0.3.36
CACHE_DIR="${KILN_LLAMA_CPP_DIR:-$HOME/.cache/kiln/llama.cpp}"
# Versioned, so changing the pin rebuilds instead of reusing a stale binary.

# A CPU can list AMX in cpuinfo while its VM does not let a process use the tiles: llama.cpp's
# native build then dies on its first `ldtilecfg` (seen on 2026-12-02). A probe that asks the
# kernel for the tile state and loads a tile config tells; where it fails, llama.cpp is built
# natively minus AMX (its AVX-512 and VNNI kernels stay), in a build folder of its own.
amx_usable() {
  grep -qw amx_tile /proc/cpuinfo || return 1
  local probe_dir
  probe_dir="$(mktemp -d)"
  cat >"$probe_dir/amx.c" <<'C'
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
  if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */)) return 2;
  unsigned char config[64] = {1};
  config[16] = 64; /* tile 0: 64 bytes a row */
  config[48] = 16; /* 16 rows */
  _tile_loadconfig(config);
  _tile_zero(0);
  _tile_release();
  return 0;
}
C
  gcc -O1 -mamx-tile -o "$probe_dir/amx" "$probe_dir/amx.c" 2>/dev/null && ("$probe_dir/amx") 2>/dev/null
  local usable=$?
  rm -rf "$probe_dir"
  return $usable
}
NATIVE_FLAGS=""
BUILD_DIR="$CACHE_DIR/build-$LLAMA_CPP_PYTHON_VERSION"
if grep -qw amx_tile /proc/cpuinfo && ! amx_usable; then
  NATIVE_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  BUILD_DIR="$BUILD_DIR-no-amx"
fi
LLAMA_SERVER="$BUILD_DIR/bin/llama-server"
LLAMA_QUANTIZE="$BUILD_DIR/bin/llama-quantize"

die() { echo "error: $*" >&2; exit 1; }
log() { echo "==> $*" >&2; }

find_model() {
  if [[ -n "${KILN_MODEL_GGUF:-}" ]]; then
    [[ -f "$KILN_MODEL_GGUF" ]] || die "KILN_MODEL_GGUF=$KILN_MODEL_GGUF is not a file"
    echo "$KILN_MODEL_GGUF"
    return
  fi
  local kiln_cache="${XDG_CACHE_HOME:-$HOME/.cache}/kiln" dir depth found
  for dir in .ci/cache /tmp/model "$kiln_cache"; do
    [[ -d "$dir" ]] || continue
    # kiln's cache only at its top: the llama.cpp build cache sits below it, and llama.cpp's
    # sources carry vocab-only *.gguf files.
    depth=3
    [[ "$dir" == "$kiln_cache" ]] && depth=1
    found="$(find "$dir" -maxdepth "$depth" -name '*.gguf' -type f 2>/dev/null | sort | head -n 1)"
    if [[ -n "$found" ]]; then
      echo "$found"
      return
    fi
  done
  die "no *.gguf under .ci/cache, /tmp/model or ${XDG_CACHE_HOME:-$HOME/.cache}/kiln.
Fetch kiln's default model (SmolLM2-135M-Instruct Q4_1) with
    KILN_CACHE_DIR=.ci/cache cargo run --release -- fetch-model
or point KILN_MODEL_GGUF at a GGUF file."
}

# --- running a server -------------------------------------------------------------------------

SERVER_PID=""
stop_server() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
trap stop_server EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Poll a URL until it answers 200 (and, if given, its body contains a word); fail fast if the
# server exits, give up after a timeout.
wait_ready() {
  local url="$1" want="$2" log_file="$3" deadline=$((SECONDS + 600)) body
  while ((SECONDS < deadline)); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      tail -n 30 "$log_file" >&2
      die "the server exited before $url answered (log: $log_file)"
    fi
    if body="$(curl -fsS --max-time 2 "$url" 2>/dev/null)" && [[ -z "$want" || "$body" == *"$want"* ]]; then
      return
    fi
    sleep 0.5
  done
  tail -n 30 "$log_file" >&2
  die "$url not ready after 600 s (log: $log_file)"
}

# The name the server lists first on /v1/models, passed to bench_serving explicitly.
served_model() {
  curl -fsS --max-time 5 "$1/v1/models" \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["data"][0]["id"])'
}
