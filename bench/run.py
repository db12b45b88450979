"""make bench: headgeom against its baselines and the machine, as ratios measured in one run.

    .venv/bin/python bench/run.py                 # closure, pk, nulls, fetch (a few minutes)
    .venv/bin/python bench/run.py --e2e           # + cold end-to-end pipeline run
    .venv/bin/python bench/run.py --only closure,pk --threads 2

Writes results/bench/{env,stages,closure,pk,nulls,null_cross,fetch,capacity,overhead[,e2e]}.json and results/bench/summary.md and
prints the table of ratios with their targets. Each ratio is of two timings from this process,
interleaved round-robin so both sides see the same background load, each side's best of its
repeats (the machine is shared: a best-of is the least disturbed run). Math is float64. The
stage and PK shares of the matmul rate are timed by this process's CPU time when it runs one
BLAS thread (--clock; wall time otherwise): other jobs' load moves it far less than wall time.

BLAS threads: --threads N (default 1, what a pipeline job gets: Snakemake sets
OPENBLAS_NUM_THREADS to the rule's threads: 1) is exported as OMP/OPENBLAS/MKL_NUM_THREADS
before numpy is imported, unless they are already set in the environment.

The sections are modules of bench/sections/ (kernels: closure, pk; nulls: nulls, null_cross, stages;
pipeline: fetch, overhead, e2e; capacity; summary: summary.md); this file parses the arguments, sets
the BLAS threads, runs the sections asked for and writes their results."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# section name -> (module of bench/sections, function); the order is --only's default order
SECTIONS = {"stages": ("nulls", "bench_stages"), "closure": ("kernels", "bench_closure"), "pk": ("kernels", "bench_pk"),
            "nulls": ("nulls", "bench_nulls"), "null_cross": ("nulls", "bench_null_cross"),
            "null_cross_threads": ("nulls", "bench_null_cross_threads"),
            "fetch": ("pipeline", "bench_fetch"), "capacity": ("capacity", "bench_capacity"),
            "overhead": ("pipeline", "bench_overhead")}

sys.path.insert(0, str(ROOT / "tests" / "helpers"))  # the test fixtures the bench shares (tests/helpers/: synth.py, hubserver.py, capacity_ref.py)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {tuple(SECTIONS)}")
    p.add_argument("--e2e", action="store_true", help="also time a cold end-to-end pipeline run (make run)")
    p.add_argument("--cores", type=int, default=2, help="snakemake -c for --e2e (default 2, as make run)")
    p.add_argument("--paper", action="store_true",
                   help="with --e2e: then run --configfile config/paper.yaml on that run's outputs (the papers' design)")
    p.add_argument("--threads", default=None, help="BLAS threads (default 1 unless OPENBLAS_NUM_THREADS is set)")
    p.add_argument("--repeat", type=int, default=3, help="timed rounds per comparison (default 3)")
    p.add_argument("--naive-samples", type=int, default=3, help="closure: (head, V) evaluations timed for the naive baseline")
    p.add_argument("--fm-heads", type=int, default=8, help="closure: heads timed for the FactoredMatrix baseline (own + wrong V)")
    p.add_argument("--pk-layer-pairs", type=int, default=1, help="PK: writer->reader layer pairs timed per round (of 378)")
    p.add_argument("--scipy-pairs", type=int, default=24, help="PK: head pairs timed with scipy.linalg.subspace_angles")
    p.add_argument("--null-cross-heads", type=int, default=32,
                   help="null_cross: writer and reader heads timed per route (random orthonormal bases)")
    p.add_argument("--quick", action="store_true", help="nulls: skip the rotation null at the Qwen3-235B shape (~1 min/sample)")
    p.add_argument("--precision", default="float64", choices=("float64", "float32"), help="stages: null precision")
    p.add_argument("--clock", default=None, choices=("cpu", "wall"),
                   help="stages and PK GEMM shares: time by this process's CPU time (default with 1 BLAS thread: "
                        "on a shared machine it is what the work got of a core) or by wall time (default otherwise)")
    p.add_argument("--out", default=str(ROOT / "results" / "bench"))
    return p.parse_args(argv)


def _set_threads(args) -> None:
    """Export --threads as the BLAS thread count (unless one is set already and --threads is not
    given); --clock defaults to CPU time under one BLAS thread. Before any section (or numpy) is
    imported: OpenBLAS reads the count once, when numpy loads it."""
    if args.threads is not None or "OPENBLAS_NUM_THREADS" not in os.environ:
        n = str(args.threads or 1)
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = n
    if args.clock is None:
        args.clock = "cpu" if os.environ.get("OPENBLAS_NUM_THREADS") == "1" else "wall"


def section(name: str):
    """The function that runs section ``name`` (imported now, after the BLAS threads are set)."""
    module, fn = SECTIONS[name]
    return getattr(importlib.import_module(f"sections.{module}"), fn)


def main(argv=None) -> int:
    args = parse_args(argv)
    _set_threads(args)
    import baselines as hb
    from sections.common import log
    from sections.pipeline import bench_e2e
    from sections.summary import summarize

    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    env = hb.thread_settings()
    log("threads: " + json.dumps(env["env"]) + f"; OpenBLAS runtime threads {(env['numpy_openblas_runtime'] or {}).get('threads')}")
    (outdir / "env.json").write_text(json.dumps(env, indent=1) + "\n")
    wanted = [s for s in args.only.split(",") if s]
    unknown = set(wanted) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown section(s) {sorted(unknown)}; known: {tuple(SECTIONS)}")
    results = {}
    t0 = time.perf_counter()
    for name in wanted:
        results[name] = section(name)(args)
        (outdir / f"{name}.json").write_text(json.dumps(results[name], indent=1, default=str) + "\n")
    if args.e2e:
        results["e2e"] = bench_e2e(args)
        (outdir / "e2e.json").write_text(json.dumps(results["e2e"], indent=1) + "\n")
    md = summarize(results, env) + f"\nbench wall time {time.perf_counter() - t0:.0f} s\n"
    if args.e2e and results["e2e"].get("rules_markdown"):
        md += "\n" + results["e2e"]["rules_markdown"]
    if args.e2e and (results["e2e"].get("paper") or {}).get("rules_markdown"):
        md += "\n`--configfile config/paper.yaml` after it:\n\n" + results["e2e"]["paper"]["rules_markdown"]
    (outdir / "summary.md").write_text(md)
    print("\n" + md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
