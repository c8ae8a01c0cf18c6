#!/usr/bin/env bash
# The half of the GPU check that runs here: builds `gpu_kit` (bench_engine with a tokenizer
# export, one binary) with burn's CUDA backend against CUDA 13.0, the lent machine's driver,
# strips it, writes the default model's tokenizer files and shapes, and gathers what
# there.sh needs into one folder that fits a 64 MiB transfer:
#
#   examples/gpu/build_bundle.sh [--cpu] [MODEL.gguf]     -> target/gpu-bundle (or -cpu)
#
# --cpu builds the same kit on the CPU backend, for rehearse_on_cpu.sh. Send it with
# `run --carry target/gpu-bundle 'bash target/gpu-bundle/there.sh target/gpu-bundle $OUT'`.
set -euo pipefail
cd "$(dirname "$0")/../.."
features=cuda,testing
bundle=target/gpu-bundle
if [ "${1:-}" = "--cpu" ]; then
    features=testing
    bundle=target/gpu-bundle-cpu
    shift
fi
model="${1:-${KILN_TEST_MODEL:-.ci/cache/SmolLM2-135M-Instruct.Q4_1.gguf}}"
limit=$((60 * 1024 * 1024)) # under the 64 MiB a call may carry, with room for the scripts
compress_over=$((24 * 1024 * 1024)) # the CUDA binary (about 55 MB) goes as xz; there.sh unpacks it

CUDARC_CUDA_VERSION=13000 cargo build --release --features "$features" --example gpu_kit
rm -rf "$bundle" && mkdir -p "$bundle"
strip -o "$bundle/gpu_kit" target/release/examples/gpu_kit
"$bundle/gpu_kit" tokenizer --model "$model" --out "$bundle/tokenizer"
if [ "$(stat -c %s "$bundle/gpu_kit")" -gt "$compress_over" ]; then
    xz -T0 -6 "$bundle/gpu_kit"
fi
cp examples/gpu/there.sh examples/gpu/random_llama.py examples/gpu/decode_floor.py "$bundle/"
size=$(du -sb "$bundle" | cut -f1)
ls -l "$bundle" "$bundle/tokenizer"
echo "bundle $bundle: $((size / 1024 / 1024)) MiB ($features)"
[ "$size" -le "$limit" ] || { echo "bundle over $((limit / 1024 / 1024)) MiB" >&2; exit 1; }
