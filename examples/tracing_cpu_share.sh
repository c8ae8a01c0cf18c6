#!/usr/bin/env bash
# Where a traced server's CPU goes: `perf` samples, with DWARF call stacks, of a kiln server that
# traces every request (spans exported over OTLP/HTTP to a loopback sink that accepts every
# export), under bench_serving load. Prints and writes (JSON) the share of CPU samples spent in
# tracing: stacks through kiln's span building, exemplar store and span export queue, the
# OpenTelemetry trace SDK and OTLP encoder, the HTTP client that sends spans, and the export
# thread. A direct measure of tracing's CPU cost, resolving far below the 1-2 % that alternating
# throughput rounds can on a shared machine (see bench_telemetry --compare nothing).
#
#   examples/tracing_cpu_share.sh [--seconds 60] [--concurrency 32] [--output-json FILE]
#       [--kiln-arg ARG]... [--scrape-protobuf]
#
# `--kiln-arg` passes a flag to the server (repeat it; e.g. `--kiln-arg --otlp-traces-detail
# --kiln-arg phases`; `--otlp-endpoint` pointed at the same sink as `SINK/v1/metrics` is
# spelled `--kiln-arg --otlp-endpoint --kiln-arg SINK_METRICS`). `--scrape-protobuf` scrapes
# /metrics every second in the protobuf exposition, as a Prometheus with native histograms
# does. Besides tracing, the report counts the samples in native histograms (recording and
# protobuf encoding) and in all telemetry: compare runs of one session for the cost of a flag.
#
# Needs perf (linux-perf), python3, `cargo build --release --examples` (kiln and bench_serving)
# and the default model (KILN_MODEL_GGUF, or the first *.gguf under .ci/cache).
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PROFILED=60
CONCURRENCY=32
OUTPUT_JSON=bench-results/tracing-cpu-share.json
KILN_ARGS=()
SCRAPE_PROTOBUF=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --kiln-arg) KILN_ARGS+=("$2"); shift 2 ;;
    --scrape-protobuf) SCRAPE_PROTOBUF=1; shift ;;
    --seconds) SECONDS_PROFILED="$2"; shift 2 ;;
    --concurrency) CONCURRENCY="$2"; shift 2 ;;
    --output-json) OUTPUT_JSON="$2"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done

command -v perf >/dev/null || { echo "perf is not installed (Debian: linux-perf)" >&2; exit 1; }
KILN=target/release/kiln
BENCH=target/release/examples/bench_serving
for bin in "$KILN" "$BENCH"; do
  [[ -x "$bin" ]] || { echo "$bin is missing: cargo build --release --examples" >&2; exit 1; }
done
MODEL="${KILN_MODEL_GGUF:-$(find .ci/cache -name '*.gguf' 2>/dev/null | head -n 1)}"
[[ -f "$MODEL" ]] || { echo "no model: set KILN_MODEL_GGUF or run kiln fetch-model" >&2; exit 1; }

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
SINK_PORT="$(free_port)"
KILN_PORT="$(free_port)"

# The OTLP sink: answers every export 200 with an empty protobuf body.
python3 - "$SINK_PORT" <<'EOF' &
import http.server, sys
class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
EOF
PIDS+=($!)

for i in "${!KILN_ARGS[@]}"; do
  KILN_ARGS[i]="${KILN_ARGS[i]//SINK_METRICS/http://127.0.0.1:$SINK_PORT/v1/metrics}"
done
"$KILN" serve --model "$MODEL" --host 127.0.0.1 --port "$KILN_PORT" \
  --otlp-traces-endpoint "http://127.0.0.1:$SINK_PORT/v1/traces" ${KILN_ARGS[@]+"${KILN_ARGS[@]}"} >"$WORK/kiln.log" 2>&1 &
KILN_PID=$!
PIDS+=("$KILN_PID")
URL="http://127.0.0.1:$KILN_PORT"
for _ in $(seq 120); do
  curl -sf "$URL/v1/models" | grep -q '"id"' && break
  kill -0 "$KILN_PID" 2>/dev/null || { cat "$WORK/kiln.log" >&2; exit 1; }
  sleep 1
done
curl -sf "$URL/v1/models" | grep -q '"id"' || { echo "kiln did not become ready" >&2; exit 1; }

load() { # $1 prompts
  "$BENCH" --base-url "$URL" --num-prompts "$1" --max-concurrency "$CONCURRENCY" \
    --input-len 32 --output-len 32 --ignore-eos --output-json "$WORK/load.json" >"$WORK/load.log" 2>&1
}
load "$CONCURRENCY" # warm-up: page faults and first allocations stay out of the profile

# The load runs past the profile's end, so every sample is taken under load.
load $((CONCURRENCY * 64)) &
LOAD_PID=$!
PIDS+=("$LOAD_PID")
if [[ "$SCRAPE_PROTOBUF" == 1 ]]; then
  PROTOBUF='application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited'
  (while true; do curl -sf -H "Accept: $PROTOBUF" "$URL/metrics" -o /dev/null; sleep 1; done) &
  PIDS+=($!)
fi
perf record --call-graph dwarf,16384 -F 199 -p "$KILN_PID" -o "$WORK/perf.data" -- sleep "$SECONDS_PROFILED" \
  >"$WORK/perf.log" 2>&1
kill "$LOAD_PID" 2>/dev/null || true
SPAN_EXPORTS="$(curl -sf "$URL/metrics" | awk '/^kiln_otlp_span_exports_total\{.*result="success"/ { s += $NF } END { print s + 0 }')"

[[ "${SPAN_EXPORTS%.*}" -gt 0 ]] || { echo "no span export succeeded: the server was not tracing" >&2; exit 1; }

perf script -i "$WORK/perf.data" -F comm,tid,ip,sym 2>/dev/null >"$WORK/perf.txt"
mkdir -p "$(dirname "$OUTPUT_JSON")"
python3 - "$WORK/perf.txt" "$OUTPUT_JSON" "$CONCURRENCY" "$SECONDS_PROFILED" "$SPAN_EXPORTS" ${KILN_ARGS[@]+"${KILN_ARGS[@]}"} <<'EOF'
import json, math, re, sys
path, output, concurrency, seconds, span_exports = sys.argv[1:6]
# Frames that run only because requests are traced.
TRACING_FRAME = re.compile(
    r"kiln::traces::|kiln::stats::span_exports|opentelemetry_sdk::trace"
    r"|opentelemetry_otlp|opentelemetry_proto|prost::|reqwest::|hyper::|hyper_util::|\bh2::")
# Threads that exist only to export spans.
TRACING_THREAD = re.compile(r"^(kiln-span-expor|reqwest-interna)")
TELEMETRY_FRAME = re.compile(r"kiln::stats::|opentelemetry")
# Native histograms: the store's recording (native buckets and exemplars) and the protobuf
# exposition.
NATIVE_FRAME = re.compile(r"kiln::stats::(histogram_store|native_buckets|protobuf_exposition|prom_proto)")

samples = tracing = telemetry = native = 0
thread, frames = None, []
def flush():
    global samples, tracing, telemetry, native
    if thread is None:
        return
    samples += 1
    if any(NATIVE_FRAME.search(f) for f in frames):
        native += 1
    if TRACING_THREAD.match(thread) or any(TRACING_FRAME.search(f) for f in frames):
        tracing += 1
    if any(TELEMETRY_FRAME.search(f) for f in frames):
        telemetry += 1
for line in open(path, errors="replace"):
    if not line.strip():
        flush(); thread, frames = None, []
    elif not line[0].isspace():
        thread, frames = line.split()[0], []
    else:
        frames.append(line.strip())
flush()
if samples == 0:
    sys.exit("perf recorded no samples")

def share(hits):
    p = hits / samples
    # ~95 % interval; with no hits, the rule of three.
    return 100 * p, 100 * (2 * math.sqrt(p * (1 - p) / samples) if hits else 3 / samples)

def cpu():
    info = open("/proc/cpuinfo").read()
    model = re.search(r"model name\s*:\s*(.*)", info)
    flags = re.search(r"flags\s*:\s*(.*)", info)
    wanted = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16")
    have = set(flags.group(1).split()) if flags else set()
    return {"model": model.group(1) if model else "?", "flags": [f for f in wanted if f in have],
            "logical_cpus": info.count("processor\t:")}

t, t_ci = share(tracing)
m, m_ci = share(telemetry)
n, n_ci = share(native)
print("| CPU samples | in tracing | in native histograms | all telemetry (metrics, exemplars, spans) |")
print("|---|---|---|---|")
print(f"| {samples} | {t:.3f} ± {t_ci:.3f} % | {n:.3f} ± {n_ci:.3f} % | {m:.3f} ± {m_ci:.3f} % |")
print(f"span exports that succeeded: {span_exports}")
report = {"concurrency": int(concurrency), "seconds_profiled": int(seconds), "samples": samples,
          "tracing_samples": tracing, "tracing_percent": t, "tracing_percent_95ci": t_ci,
          "telemetry_samples": telemetry, "telemetry_percent": m, "telemetry_percent_95ci": m_ci,
          "native_histogram_samples": native, "native_histogram_percent": n,
          "native_histogram_percent_95ci": n_ci, "kiln_args": sys.argv[6:],
          "span_exports_succeeded": float(span_exports), "cpu": cpu()}
json.dump(report, open(output, "w"), indent=2)
print(f"wrote {output}")
EOF
