#!/usr/bin/env bash
# The GPU check lives in tools/ (it is a check, not a benchmark); this path keeps working.
exec "$(dirname "$0")/../tools/gpu_check.sh" "$@"
