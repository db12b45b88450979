#!/usr/bin/env bash
# The prepared GPU check (bench/gpu_check.py): torch backend vs numpy on the null, PK and closure
# kernels at 7B and 235B layer shapes, FLOP rates vs the device's GEMM rate. Under 5 minutes.
#   bench/gpu_check.sh            # CUDA
#   bench/gpu_check.sh --device cpu --reps 1
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
exec timeout 300 "$PY" bench/gpu_check.py "$@"
