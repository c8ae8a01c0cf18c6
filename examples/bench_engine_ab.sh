#!/usr/bin/env bash
# Paired before/after rounds of bench_engine on the Q4_K_M default model and Gemma 3 270M Q4_K_M
# (issue 27's two files): for each round and model, build A then build B, back to back, so both
# see the same neighbours; the load average is printed next to every figure. One line each:
# decode tok/s at 1, 8 and 32 streams and the one-stream profile's output-head time.
#
#   examples/bench_engine_ab.sh OUT_DIR BENCH_ENGINE_A BENCH_ENGINE_B
#   ROUNDS=3 examples/bench_engine_ab.sh /tmp/ab /tmp/bench_engine_main target/release/examples/bench_engine
#
# Copy a build's target/release/examples/bench_engine aside first to keep it as A. The models
# come from KILN_TEST_Q4KM and KILN_TEST_GEMMA3 (as .ci/run exports them). A_ARGS and B_ARGS
# add flags to one side (the same build twice compares settings), PREFILL sets the prompt:
#   PREFILL=128 B_ARGS="--cpu-activations int8" examples/bench_engine_ab.sh /tmp/int8 \
#     target/release/examples/bench_engine target/release/examples/bench_engine
set -euo pipefail
if [[ $# -ne 3 ]]; then
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
out="$1" a="$2" b="$3" rounds="${ROUNDS:-2}" prefill="${PREFILL:-64}"
: "${KILN_TEST_Q4KM:?set KILN_TEST_Q4KM}" "${KILN_TEST_GEMMA3:?set KILN_TEST_GEMMA3}"
mkdir -p "$out"
load() { cut -d' ' -f1 /proc/loadavg; }
for r in $(seq "$rounds"); do
  for m in Q4KM GEMMA3; do
    for side in A B; do
      if [[ $side == A ]]; then bin="$a" extra="${A_ARGS:-}"; else bin="$b" extra="${B_ARGS:-}"; fi
      model_var="KILN_TEST_$m"
      tag="$side-$(basename "$(dirname "$bin")")-$(basename "$bin")"
      name="$out/$m-$tag-r$r"
      before="$(load)"
      # shellcheck disable=SC2086 # the extra flags split into words on purpose
      nice -n 5 "$bin" --model "${!model_var}" --long-context 0 --decode-steps 64 --prefill-len "$prefill" \
        --skip-kernel-rates --profile-passes 2 --output-json "$name.json" $extra >"$name.txt" 2>&1
      rates="$(grep -E '^\| decode \|' "$name.txt" | awk -F'|' '{printf "%s:%s ", $3, $5}')"
      prefill_rate="$(grep -E '^\| prefill' "$name.txt" | awk -F'|' '{print $5}')"
      head="$(grep 'output head' "$name.txt" | awk -F'|' '{print $3 "ms " $6 "GB/s"}')"
      echo "$m $tag ${extra:+($extra) }r$r load $before-$(load): prefill $prefill tok/s$prefill_rate streams:tok/s $rates head $head"
    done
  done
done
