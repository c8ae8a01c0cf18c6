#!/usr/bin/env bash
# The GPU machine's half (there.sh), run here on the CPU backend so it is known to work
# before a GPU is ever lent: torch and transformers from PyPI (about 3 GB, in
# ~/.cache/kiln/gpu-venv), the kit built with --cpu. Not part of CI.
#
#   examples/gpu/rehearse_on_cpu.sh [MODEL.gguf]     -> bench-results/gpu-rehearsal-cpu/
set -euo pipefail
cd "$(dirname "$0")/../.."
venv="${KILN_GPU_VENV:-$HOME/.cache/kiln/gpu-venv}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q torch transformers safetensors
fi
bash examples/gpu/build_bundle.sh --cpu "$@"
PYTHON="$venv/bin/python" bash target/gpu-bundle-cpu/there.sh target/gpu-bundle-cpu \
    bench-results/gpu-rehearsal-cpu
