"""Per-job overhead of a `make run` job: scheduling + interpreter + script startup, without the work.

    .venv/bin/python bench/job_overhead.py [--jobs 20] [--out results/bench/job_overhead.json]

Runs Snakemake (-c1, the project's interpreter) on throw-away workflows of N independent jobs
that do no work, each variant adding one layer of what a real per-layer job pays before its
first FLOP:

* ``empty``: a ``script:`` job whose script is empty (Snakemake's scheduling, its script
  preamble, which unpickles the job's ``snakemake`` object and so imports Snakemake, and the
  interpreter);
* ``job_imports``: the same with the imports a per-layer job makes in a process of its own (as under
  SLURM: headgeom's registry, numpy, pyarrow, the methods), and the provenance it computes once
  (``code_version``: source hash + git);
* ``served``: what a local run's per-layer job is: its command (headgeom.rules.jobclient, ``shell:``)
  handing the same imports' job to the job server (headgeom.rules.jobserver, started by the workflow's
  ``onstart``), which has them imported and forks the job; the server's own start and imports are in
  the per-job figure, spread over the N jobs;

and times, as single processes, the interpreter alone and each import set. Reports wall time
and CPU time (user + sys of Snakemake and all its children) per job: CPU time is what the load
of a shared machine inflates least, so `make run`'s overhead on an idle machine is about
jobs x CPU per job / cores. Without work in the jobs, the difference to a real run's job time
is the work.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
SNAKEMAKE = str(Path(PY).parent / "snakemake")

JOB_IMPORTS = ("from headgeom.core.provenance import set_run, code_version; from headgeom.schedule.families import run_job; "
               "from headgeom.core.logs import to_log; import headgeom.jobs.paper1, headgeom.jobs.pk_paper, "
               "headgeom.methods.paper1, headgeom.methods.overlap, headgeom.io.shards; code_version()")

SHARD_IO = ("import os, tempfile, numpy as np; from headgeom.io.shards import write_shard, read_shards; "
            "p = os.path.join(tempfile.mkdtemp(), 's.parquet'); "
            "write_shard(p, {'x': np.arange(3.0), 'k': np.array(['O', 'Q', 'K'], dtype=object)}, {}); read_shards([p]); "
            "os.remove(p)")


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd, **kw) -> tuple[float, float]:
    """(wall s, CPU s of the command and its children)."""
    c0, t0 = _cpu_children(), time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, **kw)
    return time.perf_counter() - t0, _cpu_children() - c0


def workflow(work: Path, n: int, body: str) -> None:
    (work / "scripts").mkdir(parents=True)
    (work / "scripts" / "job.py").write_text(body + "\nopen(snakemake.output[0], 'w').close()\n")
    (work / "Snakefile").write_text(textwrap.dedent(f"""
        rule all:
            input: expand("out/{{i}}.txt", i=range({n}))

        rule job:
            output: "out/{{i}}.txt"
            threads: 1
            script: "scripts/job.py"
        """))


def served_workflow(work: Path, n: int) -> None:
    """N jobs whose command hands a job doing JOB_IMPORTS' work to the workflow's job server."""
    (work / "overhead_entry.py").write_text(textwrap.dedent(f"""
        from headgeom.rules.scripts import entry

        @entry
        def overhead_touch(job):
            {JOB_IMPORTS.replace("; ", chr(10) + "            ")}
            open(job.output[0], "w").close()
        """))
    (work / "Snakefile").write_text(textwrap.dedent(f"""
        import json, shlex, sys
        from headgeom.rules import jobclient, jobserver

        onstart:
            jobserver.start(workflow)

        onsuccess:
            jobserver.stop()

        rule all:
            input: expand("out/{{i}}.txt", i=range({n}))

        rule job:
            output: "out/{{i}}.txt"
            log: "logs/{{i}}.log"
            threads: 1
            params:
                spec=lambda wildcards, output: json.dumps({{"input": jobclient.named({{}}),
                    "output": jobclient.named(dict(output.items()) or {{"o": output[0]}}),
                    "wildcards": jobclient.named(dict(wildcards.items())), "params": jobclient.named({{}})}})
            shell:
                shlex.quote(sys.executable) + " -m headgeom.rules.jobclient"
                + " overhead_touch {{params.spec:q}} {{log:q}} 1 0 5 {{threads}} job"
        """))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=20)
    p.add_argument("--repeat", type=int, default=3, help="single-process timings: best of this many")
    p.add_argument("--out", default=str(ROOT / "results" / "bench" / "job_overhead.json"))
    a = p.parse_args(argv)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    res = {"jobs": a.jobs, "loadavg_1m_start": os.getloadavg()[0], "single_process": {}, "snakemake": {}}
    singles = {
        "interpreter": "pass",
        "snakemake_preamble": "import pickle, snakemake.iocontainers",
        "numpy": "import numpy",
        "job_imports": JOB_IMPORTS,
        # what every job does last and every table first: a shard written and read back
        # (headgeom.io.shards builds / reads the columns from buffers: no pandas import)
        "shard_write_read": SHARD_IO,
        "pandas": "import pandas",
    }
    for name, code in singles.items():
        runs = [timed([PY, "-c", code], env=env, cwd=ROOT) for _ in range(a.repeat)]
        res["single_process"][name] = {"wall_s": min(w for w, _ in runs), "cpu_s": min(c for _, c in runs)}
    for name, body in (("empty", ""), ("job_imports", JOB_IMPORTS), ("served", None)):
        work = Path(tempfile.mkdtemp(prefix="headgeom-overhead-"))
        try:
            if body is None:
                served_workflow(work, a.jobs)
            else:
                workflow(work, a.jobs, body)
            wenv = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(work), env.get("PYTHONPATH")])),
                    "HEADGEOM_PLUGINS": "overhead_entry"}  # the served jobs' entry, a plugin's
            wall, cpu = timed([SNAKEMAKE, "-c1", "-s", str(work / "Snakefile"), "-d", str(work)], env=wenv)
            # the same workflow with nothing to do: Snakemake's own startup, DAG and exit
            wall0, cpu0 = timed([SNAKEMAKE, "-c1", "-s", str(work / "Snakefile"), "-d", str(work)], env=wenv)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        res["snakemake"][name] = {"wall_s": wall, "cpu_s": cpu, "noop_wall_s": wall0, "noop_cpu_s": cpu0,
                                  "per_job_wall_s": (wall - wall0) / a.jobs, "per_job_cpu_s": (cpu - cpu0) / a.jobs}
    res["loadavg_1m_end"] = os.getloadavg()[0]
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"load {res['loadavg_1m_start']:.1f} -> {res['loadavg_1m_end']:.1f}")
    for k, v in res["single_process"].items():
        print(f"process {k:20s} wall {v['wall_s']:.3f} s  cpu {v['cpu_s']:.3f} s")
    for k, v in res["snakemake"].items():
        print(f"snakemake -c1, {a.jobs} {k} jobs: per job wall {v['per_job_wall_s']:.3f} s, cpu {v['per_job_cpu_s']:.3f} s "
              f"(startup with nothing to do: wall {v['noop_wall_s']:.1f} s, cpu {v['noop_cpu_s']:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
