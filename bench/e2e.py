"""`make run` of a given commit and of the working tree, back to back, each in a fresh results directory.

    .venv/bin/python bench/e2e.py                      # f2296a6, then the working tree
    .venv/bin/python bench/e2e.py --base 450a73d --rounds 2 --paper

The commit's tree is exported with `git archive` into a temporary directory (the repository's
worktrees and refs are left alone), the working tree is copied there as it is at the start (its
tracked and untracked files, ignored ones aside: edits made during the runs do not reach them), and
each is run from this venv with its own source first on PYTHONPATH (the venv's editable install of the working tree
comes after it). Each run is what `make run` does: `python -m compileall -q headgeom` in that tree,
then `snakemake -c CORES -s TREE/Snakefile -d FRESH_DIR` (with --paper, then `--configfile
config/paper.yaml` on its outputs). For each run: wall time, the CPU time (user + sys) of the whole
Snakemake process tree (os.wait4's rusage: every job process is reaped by Snakemake, so its CPU is
counted), the step count and the load average before and after; then the ratios working tree / base.
--rounds N alternates base and working tree N times (A B A B ...); --parallel runs a round's trees at
the same time instead (on a shared, loaded machine each then sees the same load; compare CPU time). --keep keeps the result directories
(e.g. for `bench/compare_runs.py BASE_DIR TREE_DIR`). --base may be given more than once (e.g. the
reference commit and today's main): each is run, in that order, before the working tree in every round.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLAS_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def timed(cmd: list[str], env: dict, log: Path) -> dict:
    """Run ``cmd`` to completion; wall time and the CPU time of its whole process tree."""
    before = loadavg()
    t0 = time.perf_counter()
    with log.open("w") as fh:
        p = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
        _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    text = log.read_text(errors="replace")
    steps = re.findall(r"(\d+) of (\d+) steps \(100%\) done", text)
    return {"command": " ".join(cmd), "returncode": p.returncode, "wall_s": round(wall, 2),
            "cpu_s": round(ru.ru_utime + ru.ru_stime, 2), "user_s": round(ru.ru_utime, 2),
            "sys_s": round(ru.ru_stime, 2), "steps": int(steps[-1][1]) if steps else None,
            "load_before": before, "load_after": loadavg(), "log": str(log)}


def run_tree(tree: Path, work: Path, cores: int, paper: bool) -> dict:
    """What `make run` does for ``tree``, in the fresh directory ``work``."""
    env = {k: v for k, v in os.environ.items() if k not in BLAS_VARS}
    env["PYTHONPATH"] = str(tree) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    py = sys.executable
    subprocess.run([py, "-m", "compileall", "-q", "headgeom"], cwd=tree, env=env, check=True)
    work.mkdir(parents=True)
    snake = [str(Path(py).parent / "snakemake"), f"-c{cores}", "-s", str(tree / "Snakefile"), "-d", str(work)]
    res = {"tree": str(tree), "workdir": str(work), "run": timed(snake, env, work / "e2e-run.log")}
    if paper and res["run"]["returncode"] == 0:
        res["paper"] = timed(snake + ["--configfile", str(tree / "config" / "paper.yaml")], env,
                             work / "e2e-paper.log")
    return res


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()


def line(label: str, r: dict) -> str:
    return (f"{label:<14} wall {r['wall_s']:8.1f} s  CPU {r['cpu_s']:8.1f} s (user {r['user_s']:.1f}, sys "
            f"{r['sys_s']:.1f})  steps {r['steps']}  rc {r['returncode']}  load {r['load_before']} -> {r['load_after']}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", action="append", help="a commit to compare against (default f2296a6; repeatable)")
    p.add_argument("--cores", type=int, default=2, help="snakemake -c (default 2, as make run)")
    p.add_argument("--rounds", type=int, default=1, help="base/working-tree pairs, alternated (default 1)")
    p.add_argument("--paper", action="store_true", help="then --configfile config/paper.yaml on each run's outputs")
    p.add_argument("--parallel", action="store_true",
                   help="run the trees of a round at the same time (on a loaded machine: the same load for each)")
    p.add_argument("--keep", action="store_true", help="keep the result directories")
    p.add_argument("--out", default=None, help="write the numbers as JSON here")
    args = p.parse_args(argv)

    bases = args.base or ["f2296a6"]
    scratch = Path(tempfile.mkdtemp(prefix="headgeom-e2e-"))
    trees: list[tuple[str, str, Path]] = []  # (name, label, source tree)
    for i, commit in enumerate(bases):
        sha = git("rev-parse", "--short", commit)
        src = scratch / f"src-{sha}"
        src.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-f", "-", "-C", str(src)], input=archive, check=True)
        trees.append((f"base{i}" if len(bases) > 1 else "base", sha, src))
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    snap = scratch / "src-tree"  # the working tree as it is now (tracked and untracked, ignored aside):
    snap.mkdir()  # edits made while the runs go on do not reach them
    listing = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "-co", "--exclude-standard"],
                             capture_output=True, check=True).stdout
    names = b"\0".join(n for n in listing.split(b"\0") if n and (ROOT / n.decode()).is_file())
    tar = subprocess.run(["tar", "-c", "-f", "-", "--null", "-T", "-"], input=names, capture_output=True,
                         check=True, cwd=ROOT).stdout
    subprocess.run(["tar", "-x", "-f", "-", "-C", str(snap)], input=tar, check=True)
    trees.append(("tree", git("rev-parse", "--short", "HEAD") + ("+dirty" if dirty else ""), snap))
    print(f"e2e: {' vs '.join(label for _, label, _ in trees)} (working tree last), -c{args.cores}, "
          f"{os.cpu_count()} CPUs, scratch {scratch}", flush=True)
    runs: dict[str, list[dict]] = {name: [] for name, _, _ in trees}
    labels = {name: label for name, label, _ in trees}

    def report(name: str, r: dict) -> None:
        print(line(f"{name} {labels[name]}", r["run"]), flush=True)
        if "paper" in r:
            print(line("  + paper.yaml", r["paper"]), flush=True)
    try:
        for i in range(args.rounds):
            if args.parallel:  # every tree of the round at once: each sees the same load
                with ThreadPoolExecutor(len(trees)) as pool:
                    done = list(pool.map(lambda t: run_tree(t[2], scratch / f"{t[0]}-{i}", args.cores, args.paper),
                                         trees))
            else:
                done = []
                for name, _, tree in trees:
                    done.append(run_tree(tree, scratch / f"{name}-{i}", args.cores, args.paper))
                    report(name, done[-1])
            for (name, _, _), r in zip(trees, done):
                runs[name].append(r)
                if args.parallel:
                    report(name, r)
    finally:
        for _, _, src in trees:
            shutil.rmtree(src, ignore_errors=True)
        if not args.keep:
            for rs in runs.values():
                for r in rs:
                    if all(x.get("returncode") == 0 for x in (r["run"], r.get("paper", {"returncode": 0}))):
                        shutil.rmtree(r["workdir"], ignore_errors=True)

    def total(name: str, stage: str, key: str) -> float:
        return sum(r[stage][key] for r in runs[name] if stage in r)

    summary = {"labels": labels, "cores": args.cores, "rounds": args.rounds,
               "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(), "runs": runs}
    print(f"uptime: {summary['uptime']}")
    for stage in ("run", "paper"):
        if not all(stage in r for rs in runs.values() for r in rs):
            continue
        for key in ("wall_s", "cpu_s"):
            t = total("tree", stage, key)
            for name, _, _ in trees[:-1]:
                b = total(name, stage, key)
                summary[f"{stage}_{key}_ratio_{name}"] = t / b
                print(f"{stage:<5} {key[:-2]:<4}: {name} {labels[name]} {b / args.rounds:8.1f} s, working tree "
                      f"{t / args.rounds:8.1f} s (mean of {args.rounds}), ratio tree/{name} {t / b:.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    bad = [r for rs in runs.values() for r in rs for s in ("run", "paper") if s in r and r[s]["returncode"] != 0]
    for r in bad:
        print(f"e2e: a run failed; its directory is kept: {r['workdir']}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
