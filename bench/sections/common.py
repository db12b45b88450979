"""What every section of ``make bench`` shares: the repository root, the log line, a relative error.

The sections import numpy at their top: bench/run.py imports them only after it has exported the
BLAS thread count (OpenBLAS reads it once, when numpy loads it)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def relerr(a, b) -> float:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))
