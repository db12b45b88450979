"""The PK paper's per-layer jobs at a model's full layer shape, each timed against its cost model.

    .venv/bin/python bench/pk_job_costs.py [--shape 3584 28 4 128] [--jobs pk_within_layer,pk_cross_layer,pk_null_within]
                                           [--pairs 2] [--samples 2] [--out results/bench/pk_job_costs.json]

Builds a synthetic store of the shape (d_model, q heads, kv heads, d_head; default Qwen2.5-7B's layer;
``--shape 4096 64 4 128`` is Qwen3-235B's) with as many layers as the jobs read, and runs each job in a
process of its own with one BLAS thread, as Snakemake starts it:

* ``pk_within_layer``: layer 0, every kind, its self-overlap tests;
* ``pk_cross_layer``: writer layer 0 against readers 1 .. ``--pairs`` (Q, K, V), one part;
* ``pk_null_within``: layer 0, ``--samples`` samples of both nulls, Q and K (config/paper.yaml's kinds).

Prints each job's CPU seconds beside its cost model's expected work (headgeom.schedule.costs, before the
request's margin), as priced and rescaled to the GEMM rate this process measures just before (the models
price the reference rate, methods.projectors.GEMM_FLOPS; a slower node runs everything slower and the ratio
is what the model must get right), and its peak RSS beside the model's memory. Exit 1 when a job's
measured time is outside 1/1.5 .. 1.5 x the rescaled price, or the model's memory is under 1.3 x its peak."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # bench helpers (bench.null_cross_routes)
sys.path.insert(0, str(ROOT / "tests" / "helpers"))  # the test fixtures the bench shares (tests/helpers/: synth.py)

BOUND = 1.5
MEM_HEADROOM = 1.3  # the model's memory over the job process's peak (under Snakemake its own ~190 MiB adds to it)
JOBS = ("pk_within_layer", "pk_cross_layer", "pk_null_within")
WITHIN_KINDS = ["Q", "K"]
TYPES = ["rotation", "reassign"]

JOB = r"""
import json, resource, sys, time
from headgeom.jobs import pk_paper as jobs
a = json.loads(sys.argv[1])
p = {"rank_rtol": 1e-6, "kinds": ["O", "Q", "K", "V"], "cross_kinds": ["Q", "K", "V"], "self_permutations": 10000}
q = lambda *_: None
w, c = time.perf_counter(), time.process_time()
if a["job"] == "pk_within_layer":
    jobs.pk_job(a["store"], 0, a["out"], p, out_self=a["out"] + ".self", log=q)
elif a["job"] == "pk_cross_layer":
    jobs.pk_cross_job(a["store"], 0, a["out"], p, segments=[(0, 1, a["pairs"] + 1)], log=q)
else:
    jobs.pk_null_within_job(a["store"], 0, list(range(a["samples"])), a["out"],
                            {**p, "kinds": a["kinds"], "types": a["types"]}, log=q)
print(json.dumps({"wall_s": time.perf_counter() - w, "cpu_s": time.process_time() - c,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def priced(job: str, fields: dict, pairs: int, samples: int) -> dict:
    """The cost model's resources of the job as the bench runs it."""
    from headgeom.schedule import costs

    if job == "pk_within_layer":
        return costs.pk_within_layer(fields)
    if job == "pk_cross_layer":
        return costs.pk_cross_layer(fields, n_pairs=pairs, n_writers=1)
    return costs.pk_null_within(fields, samples, len(TYPES), kinds=WITHIN_KINDS)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", type=int, nargs=4, default=[3584, 28, 4, 128], metavar=("D", "H", "G", "d"))
    ap.add_argument("--jobs", default=",".join(JOBS))
    ap.add_argument("--pairs", type=int, default=2, help="pk_cross_layer: reader layers of writer layer 0")
    ap.add_argument("--samples", type=int, default=2, help="pk_null_within: samples of both nulls")
    ap.add_argument("--out", default=str(ROOT / "results/bench/pk_job_costs.json"))
    a = ap.parse_args(argv)
    import numpy as np

    from bench.null_cross_routes import gemm_rate
    from headgeom.io.fetch import fetch_model
    from headgeom.methods.projectors import GEMM_FLOPS
    from synth import write_llama

    D, H, G, d = a.shape
    jobs = a.jobs.split(",")
    unknown = set(jobs) - set(JOBS)
    if unknown:
        ap.error(f"unknown job(s) {sorted(unknown)}; known: {', '.join(JOBS)}")
    L = a.pairs + 1 if "pk_cross_layer" in jobs else 1
    fields = {"d_model": D, "n_heads": H, "n_kv_heads": G, "d_head": d, "n_layers": L}
    res = {"shape": fields, "load_before": os.getloadavg(), "jobs": []}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    ok = True
    with tempfile.TemporaryDirectory() as td:
        td = Path(td)
        write_llama(td / "ck", d_model=D, n_heads=H, n_kv=G, d_head=d, n_layers=L, closed=())
        fetch_model("bench-shape", {"source": "local", "path": str(td / "ck")}, td / "store", log=lambda *_: None)
        for job in jobs:
            rate = gemm_rate(np.float64, 3, clock=time.process_time)
            arg = {"job": job, "store": str(td / "store"), "out": str(td / f"{job}.parquet"), "pairs": a.pairs,
                   "samples": a.samples, "kinds": WITHIN_KINDS, "types": TYPES}
            r = subprocess.run([sys.executable, "-c", JOB, json.dumps(arg)], capture_output=True, text=True, env=env)
            if r.returncode:
                raise SystemExit(f"{job} failed:\n{r.stderr[-3000:]}")
            row = {"job": job, **json.loads(r.stdout.strip().splitlines()[-1]), "gemm_gflops": rate / 1e9}
            model = priced(job, fields, a.pairs, a.samples)
            row["priced_s"] = model["work_s"]
            row["priced_at_measured_rate_s"] = model["work_s"] * GEMM_FLOPS / rate
            row["measured_over_priced"] = row["cpu_s"] / row["priced_at_measured_rate_s"]
            row["mem_model_mb"] = model["mem_mb"]
            row["mem_headroom"] = row["mem_model_mb"] / row["peak_rss_mb"]
            row["within_bound"] = 1 / BOUND <= row["measured_over_priced"] <= BOUND and row["mem_headroom"] >= MEM_HEADROOM
            ok &= row["within_bound"]
            res["jobs"].append(row)
            what = {"pk_cross_layer": f"{a.pairs} layer pairs", "pk_null_within": f"{a.samples} samples x 2 nulls, Q and K",
                    "pk_within_layer": "one layer"}[job]
            print(f"{job} at {D}/{H}q/{G}kv/{d} ({what}): {row['cpu_s']:.1f} CPU-s measured, "
                  f"{row['priced_at_measured_rate_s']:.1f} s priced at this run's GEMM rate ({rate / 1e9:.1f} GFLOP/s; "
                  f"{row['priced_s']:.1f} s at the reference): {row['measured_over_priced']:.2f}x; peak RSS "
                  f"{row['peak_rss_mb']:.0f} MB, model {row['mem_model_mb']} MB ({row['mem_headroom']:.2f}x): "
                  f"{'within' if row['within_bound'] else 'OUTSIDE'} 1/{BOUND}..{BOUND}x and {MEM_HEADROOM}x memory",
                  flush=True)
    res["load_after"] = os.getloadavg()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
