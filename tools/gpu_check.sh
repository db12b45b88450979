#!/usr/bin/env bash
# The prepared GPU check (tools/gpu_check.py): torch backend vs numpy on the null, PK and closure
# kernels at 7B and 235B layer shapes, FLOP rates vs the device's GEMM rate. Under 5 minutes.
#   tools/gpu_check.sh            # CUDA (bench/gpu_check.sh runs this one)
#   tools/gpu_check.sh --device cpu --reps 1
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
exec timeout 300 "$PY" tools/gpu_check.py "$@"
