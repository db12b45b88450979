"""One pk_null_cross part at a model's full layer shape, timed against the cost model.

    .venv/bin/python bench/null_cross_part.py [--shape 4096 64 4 128] [--side 3] [--part 1] [--threads 1]
                                              [--types rotation,reassign] [--precision float64]
                                              [--out results/bench/null_cross_part.json]

Builds a synthetic store of the shape (d_model, q heads, kv heads, d_head; default Qwen3-235B's layer)
with as many layers as the part reads, lays the layer pairs out as the fan-out does
(headgeom.schedule.fanout.tile_parts: tiles of ``--side`` layers a side; part 0 is the first tile on
the diagonal of the layer-pair triangle, part 1 the first full square), and runs pk_null_cross_job on
that part for one null sample of ``--types``, one BLAS thread, in a process of its own. Prints the job's CPU
seconds beside the cost model's price of the same part (headgeom.schedule.costs.null_cross_part_seconds,
before the 1.5 margin), both as they are and with the model's GEMM rate replaced by the rate this
process measures just before (a loaded machine runs everything slower; the ratio is what the model
must get right), and fails (exit 1) when the measured time is outside 1/1.5 .. 1.5 x the rescaled
price. The design's own part at the 235B shape is 13 layers a side on one core (about 26 min of work); a
smaller side keeps the same per-pair, per-layer and per-head work in proportion, which is what the model
prices. ``--threads N`` runs the job on N cores (pk.nulls.cross_threads) and checks its wall time against
the model's price on N cores instead. ``--precision float32`` runs the part in float32
(pk.nulls.precision) and prices it so (the model: twice the float64 rates). The job runs in a process of
its own, whose peak RSS is printed beside the model's memory for the part.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # bench helpers (bench.null_cross_routes)
sys.path.insert(0, str(ROOT / "tests" / "helpers"))  # the test fixtures the bench shares (tests/helpers/: synth.py)

BOUND = 1.5
os.environ.setdefault("OMP_NUM_THREADS", "1")  # one BLAS thread, as the jobs run
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def draws(D: int, H: int, G: int, d: int, clock=time.process_time, precision: str = "float64") -> dict:
    """One null draw and its heads' bases per kind (O, Q: H heads; K, V: G) and null, and a rotation's
    preparation (the LQ factor of a wide matrix), in CPU seconds beside the cost model's
    (headgeom.schedule.costs.draw_seconds, draw_prep_seconds), with the GEMM rate of the same process."""
    import numpy as np

    from bench.null_cross_routes import gemm_rate
    from headgeom.methods.nulls import NULL_MODELS, null_spaces
    from headgeom.methods.overlap import stacked, stacked_heads
    from headgeom.methods.projectors import GEMM_FLOPS
    from headgeom.schedule import costs

    rate = gemm_rate(np.float64, 3, clock=clock)
    out = {"gemm_gflops": rate / 1e9, "rows": []}
    rng = np.random.default_rng(0)
    for kind, n in (("O", H), ("K", G)):  # Q draws as O does (the same shape)
        X = stacked_heads(rng.standard_normal((n, D, d)))
        for null in ("rotation", "reassign"):
            prep = NULL_MODELS[null].prepare
            t0 = clock()
            kw = prep(stacked(X)) if prep is not None else {}
            t_prep = clock() - t0
            prepared = {(null, precision, kind): kw}
            t0 = clock()
            null_spaces(X, null, np.random.default_rng(1), precision, prepared=prepared, key=kind)
            t_draw = clock() - t0
            scale = GEMM_FLOPS / rate  # the model's seconds at this run's GEMM rate
            itemsize = 4 if precision == "float32" else 8
            row = {"kind": kind, "null": null, "heads": n, "draw_s": t_draw, "prep_s": t_prep,
                   "draw_priced_s": costs.draw_seconds(D, d, n, null, itemsize) / scale,
                   "prep_priced_s": costs.draw_prep_seconds(D, d, n, null, itemsize) / scale}
            out["rows"].append(row)
            print(f"  {kind} ({n} heads) {null}: draw + bases {t_draw:.2f} CPU-s (priced {row['draw_priced_s']:.2f}), "
                  f"preparation {t_prep:.2f} (priced {row['prep_priced_s']:.2f})", flush=True)
    return out


def run_part(store, part, params: dict, threads: int, out) -> dict:
    """pk_null_cross_job on ``part`` in a process of its own with ``threads`` BLAS threads (as Snakemake starts a
    job): its wall and CPU seconds (every thread's) and its peak RSS."""
    import subprocess

    code = ("import json, resource, sys, time\n"
            "from headgeom.jobs.pk_paper import pk_null_cross_job\n"
            "a = json.loads(sys.argv[1])\n"
            "w, c = time.perf_counter(), time.process_time()\n"
            "pk_null_cross_job(a['store'], [0], a['out'], a['params'], segments=a['part'], log=lambda *_: None)\n"
            "print(json.dumps({'wall_s': time.perf_counter() - w, 'cpu_s': time.process_time() - c,\n"
            "                  'peak_rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))\n")
    env = {**os.environ, **{v: str(threads) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}}
    arg = json.dumps({"store": str(store), "out": str(out), "params": params, "part": [list(s) for s in part]})
    r = subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True, env=env, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", type=int, nargs=4, default=[4096, 64, 4, 128], metavar=("D", "H", "G", "d"))
    ap.add_argument("--side", type=int, default=3)
    ap.add_argument("--part", type=int, default=1)
    ap.add_argument("--types", default="rotation,reassign")
    ap.add_argument("--draws", action="store_true", help="only the draws of each kind and null, against the model")
    ap.add_argument("--threads", type=int, default=1,
                    help="the job's cores (pk.nulls.cross_threads): its wall time against the model's on them, and "
                         "its peak RSS against the model's memory")
    ap.add_argument("--precision", choices=("float64", "float32"), default="float64",
                    help="the part's arithmetic (pk.nulls.precision), run and priced")
    ap.add_argument("--out", default=str(ROOT / "results/bench/null_cross_part.json"))
    a = ap.parse_args(argv)
    import numpy as np

    from bench.null_cross_routes import gemm_rate
    from headgeom.io.fetch import fetch_model
    from headgeom.methods import projectors
    from headgeom.schedule import costs, fanout
    from synth import write_llama

    D, H, G, d = a.shape
    if a.draws:
        res = {"shape": a.shape, "precision": a.precision, "load": os.getloadavg(),
               **draws(D, H, G, d, precision=a.precision)}
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(res, indent=1))
        print(json.dumps(res, indent=1))
        return 0
    types = a.types.split(",")
    part = fanout.tile_parts(2 * a.side + 1, a.side)[a.part]  # the part's layout, whatever the model's depth
    pairs, n_w, n_r = fanout.part_layers(part)
    L = max(r1 for _, _, r1 in part)
    fields = {"d_model": D, "n_heads": H, "n_kv_heads": G, "d_head": d, "n_layers": L}
    res = {"shape": fields, "side": a.side, "part": [list(s) for s in part], "pairs": pairs, "writers": n_w,
           "readers": n_r, "types": types, "precision": a.precision, "uptime_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as td:
        td = Path(td)
        write_llama(td / "ck", d_model=D, n_heads=H, n_kv=G, d_head=d, n_layers=L, closed=())
        fetch_model("bench-shape", {"source": "local", "path": str(td / "ck")}, td / "store", log=lambda *_: None)
        rate = gemm_rate(np.float64, 3, clock=time.process_time)
        p = {"rank_rtol": 1e-6, "cross_kinds": ["Q", "K", "V"], "types": types, "cross_threads": a.threads,
             "precision": a.precision}
        res.update(run_part(td / "store", part, p, a.threads, td / "part.parquet"))
    res["gemm_gflops"] = rate / 1e9
    res["uptime_after"] = os.getloadavg()
    priced = costs.null_cross_part_seconds(fields, pairs, n_w, n_r, 1, len(types), a.precision, null_types=types)
    res["priced_s"] = priced
    res["priced_at_measured_rate_s"] = priced * projectors.GEMM_FLOPS / rate
    res["measured_over_priced"] = res["cpu_s"] / res["priced_at_measured_rate_s"]
    ok = 1 / BOUND <= res["measured_over_priced"] <= BOUND
    model = costs.pk_null_cross(fields, 1, len(types), pairs, n_w, n_r, a.precision, null_types=types,
                                threads=a.threads)
    res["mem_model_mb"], res["mem_headroom"] = model["mem_mb"], model["mem_mb"] / res["peak_rss_mb"]
    if a.threads > 1:  # on several cores the wall time is what the model prices (its phases at THREAD_EFFICIENCY)
        wall = costs.null_cross_part_seconds(fields, pairs, n_w, n_r, 1, len(types), a.precision, null_types=types,
                                             threads=a.threads) * projectors.GEMM_FLOPS / rate
        res["priced_wall_at_measured_rate_s"], res["wall_over_priced"] = wall, res["wall_s"] / wall
        ok = 1 / BOUND <= res["wall_over_priced"] <= BOUND
    res["within_bound"] = ok
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))
    if a.threads > 1:
        print(f"on {a.threads} threads: {res['wall_s']:.0f} s wall measured, {res['priced_wall_at_measured_rate_s']:.0f} s "
              f"priced: {res['wall_over_priced']:.2f}x")
    print(f"peak RSS {res['peak_rss_mb']:.0f} MB, the model's memory {res['mem_model_mb']} MB "
          f"({res['mem_headroom']:.2f}x; the model's 600 MB base is Snakemake's jobstep and the job's imports)")
    print(f"pk_null_cross part at {D}/{H}q/{G}kv/{d}: {pairs} pairs, {n_w} writer and {n_r} reader layers, "
          f"{'+'.join(types)}: {res['cpu_s']:.0f} CPU-s measured, {res['priced_at_measured_rate_s']:.0f} s priced at "
          f"this run's GEMM rate ({rate / 1e9:.1f} GFLOP/s): {res['measured_over_priced']:.2f}x "
          f"({'within' if ok else 'OUTSIDE'} 1/{BOUND}..{BOUND}x)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
