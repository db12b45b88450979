"""A run's jobs forked by the job server (a local run's default) write the numbers that jobs in their own
processes write (HEADGEOM_NO_JOB_SERVER=1, as under a cluster): every per-layer job of the tiny run and
its tables rerun without the server, then every shard and table compared with the server's, bit for bit,
and each shard's recorded params."""

from __future__ import annotations

import subprocess
from pathlib import Path

from headgeom.io.shards import read_shard
from headgeom.rules.jobclient import OFF
from headgeom.schedule.families import JOBS
from headgeom.verify.diff import compare_shard
from tinyrun import copy_run, snakemake, tiny_run


def test_jobs_without_the_server_write_the_servers_numbers(tmp_path_factory, tmp_path, snakemake_bin, root, monkeypatch):
    served = tiny_run(tmp_path_factory, snakemake_bin, root)
    alone = copy_run(served, tmp_path / "alone")
    monkeypatch.setenv(OFF, "1")
    r = snakemake(snakemake_bin, root, alone, "all", "--forcerun", *JOBS)
    assert "job server" not in r.stderr
    shards = sorted(p.relative_to(served) for p in (served / "results" / "shards").rglob("*.parquet"))
    assert len(shards) >= 14  # every family of the tiny run's 2 layers
    diffs, compared = [], 0
    for rel in shards:
        assert (alone / rel).stat().st_mtime > (served / rel).stat().st_mtime  # really rebuilt
        compared += compare_shard(served / rel, alone / rel, str(rel), diffs)
        params = [read_shard(p)[1]["params"] for p in (served / rel, alone / rel)]
        assert params[0] == params[1], rel
    assert not diffs and compared > 1000
    tables = sorted(p.relative_to(served) for p in (served / "results" / "tables").glob("*.csv"))
    assert tables and all((served / t).read_bytes() == (alone / t).read_bytes() for t in tables)
    # and the params both recorded are the config's, as `headgeom verify` derives them for each shard
    v = subprocess.run([str(Path(snakemake_bin).parent / "headgeom"), "verify", "-d", str(alone), "--configfile",
                        str(alone / "cfg.yaml")], capture_output=True, text=True, timeout=600)
    assert v.returncode == 0, v.stdout[-3000:] + v.stderr[-3000:]


def test_the_run_starts_the_server_and_its_jobs_use_it(tmp_path_factory, snakemake_bin, root):
    served = tiny_run(tmp_path_factory, snakemake_bin, root)
    logs = list((served / "logs").rglob("*.log"))
    startups = [float(line.split("startup_s=")[1].split()[0]) for p in logs for line in Path(p).read_text().splitlines()
                if line.startswith("headgeom timing: ")]
    # a forked job starts in milliseconds (tens of them on a loaded machine); a process of its own only after
    # its imports, 0.2 s and more
    assert len(startups) > 20 and sorted(startups)[len(startups) // 2] < 0.15
