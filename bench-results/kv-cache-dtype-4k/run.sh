#!/bin/sh
# Decode at 4,000 tokens of context, one stream, for each --kv-cache-dtype (issue 50.2).
# bench_engine's --long-context case: the prompt is prefilled in chunks, then 32 decode steps
# are timed. Run from the repository root with KILN_TEST_MODEL set to the default model's GGUF.
set -eu
out=bench-results/kv-cache-dtype-4k
bin=target/release/examples/bench_engine
for round in 1 2; do
  for dtype in float32 auto bfloat16 fp8; do
    nice -n 10 "$bin" --model "$KILN_TEST_MODEL" --prefill-len 16 --decode-batches 1 \
      --profile-passes 0 --skip-kernel-rates --long-context 4000 --decode-steps 32 \
      --kv-cache-dtype "$dtype" --output-json "$out/$dtype-round$round.json" 2>/dev/null |
      grep -E 'decode|KV cache dtype'
  done
done
