"""End to end through a real SLURM cluster with the shipped profile (slurm/config.yaml).

Needs root (the fixture installs and starts SLURM via .ci/slurm-up.sh). Run with
    .venv/bin/pytest -m slow tests/test_slurm.py
"""

from __future__ import annotations

import re
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

try:  # tests/ as a package or as a plain directory on sys.path
    from .slurm_cluster import REPO, SNAKEMAKE, run_id_from_log, run_snakemake, slurm_cluster  # noqa: F401
except ImportError:
    from slurm_cluster import REPO, SNAKEMAKE, run_id_from_log, run_snakemake, slurm_cluster  # noqa: F401

PROFILE = REPO / "slurm"

# Three rules: two `square` jobs and one `total` job go to SLURM; `all` is local.
# Each remote job records the SLURM job id it ran under (<array id>_<task> for an array task, as
# sacct lists it), which proves where it ran.
TINY_SNAKEFILE = textwrap.dedent('''
    import os


    def slurm_id():
        e = os.environ
        if "SLURM_ARRAY_JOB_ID" in e:
            return f"{e['SLURM_ARRAY_JOB_ID']}_{e['SLURM_ARRAY_TASK_ID']}"
        return e.get("SLURM_JOB_ID", "none")

    localrules: all

    rule all:
        input: "total.txt"

    rule square:
        output: "square/{n}.txt"
        resources: mem_mb=800, runtime=5, cpus_per_task=1  # the jobstep (Snakemake) alone holds ~300 MB
        run:
            n = int(wildcards.n)
            with open(output[0], "w") as f:
                f.write(f"{n * n} {slurm_id()}\\n")

    rule total:
        # no resources here: the profile's default-resources apply
        input: expand("square/{n}.txt", n=[2, 3])
        output: "total.txt"
        run:
            s = sum(int(open(p).read().split()[0]) for p in input)
            with open(output[0], "w") as f:
                f.write(f"{s} {slurm_id()}\\n")
''')


def test_profile_is_plain_sacct_slurm():
    """The shipped profile uses the slurm executor and the default (sacct) status path."""
    import yaml

    cfg = yaml.safe_load((PROFILE / "config.yaml").read_text())
    assert cfg["executor"] == "slurm"
    assert "slurm-status-command" not in cfg, "must use the plugin's default sacct status path"
    res = cfg["default-resources"]
    assert res["cpus_per_task"] <= 2 and res["mem_mb"] <= 4000 and res["runtime"] > 0


@pytest.mark.slow
def test_tiny_workflow_runs_through_slurm(slurm_cluster, tmp_path: Path):
    (tmp_path / "Snakefile").write_text(TINY_SNAKEFILE)
    # the suite's first SLURM run: the cluster may still be starting while the other worker builds checkpoints
    proc = run_snakemake(["--profile", str(PROFILE)], cwd=tmp_path, limit_s=300)
    log = proc.stdout + proc.stderr
    rc = proc.returncode
    assert rc == 0, f"snakemake failed (exit {rc}):\n{log[-6000:]}"

    # Outputs are right, and each was written inside a SLURM job.
    squares = {n: (tmp_path / f"square/{n}.txt").read_text().split() for n in (2, 3)}
    total = (tmp_path / "total.txt").read_text().split()
    assert squares[2][0] == "4" and squares[3][0] == "9" and total[0] == "13"
    job_ids = {squares[2][1], squares[3][1], total[1]}
    assert "none" not in job_ids and len(job_ids) == 3, job_ids

    # sacct (real accounting) lists exactly those jobs under this run's ID, all COMPLETED.
    run_id = run_id_from_log(log)
    jobs = slurm_cluster.jobs_of_run(run_id, expect=3)
    assert {j["JobID"] for j in jobs} == job_ids, jobs
    assert all(j["State"] == "COMPLETED" and j["ExitCode"] == "0:0" for j in jobs), jobs
    assert all(j["Partition"] == "debug" for j in jobs), jobs
    # the two `square` jobs (one request) went as one array (the profile arrays every rule); an
    # array's comment names its first job's wildcards
    assert squares[2][1].split("_")[0] == squares[3][1].split("_")[0] and "_" in squares[2][1], squares
    comments = sorted(j["Comment"] for j in jobs)
    assert comments[-1] == "rule_total" and set(comments[:2]) <= {"rule_square_wildcards_2", "rule_square_wildcards_3"}


# ---------------------------------------------------------------- the real pipeline

# The core suite's outputs: they need the fetch checkpoint and every paper1_heads/pk layer job
# (SLURM) plus the local aggregation rules. Named explicitly so that the job set, and the
# test's run time, stay fixed while the other suites (paper 1, PK suite) grow.
PIPELINE_TARGETS = [
    "results/tables/p1_table2_strong_tail.csv", "results/tables/pk_table5_writing.csv",
    "figures/p1_fig_closure_ccdf.png", "figures/pk_fig_rho_ccdf_layer.png",
]


def _tiny_pipeline_config(tmp_path: Path) -> Path:
    """One synthetic Llama-layout checkpoint (2 layers, GQA, one planted closed head):
    1 fetch + 2 paper1_heads + 2 pk_within_layer jobs go to SLURM; tables/figures are local."""
    from synth import write_llama  # tests/helpers is on sys.path (pyproject: pytest pythonpath)

    ckpt = tmp_path / "ckpt"
    write_llama(ckpt, n_layers=2, seed=7, closed=((1, 2, 1.5),))
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(textwrap.dedent(f"""\
        models:
          synth:
            source: local
            path: {ckpt}
        active_models: [synth]
    """))
    return cfg


def _bits(v):
    """A value with every float replaced by its IEEE-754 bit pattern (so NaN == NaN and
    -0.0 != 0.0): equality of _bits is bitwise equality of the numbers."""
    import struct

    if isinstance(v, float):
        return ("f64", struct.pack("<d", v))
    if isinstance(v, (list, tuple)):
        return tuple(_bits(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _bits(x)) for k, x in v.items()))
    return v


def _assert_shards_bitwise_equal(a_dir: Path, b_dir: Path, pattern: str = "*.parquet",
                                 may_be_empty: tuple[str, ...] = ()) -> int:
    """Every shard under results/shards matching ``pattern`` is bitwise equal in the two runs;
    a shard is empty only when its name is in ``may_be_empty`` (by design)."""
    import pyarrow.parquet as pq

    a = sorted(p.relative_to(a_dir) for p in (a_dir / "results/shards").rglob(pattern))
    b = sorted(p.relative_to(b_dir) for p in (b_dir / "results/shards").rglob(pattern))
    assert a and a == b, f"shard sets differ:\nslurm: {a}\nlocal: {b}"
    for rel in a:
        ta, tb = pq.read_table(a_dir / rel), pq.read_table(b_dir / rel)
        assert ta.num_rows > 0 or str(rel) in may_be_empty, f"{rel}: empty shard"
        assert ta.schema.remove_metadata() == tb.schema.remove_metadata(), f"{rel}: schemas differ"
        assert ta.num_rows == tb.num_rows, f"{rel}: row counts differ"
        for name in ta.column_names:
            va, vb = ta.column(name).to_pylist(), tb.column(name).to_pylist()
            if _bits(va) != _bits(vb):
                bad = next(i for i, (x, y) in enumerate(zip(va, vb)) if _bits(x) != _bits(y))
                raise AssertionError(f"{rel} column {name!r} row {bad}: slurm {va[bad]!r} != local {vb[bad]!r}")
    return len(a)


@pytest.mark.slow
def test_real_pipeline_through_slurm_matches_local(slurm_cluster, tmp_path: Path):
    """The shipped Snakefile + profile as typed on a planted 3-layer Llama-layout checkpoint with
    8 query / 4 KV heads: per-layer jobs, whose rules reach the executor at different times
    (paper1_capacity after paper1_heads), run as SLURM jobs (seen in sacct), and every shard
    number is bitwise equal to a local `-c2` run."""
    from synth import write_llama

    ckpt = tmp_path / "ckpt"
    write_llama(ckpt, n_layers=3, n_heads=8, n_kv=4, d_head=8, d_model=40, seed=11,
                closed=((0, 1, 1.5), (1, 6, 0.8), (2, 3, 2.0)))
    cfg = tmp_path / "three.yaml"
    cfg.write_text(f"models:\n  synth3:\n    source: local\n    path: {ckpt}\nactive_models: [synth3]\n")
    targets = [*PIPELINE_TARGETS, "results/tables/p1_capacity.csv"]
    snakefile = REPO / "Snakefile"
    slurm_dir, local_dir = tmp_path / "slurm", tmp_path / "local"
    slurm_dir.mkdir()
    local_dir.mkdir()

    # The local reference run goes alongside (the SLURM run mostly waits).
    local = subprocess.Popen(
        ["timeout", "-k", "15", "300", str(SNAKEMAKE), *targets, "-c2", "-s", str(snakefile),
         "--configfile", str(cfg)],
        cwd=local_dir, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        # (targets first: --configfile takes several values)
        proc = run_snakemake([*targets, "--profile", str(PROFILE), "-s", str(snakefile),
                              "--configfile", str(cfg)], cwd=slurm_dir, limit_s=420)
        local_out, _ = local.communicate(timeout=420)
    finally:
        if local.poll() is None:
            local.kill()
            local.wait()
    log = proc.stdout + proc.stderr
    rc, local_rc = proc.returncode, local.returncode
    assert rc == 0, f"SLURM run failed (exit {rc}):\n{log[-8000:]}"
    assert local_rc == 0, f"local -c2 run failed (exit {local_rc}):\n{local_out[-8000:]}"

    # Exactly the per-layer/fetch jobs went through SLURM (tables and figures are localrules),
    # and sacct (real accounting) knows every job Snakemake says it submitted: fetch alone as a
    # plain job, then the per-layer jobs as arrays of those that reach the executor together,
    # alone otherwise (which depends on timing: only "some arrays" is asserted).
    submitted = set(re.findall(r"has been submitted with SLURM jobid (\d+)", log))
    arrays = re.findall(r"SLURM job ID (\d+)\. The individual task IDs are (\d+)-(\d+)", log)
    submitted |= {f"{a}_{k}" for a, lo, hi in arrays for k in range(int(lo), int(hi) + 1)}
    assert len(arrays) >= 1 and len(submitted) == 10, (arrays, submitted)
    jobs = slurm_cluster.jobs_of_run(run_id_from_log(log), expect=len(submitted))
    assert {j["JobID"] for j in jobs} == submitted, (jobs, submitted)
    assert all(j["State"] == "COMPLETED" and j["ExitCode"] == "0:0" for j in jobs), jobs
    from headgeom.io.shards import read_shard

    def slurm_id(run):  # as sacct lists it: <array id>_<task> for an array task
        if "slurm_array_job_id" in run:
            return f"{run['slurm_array_job_id']}_{run['slurm_array_task_id']}"
        return run["slurm_job_id"]

    for fam in ("paper1_heads", "pk_within", "paper1_capacity"):  # every layer's job ran inside SLURM
        runs = [read_shard(slurm_dir / f"results/shards/{fam}/synth3/layer{i}.parquet")[1]["run"] for i in range(3)]
        ids = {slurm_id(r) for r in runs}
        assert len(ids) == 3 and ids <= submitted, (fam, runs, submitted)

    # Same shards, same numbers, bit for bit; and the final targets exist in both runs.
    # paper1_heads, paper1_pairs, paper1_capacity, pk_within, pk_self x 3 layers
    assert _assert_shards_bitwise_equal(slurm_dir, local_dir) == 15
    for rel in targets:
        assert (slurm_dir / rel).stat().st_size > 0 and (local_dir / rel).stat().st_size > 0, rel


def _profile_run_with(target: str, cfg: Path, work: Path, var: str, value: str) -> str:
    """The pipeline target through the shipped profile with a test-only fault variable set and the
    hooks that read it on PYTHONPATH (tests/helpers/faults.py; sbatch exports both to the jobs);
    the run must succeed. Returns Snakemake's output."""
    import os

    from faults import fault_env

    env = fault_env(**{var: value})
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        proc = run_snakemake([target, "--profile", str(PROFILE), "-s", str(REPO / "Snakefile"),
                              "--configfile", str(cfg)], cwd=work, limit_s=420)
    finally:
        for k, v in saved.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"SLURM run failed (exit {proc.returncode}):\n{log[-8000:]}"
    return log


@pytest.mark.slow
def test_retry_reaches_slurm_with_grown_resources(slurm_cluster, tmp_path: Path):
    """A pk_within_layer job that fails its first attempt (test-only trigger) is resubmitted by the
    shipped profile (retries) with twice the cost model's memory: sacct shows both submissions'
    ReqMem; the shard records attempt 2; the efficiency report reads back with `headgeom costs`."""
    import json

    from headgeom.io.shards import read_shard
    from headgeom.commands import efficiency
    from headgeom.schedule.families import JOBS
    from headgeom.core.config import load_config

    cfg = _tiny_pipeline_config(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    target = "results/shards/pk_within/synth/layer0.parquet"
    log = _profile_run_with(target, cfg, work, "HEADGEOM_TEST_FAIL_FIRST_ATTEMPT", "pk_within_layer")

    base = JOBS["pk_within_layer"].cost(work / "results/tensors/synth/manifest.json", load_config([cfg]))
    run_id = run_id_from_log(log)
    out = subprocess.run(["sacct", "-X", "-P", "--noheader", "--name", run_id, "--starttime", "now-1days",
                          "--format", "JobID,Comment,State,ReqMem,Timelimit"],
                         capture_output=True, text=True, timeout=60).stdout
    rows = [line.split("|") for line in out.splitlines() if "rule_pk_within_layer" in line]
    states = [r[2] for r in rows]
    reqmem = [int(re.match(r"(\d+)M", r[3]).group(1)) for r in rows]
    assert states == ["FAILED", "COMPLETED"], rows
    assert reqmem == [base["mem_mb"], 2 * base["mem_mb"]], rows
    run = read_shard(work / target)[1]["run"]
    assert run["attempt"] == 2 and run["slurm_job_id"] == rows[1][0], (run, rows)

    reports = sorted((work / "logs" / "slurm").glob("efficiency_report_*.csv"))
    assert reports, "the profile's efficiency report was not written"
    res = efficiency.compare(reports[-1], work, load_config([cfg]))
    assert res["pk_within_layer"]["retried"] >= 1, json.dumps(res, default=str)


# ---------------------------------------------------------------- job arrays

# Four `square` jobs in two resource groups: with the shipped profile (slurm-array-jobs: all)
# and headgeom's split by request, they go to SLURM as two arrays of two tasks, each array with
# its own --mem; `total` (one job) goes as a plain job.
ARRAY_SNAKEFILE = textwrap.dedent('''
    import os

    from headgeom.patches import slurm_arrays

    slurm_arrays.install()

    localrules: all

    rule all:
        input: "total.txt"

    rule square:
        output: "square/{n}.txt"
        resources: mem_mb=lambda wc: 800 if int(wc.n) <= 2 else 900, runtime=5, cpus_per_task=1
        run:
            n = int(wildcards.n)
            env = os.environ
            with open(output[0], "w") as f:
                f.write(f"{n * n} {env.get('SLURM_ARRAY_JOB_ID', 'none')} "
                        f"{env.get('SLURM_ARRAY_TASK_ID', 'none')}\\n")

    rule total:
        input: expand("square/{n}.txt", n=[1, 2, 3, 4])
        output: "total.txt"
        run:
            s = sum(int(open(p).read().split()[0]) for p in input)
            with open(output[0], "w") as f:
                f.write(f"{s}\\n")
''')


@pytest.mark.slow
def test_job_arrays_keep_each_request(slurm_cluster, tmp_path: Path):
    """sacct shows two arrays (tasks <id>_<k>) for the four `square` jobs, split by request:
    the 800 MB jobs in one array, the 900 MB jobs in another; every task ran inside its array."""
    (tmp_path / "Snakefile").write_text(ARRAY_SNAKEFILE)
    proc = run_snakemake(["--profile", str(PROFILE)], cwd=tmp_path, limit_s=180)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"snakemake failed (exit {proc.returncode}):\n{log[-6000:]}"
    assert (tmp_path / "total.txt").read_text().split()[0] == str(1 + 4 + 9 + 16)

    ran = {n: (tmp_path / f"square/{n}.txt").read_text().split() for n in (1, 2, 3, 4)}
    assert all(r[1] != "none" and r[2] != "none" for r in ran.values()), ran
    assert ran[1][1] == ran[2][1] != ran[3][1] == ran[4][1], ran  # two arrays, by request
    assert {ran[1][2], ran[2][2]} == {ran[3][2], ran[4][2]} == {"1", "2"}, ran

    out = subprocess.run(["sacct", "-X", "-P", "--noheader", "--name", run_id_from_log(log),
                          "--starttime", "now-1days", "--format", "JobID,State,ReqMem"],
                         capture_output=True, text=True, timeout=60).stdout
    rows = [line.split("|") for line in out.splitlines()]
    tasks = {r[0]: r for r in rows if "_" in r[0]}
    assert len(tasks) == 4 and all(r[1] == "COMPLETED" for r in tasks.values()), rows
    reqmem = {}
    for n, (_, array_id, task) in ran.items():
        reqmem[n] = int(re.match(r"(\d+)M", tasks[f"{array_id}_{task}"][2]).group(1))
    # the request reaches SLURM per array (the plugin adds a few MB for the task list payload)
    assert reqmem[1] == reqmem[2] and 800 <= reqmem[1] < 840, reqmem
    assert reqmem[3] == reqmem[4] and 900 <= reqmem[3] < 940, reqmem


# 17 jobs of one rule, ready together, under the profile's `jobs: 8`: the scheduler selects 8 and
# keeps 9 ready, then hands them over one or two at a time as slots free up, i.e. a rule's jobs
# reach the executor at different times. snakemake-executor-plugin-slurm 2.8.0's own collection
# holds every such partial batch back and the run waits forever (plugin issue #473).
STAGGERED_SNAKEFILE = textwrap.dedent('''
    import os

    from headgeom.patches import slurm_arrays

    slurm_arrays.install()

    localrules: all

    rule all:
        input: expand("square/{n}.txt", n=range(17))

    rule square:
        output: "square/{n}.txt"
        resources: mem_mb=700, runtime=5, cpus_per_task=1
        run:
            import time

            time.sleep(int(wildcards.n) % 2)  # uneven lengths: slots free up one at a time
            e = os.environ
            where = (f"{e['SLURM_ARRAY_JOB_ID']}_{e['SLURM_ARRAY_TASK_ID']}" if "SLURM_ARRAY_JOB_ID" in e
                     else e.get("SLURM_JOB_ID", "none"))
            with open(output[0], "w") as f:
                f.write(f"{int(wildcards.n) ** 2} {where}\\n")
''')


@pytest.mark.slow
def test_jobs_of_a_rule_that_reach_the_executor_at_different_times_all_run(slurm_cluster, tmp_path: Path):
    """More ready jobs of one rule than the profile's `jobs` limit: every one is submitted (as
    arrays of what arrives together, or alone) and the run ends; under the plugin's own array
    collection it hangs, and the timeout turns the hang into a failure."""
    (tmp_path / "Snakefile").write_text(STAGGERED_SNAKEFILE)
    proc = run_snakemake(["--profile", str(PROFILE)], cwd=tmp_path, limit_s=240)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"snakemake failed (exit {proc.returncode}):\n{log[-6000:]}"
    ran = {n: (tmp_path / f"square/{n}.txt").read_text().split() for n in range(17)}
    assert all(int(r[0]) == n * n and r[1] != "none" for n, r in ran.items()), ran
    assert "Array job collection incomplete" not in log
    jobs = slurm_cluster.jobs_of_run(run_id_from_log(log), expect=17)
    assert len(jobs) == 17 and all(j["State"] == "COMPLETED" for j in jobs), jobs
    assert sorted(r[1] for r in ran.values()) == sorted(j["JobID"] for j in jobs), (ran, jobs)
    assert any("_" in r[1] for r in ran.values())  # what arrived together still went as an array


@pytest.mark.slow
def test_watchdog_turns_held_jobs_into_an_error_on_the_console(slurm_cluster, tmp_path: Path):
    """The same workflow with the plugin's own (holding) collection put back under headgeom's
    watchdog: instead of waiting forever, Snakemake stops at once with the watchdog's message."""
    held = STAGGERED_SNAKEFILE.replace(
        "slurm_arrays.install()",
        "import snakemake_executor_plugin_slurm as plugin\n"
        "plugins_own = plugin.Executor.run_jobs\n"
        "slurm_arrays.install()\n"
        "plugin.Executor.run_jobs = slurm_arrays.watch_submissions(plugins_own)")
    (tmp_path / "Snakefile").write_text(held)
    t0 = time.monotonic()
    proc = run_snakemake(["--profile", str(PROFILE)], cwd=tmp_path, limit_s=180)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, log[-4000:]
    assert "8 job(s) of rule(s) square" in log and "would wait forever" in log, log[-4000:]
    assert time.monotonic() - t0 < 120


@pytest.mark.slow
def test_out_of_memory_kill_is_retried_with_grown_memory(slurm_cluster, tmp_path: Path):
    """SLURM enforces memory on the test cluster (OverMemoryKill, .ci/slurm/slurm.conf.in). A
    pk_within_layer job that needs more than its cost model's request (a test-only ballast on every
    attempt) is killed OUT_OF_MEMORY, resubmitted by the shipped profile with twice the request,
    and completes; the shard records attempt 2."""

    from headgeom.io.shards import read_shard
    from headgeom.schedule.families import JOBS
    from headgeom.core.config import load_config

    cfg = _tiny_pipeline_config(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    target = "results/shards/pk_within/synth/layer0.parquet"
    # fetch first (its own request), so that the cost model can be read for the ballast size
    proc = run_snakemake(["results/tensors/synth/manifest.json", "-c1", "-s", str(REPO / "Snakefile"),
                          "--configfile", str(cfg)], cwd=work, limit_s=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    base = JOBS["pk_within_layer"].cost(work / "results/tensors/synth/manifest.json", load_config([cfg]))["mem_mb"]
    # with the job step's own ~300 MB (Snakemake + Python): above the first request, below the second
    log = _profile_run_with(target, cfg, work, "HEADGEOM_TEST_MEMORY_MB", f"pk_within_layer={int(base * 0.7)}")
    out = subprocess.run(["sacct", "-X", "-P", "--noheader", "--name", run_id_from_log(log),
                          "--starttime", "now-1days", "--format", "JobID,Comment,State,ReqMem,MaxRSS"],
                         capture_output=True, text=True, timeout=60).stdout
    rows = [line.split("|") for line in out.splitlines() if "rule_pk_within_layer" in line]
    # SLURM kills the job step; the allocation then ends FAILED (22.05) or OUT_OF_MEMORY
    assert [r[2] for r in rows] in (["FAILED", "COMPLETED"], ["OUT_OF_MEMORY", "COMPLETED"]), rows
    assert [int(re.match(r"(\d+)M", r[3]).group(1)) for r in rows] == [base, 2 * base], rows
    first_log = next((work / "logs/slurm/rule_pk_within_layer").rglob(f"{rows[0][0]}.log")).read_text()
    assert "exceeded memory limit" in first_log, first_log[-3000:]  # killed for memory, not otherwise
    assert read_shard(work / target)[1]["run"]["attempt"] == 2


@pytest.mark.slow
def test_cache_hit_under_slurm_computes_nothing(slurm_cluster, tmp_path: Path):
    """The between-workflow cache through the shipped profile (a bare `--cache`): a first work
    directory computes fetch and one pk_within_layer shard on SLURM, and the jobs store them in
    $SNAKEMAKE_OUTPUT_CACHE; in a second work directory with the same model and settings the SLURM
    jobs find them there and compute nothing (Snakemake reads the cache inside the job, so the jobs
    are still submitted): the files are links to the first run's, with its provenance."""
    import os

    from headgeom.io.shards import read_shard

    cfg = _tiny_pipeline_config(tmp_path)
    target = "results/shards/pk_within/synth/layer0.parquet"
    (tmp_path / "cache").mkdir()
    os.environ["SNAKEMAKE_OUTPUT_CACHE"] = str(tmp_path / "cache")
    logs = {}
    try:
        for name in ("w1", "w2"):
            (tmp_path / name).mkdir()
            proc = run_snakemake([target, "--profile", str(PROFILE), "-s", str(REPO / "Snakefile"),
                                  "--configfile", str(cfg), "--cache"], cwd=tmp_path / name, limit_s=420)
            logs[name] = proc.stdout + proc.stderr
            assert proc.returncode == 0, f"{name} failed (exit {proc.returncode}):\n{logs[name][-6000:]}"
    finally:
        del os.environ["SNAKEMAKE_OUTPUT_CACHE"]
    submitted = re.findall(r"has been submitted with SLURM jobid (\d+)", logs["w1"])
    assert len(submitted) == 2, logs["w1"][-4000:]  # fetch and pk_within_layer, both through SLURM
    cached = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert len(cached) == 4, cached  # fetch's two files, pk_within_layer's two shards
    for name in ("w1", "w2"):  # both work directories link to the cache entries
        for rel in (target, "results/tensors/synth/manifest.json"):
            link = tmp_path / name / rel
            assert link.is_symlink() and link.resolve().parent == (tmp_path / "cache").resolve(), (name, rel)
    # in w2 no job script ran: its job logs are empty (w1's are not)
    assert (tmp_path / "w1/logs/pk_within/synth/layer0.log").stat().st_size > 0
    assert all(p.stat().st_size == 0 for p in (tmp_path / "w2/logs").rglob("*.log") if "slurm" not in p.parts)
    a, b = (read_shard(tmp_path / w / target) for w in ("w1", "w2"))
    assert a[1] == b[1] and b[1]["run"]["slurm_job_id"] in submitted  # w1's SLURM job computed it


@pytest.mark.slow
def test_activation_stage_runs_through_slurm_unchanged(slurm_cluster, tmp_path: Path):
    """The activation stage through the shipped profile: on a copy of a finished local run with its
    activation outputs removed, the forward pass and the per-layer activation jobs (and nothing
    of the weight-space stages) go to SLURM, and every activation shard equals the local run's bit
    for bit. Synthetic 2-layer Llama that transformers runs, a local corpus (tests/helpers/synth_hf.py)."""
    import shutil

    import yaml
    from synth_hf import TEXT, write_synthetic_llama
    from tinyrun import CFG, merge, snakemake

    local_dir = tmp_path / "local"
    (local_dir / "ckpt").mkdir(parents=True)
    write_synthetic_llama(local_dir / "ckpt")
    (local_dir / "text.txt").write_text(TEXT)
    (local_dir / "cfg.yaml").write_text(yaml.safe_dump(merge(CFG, {
        "models": {"synth": {"source": "local", "path": "ckpt"}}, "active_models": ["synth"],
        "texts": {"toy": {"source": "local", "path": "text.txt"}},
        "activation": {"enabled": True, "models": ["synth"],
                       "paper1": {"corpus": "toy", "n_windows": 2, "window": 24},
                       "read_paths": {"corpus": "toy", "n_windows": 3, "window": 24}},
    })))
    targets = ["results/tables/p1_activations_natural_return.csv", "results/tables/pk_sec5_4_read_paths.csv"]
    snakemake(SNAKEMAKE, REPO, local_dir, *targets, timeout=900)

    # the SLURM run starts from the same finished run without its activation outputs
    slurm_dir = tmp_path / "slurm"
    shutil.copytree(local_dir, slurm_dir, symlinks=True)  # mtimes and .snakemake metadata kept
    for p in ("results/activations", "results/shards/activation_natural_return",
              "results/shards/activation_read_paths"):
        shutil.rmtree(slurm_dir / p)
    for p in targets:
        (slurm_dir / p).unlink()
    proc = run_snakemake([*targets, "--profile", str(PROFILE), "-s", str(REPO / "Snakefile"),
                          "--configfile", str(slurm_dir / "cfg.yaml")], cwd=slurm_dir, limit_s=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"SLURM run failed (exit {proc.returncode}):\n{log[-8000:]}"

    # sacct: exactly the forward pass and the 2 + 2 per-layer activation jobs ran on SLURM
    # (the profile arrays each rule's request; the tables are localrules)
    submitted = set(re.findall(r"has been submitted with SLURM jobid (\d+)", log))
    arrays = re.findall(r"SLURM job ID (\d+)\. The individual task IDs are (\d+)-(\d+)", log)
    submitted |= {f"{a}_{k}" for a, lo, hi in arrays for k in range(int(lo), int(hi) + 1)}
    jobs = slurm_cluster.jobs_of_run(run_id_from_log(log), expect=len(submitted))
    assert {j["JobID"] for j in jobs} == submitted, (jobs, submitted)
    assert all(j["State"] == "COMPLETED" and j["ExitCode"] == "0:0" for j in jobs), jobs
    rules = sorted(re.sub(r"_wildcards.*", "", j["Comment"]) for j in jobs)
    # two forward passes (one per section's window shape), then an array per activation rule
    assert rules.count("rule_activation_forward") == 2, rules
    assert set(rules) == {"rule_activation_forward", "rule_activation_natural_return",
                          "rule_activation_read_paths"}, rules
    assert len(submitted) == 6, (arrays, submitted)

    # the last layer's read-path shard is empty by design: no later layer reads it
    n = _assert_shards_bitwise_equal(slurm_dir, local_dir, "activation_*/**/*.parquet",
                                     may_be_empty=("results/shards/activation_read_paths/synth/layer1.parquet",))
    assert n == 4, n


@pytest.mark.slow
def test_failing_job_under_slurm_prints_its_error_at_the_end(slurm_cluster, tmp_path: Path):
    """A fetch that fails on every attempt on a SLURM node (the checkpoint's headers are sound,
    so the pre-flight check passes, but its config claims a third layer) ends the run with the
    job's own one-line error, read from the log file the node wrote."""
    import json

    cfg = _tiny_pipeline_config(tmp_path)
    c = json.loads((tmp_path / "ckpt/config.json").read_text())
    c["num_hidden_layers"] = 3
    (tmp_path / "ckpt/config.json").write_text(json.dumps(c))
    work = tmp_path / "work"
    work.mkdir()
    proc = run_snakemake(["results/tables/p1_table2_strong_tail.csv", "--profile", str(PROFILE), "-s", str(REPO / "Snakefile"),
                          "--configfile", str(cfg)], cwd=work, limit_s=420)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-6000:]
    want = ("fetch (model=synth): synth: checkpoint lacks tensors the adapter needs: layer 2: "
            "model.layers.2.self_attn.q_proj.weight  [log: logs/fetch/synth.log]")
    tail = out[out.index("headgeom: failed jobs"):]
    assert [ln.strip() for ln in tail.splitlines()[1:] if ln.startswith("  ")] == [want], out[-6000:]
