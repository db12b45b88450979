"""Speed of one within-layer null sample (kinds O + K, Qwen2.5-7B shape) in float64 and float32
(pk.nulls.precision), timed interleaved in one process, best of 2, one BLAS thread.

    .venv/bin/python bench/null_precision_speed.py
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_v] = "1"

from headgeom.core.seeds import rng_for  # noqa: E402
from headgeom.methods.nulls import null_spaces  # noqa: E402
from headgeom.methods.overlap import factor_stack, pk_within  # noqa: E402
import baselines as hb  # noqa: E402

f = hb.synthetic_layer(**hb.QWEN25_7B, seed=200)
X = {k: factor_stack(f, k) for k in ("O", "K")}


def run(prec, null):
    for k in ("O", "K"):
        B, r = null_spaces(X[k], null, rng_for("b", null, k, 0), prec)
        pk_within(B, r, angles="min")  # as pk_null_within_job


fns = {f"{p}-{n}": (lambda p=p, n=n: run(p, n)) for p in ("float64", "float32") for n in ("rotation", "reassign")}
t = hb.interleaved(fns, 2, warmup=False)
b = {k: min(v) for k, v in t.items()}
print({k: round(v, 2) for k, v in b.items()},
      "speedup rotation %.2f reassign %.2f" % (b["float64-rotation"] / b["float32-rotation"],
                                               b["float64-reassign"] / b["float32-reassign"]),
      "load", os.getloadavg())
