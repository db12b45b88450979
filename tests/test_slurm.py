"""End to end through a real SLURM cluster with the shipped profile (slurm/config.yaml).

Needs root (the fixture installs and starts SLURM via .ci/slurm-up.sh). Run with
    .venv/bin/pytest -m slow tests/test_slurm.py
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

try:  # tests/ as a package or as a plain directory on sys.path
    from .slurm_cluster import REPO, run_id_from_log, run_snakemake, slurm_cluster  # noqa: F401
except ImportError:
    from slurm_cluster import REPO, run_id_from_log, run_snakemake, slurm_cluster  # noqa: F401

PROFILE = REPO / "slurm"

# Three rules: two `square` jobs and one `total` job go to SLURM; `all` is local.
# Each remote job records the SLURM job id it ran under, which proves where it ran.
TINY_SNAKEFILE = textwrap.dedent('''
    import os

    localrules: all

    rule all:
        input: "total.txt"

    rule square:
        output: "square/{n}.txt"
        resources: mem_mb=200, runtime=5, cpus_per_task=1
        run:
            n = int(wildcards.n)
            with open(output[0], "w") as f:
                f.write(f"{n * n} {os.environ.get('SLURM_JOB_ID', 'none')}\\n")

    rule total:
        # no resources here: the profile's default-resources apply
        input: expand("square/{n}.txt", n=[2, 3])
        output: "total.txt"
        run:
            s = sum(int(open(p).read().split()[0]) for p in input)
            with open(output[0], "w") as f:
                f.write(f"{s} {os.environ.get('SLURM_JOB_ID', 'none')}\\n")
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
    proc = run_snakemake(["--profile", str(PROFILE)], cwd=tmp_path, limit_s=150)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"snakemake failed (exit {proc.returncode}):\n{log[-6000:]}"

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
    comments = sorted(j["Comment"] for j in jobs)
    assert comments == ["rule_square_wildcards_2", "rule_square_wildcards_3", "rule_total"], comments
