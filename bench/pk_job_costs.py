"""Time and peak memory of each PK job type at Qwen2.5-7B shape on synthetic tensors.

    .venv/bin/python bench/pk_job_costs.py [--layers 3] [--out results/bench/pk_job_costs.json]

Builds a synthetic Llama-layout store (d_model 3584, d_head 128, 28 q / 4 kv heads, --layers
layers), runs each job function in a fresh subprocess and reads its wall time and peak RSS.
Per-layer-pair costs are reported so the full 28-layer figures can be extrapolated (the
README's table and the rules' resources come from this)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "helpers"))  # the test fixtures the bench shares (tests/helpers/: synth.py)

JOB = r"""
import json, resource, sys, time
from headgeom.jobs import pk_paper as jobs
store, kind, out = sys.argv[1], sys.argv[2], sys.argv[3]
p = {"rank_rtol": 1e-6, "kinds": ["O", "Q", "K", "V"], "cross_kinds": ["Q", "K", "V"],
     "types": ["rotation", "reassign"], "self_permutations": 10000}
t = time.perf_counter()
q = lambda *a: None
if kind == "pk_within_layer": jobs.pk_job(store, 0, out, p, out_self=out + ".self", log=q)
elif kind == "pk_cross_layer": jobs.pk_cross_job(store, 0, out, p, log=q)
elif kind == "pk_null_within": jobs.pk_null_within_job(store, 0, [0], out, {**p, "types": ["rotation"]}, log=q)
elif kind == "pk_null_within_reassign": jobs.pk_null_within_job(store, 0, [0], out, {**p, "types": ["reassign"]}, log=q)
elif kind == "pk_null_cross": jobs.pk_null_cross_job(store, [0], out, {**p, "types": ["rotation"]}, log=q)
print(json.dumps({"seconds": time.perf_counter() - t, "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "results/bench/pk_job_costs.json"))
    ap.add_argument("--jobs", default="pk_within_layer,pk_cross_layer,pk_null_within,pk_null_within_reassign,pk_null_cross")
    a = ap.parse_args()
    from headgeom.io.fetch import fetch_model
    from synth import write_llama

    L = a.layers
    res = {"shape": {"d_model": 3584, "d_head": 128, "n_heads": 28, "n_kv": 4, "layers_built": L}}
    with tempfile.TemporaryDirectory() as td:
        td = Path(td)
        t = time.perf_counter()
        write_llama(td / "ck", d_model=3584, n_heads=28, n_kv=4, d_head=128, n_layers=L, closed=())
        fetch_model("qwen7b-shape", {"source": "local", "path": str(td / "ck")}, td / "store", log=lambda *_: None)
        res["build_seconds"] = time.perf_counter() - t
        for kind in a.jobs.split(","):
            r = subprocess.run([sys.executable, "-c", JOB, str(td / "store"), kind, str(td / f"{kind}.parquet")],
                               capture_output=True, text=True, check=True)
            res[kind] = json.loads(r.stdout.strip().splitlines()[-1])
            print(kind, res[kind], flush=True)
    if "pk_cross_layer" not in res or "pk_null_cross" not in res:
        print(json.dumps(res, indent=1))
        return
    pairs_cross = L - 1  # writer layer 0 against every later layer
    pairs_null = L * (L - 1) // 2
    res["per_layer_pair_seconds"] = {
        "pk_cross_layer": res["pk_cross_layer"]["seconds"] / pairs_cross,
        "pk_null_cross_per_sample_per_null": res["pk_null_cross"]["seconds"] / pairs_null,
    }
    full = 28 * 27 // 2
    res["extrapolated_28_layers"] = {
        "pk_cross_layer_writer0_seconds": res["per_layer_pair_seconds"]["pk_cross_layer"] * 27,
        "pk_null_cross_seconds_per_sample_per_null": res["per_layer_pair_seconds"]["pk_null_cross_per_sample_per_null"] * full,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
