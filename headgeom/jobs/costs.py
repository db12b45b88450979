"""Job resources (mem_mb, runtime in minutes) for the closure and PK rules, scaled from costs
measured at Qwen2.5-7B shape (d_model 3584, d_head 128, 28 q / 4 kv heads) with one BLAS
thread on this project's 2-core machines: `python bench/pk_job_costs.py` (README,
"Job costs"). The paper 1 rules use headgeom.paper1_jobs.job_resources, measured the same way.

Time scales with the GEMM work D * (H d) * ((H + 2G) d) relative to the reference shape;
memory with the float64 size of one layer's Q/K/V/O factors (224 MiB at the reference)."""

from __future__ import annotations

import json
import math

REF = {"d_model": 3584, "d_head": 128, "n_heads": 28, "n_kv_heads": 4}

# seconds at REF shape (bench/pk_job_costs.py, 2026-11-30; see README "Job costs")
SECONDS = {
    "closure_layer": 3.0,          # Grams + principal coordinates of 28 heads (upper bound)
    "pk_layer": 13.1,              # 4 kinds of bases, pairs, ranks, self-overlap (10,000 perms)
    "pk_cross_pair": 27.3,         # per later layer: Q/K/V bases, all writer x reader blocks, angles, weighted
    "pk_null_within_sample": 26.2,  # per sample, both nulls, 4 kinds (rotation 20.2 + reassign 6.0)
    "pk_null_cross_pair_sample": 9.3,  # per layer pair, per sample, per null
}
# peak RSS = BASE + factor x layer MiB (measured 1150, 1600, 1290, 2030 MB with 2-3 layers)
MEM_FACTOR = {"closure_layer": 3.0, "pk_layer": 4.0, "pk_cross_pair": 5.5, "pk_null_within_sample": 4.5}
BASE_MB = 300
SAFETY = 1.5


def _fields(manifest) -> dict:
    with open(manifest) as fh:
        return json.load(fh)["fields"]


def layer_mib(f: dict) -> float:
    return 8 * f["d_model"] * f["d_head"] * (2 * f["n_heads"] + 2 * f["n_kv_heads"]) / 2**20


def work_ratio(f: dict) -> float:
    def w(x):
        return x["d_model"] * x["n_heads"] * x["d_head"] * (x["n_heads"] + 2 * x["n_kv_heads"]) * x["d_head"]

    return w(f) / w(REF)


def resources(job: str, manifest, n_samples: int = 1, n_null_types: int = 2) -> dict:
    """mem_mb and runtime (minutes) for one job of this model."""
    f = _fields(manifest)
    L, r, mib = f["n_layers"], work_ratio(f), layer_mib(f)
    if job == "closure_layer":
        t, mem = SECONDS["closure_layer"] * r, BASE_MB + MEM_FACTOR["closure_layer"] * mib
    elif job == "pk_layer":
        t, mem = SECONDS["pk_layer"] * r, BASE_MB + MEM_FACTOR["pk_layer"] * mib
    elif job == "pk_cross_layer":  # the writer layer 0 job reads every later layer
        t, mem = SECONDS["pk_cross_pair"] * r * max(L - 1, 1), BASE_MB + MEM_FACTOR["pk_cross_pair"] * mib
    elif job == "pk_null_within":
        t = SECONDS["pk_null_within_sample"] * r * n_samples * n_null_types / 2
        mem = BASE_MB + MEM_FACTOR["pk_null_within_sample"] * mib
    elif job == "pk_null_cross":  # all layers' factors and writer bases stay in memory
        t = SECONDS["pk_null_cross_pair_sample"] * r * (L * (L - 1) / 2) * n_samples * n_null_types
        mem = BASE_MB + (1.5 * L + 3) * mib
    else:
        raise ValueError(f"no cost model for job {job!r}")
    return {"mem_mb": int(math.ceil(max(mem, 500))), "runtime": int(max(5, math.ceil(SAFETY * t / 60)))}
