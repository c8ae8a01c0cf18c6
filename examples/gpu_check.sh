#!/usr/bin/env bash
# GPU checks, for a machine with an NVIDIA GPU (burn's CUDA backend, kernels compiled by NVRTC
# at run time): reference parity of the default model on the GPU, then the engine benchmark.
#
#   examples/gpu_check.sh [MODEL.gguf]      (default: $KILN_TEST_MODEL or .ci/cache/…gguf)
#
# Without network the cargo registry must already be on the machine (or vendored), or run the
# binaries built elsewhere with `cargo build --release --features cuda,testing --tests --examples`.
# Not yet run on a GPU: no session so far has had one.
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-${KILN_TEST_MODEL:-.ci/cache/SmolLM2-135M-Instruct.Q4_1.gguf}}"
out="${OUT:-.}"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
cargo build --release --features cuda,testing --tests --examples
KILN_TEST_MODEL="$model" cargo test --release --features cuda,testing --test it -- --ignored reference_parity
cargo run --release --features cuda,testing --example bench_engine -- --model "$model" --output-json "$out/gpu-bench-engine.json"
