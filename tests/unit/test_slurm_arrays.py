"""Job arrays keep each task's own request (headgeom/jobs/slurm_arrays.py).

The end-to-end check (sacct shows array tasks with per-group ReqMem) is in
tests/workflow/test_slurm.py; here: the grouping, and that the wrapper reaches the plugin.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from headgeom.core.errors import HeadgeomError
from headgeom.jobs import slurm_arrays


def _job(name, threads=1, **res):
    base = {"_cores": 1, "_nodes": 1, "tmpdir": "/tmp", "mem_mb": 1000, "mem_mib": 954,
            "runtime": 30}
    base.update(res)
    if "mem_mb" in res:  # Snakemake derives mem_mib from mem_mb: it must not split groups on its own
        base["mem_mib"] = int(res["mem_mb"] / 1.048576)
    return SimpleNamespace(name=name, threads=threads, resources=base)


def test_jobs_are_grouped_by_everything_that_reaches_sbatch():
    jobs = [
        _job("a"), _job("b"), _job("c", mem_mb=2000), _job("d"), _job("e", runtime=60),
        _job("f", threads=2), _job("g", mem_mb=2000), _job("h", slurm_partition="gpu"),
        _job("i", gres="gpu:1"), _job("j", tmpdir="/scratch"),
    ]
    groups = [[j.name for j in g] for g in slurm_arrays.split_by_request(jobs)]
    # j differs only in tmpdir (never sent to sbatch): it joins a, b, d
    assert groups == [["a", "b", "d", "j"], ["c", "g"], ["e"], ["f"], ["h"], ["i"]]


def test_a_grown_retry_is_never_arrayed_with_first_attempts():
    first = [_job(f"layer{i}", mem_mb=1200, runtime=10) for i in range(3)]
    retry = _job("layer3", mem_mb=2400, runtime=20)  # attempt 2: twice the cost model
    groups = slurm_arrays.split_by_request([first[0], retry, *first[1:]])
    assert [[j.name for j in g] for g in groups] == [["layer0", "layer1", "layer2"], ["layer3"]]


class _FakeExecutor:
    """Records what the plugin's own methods would submit."""

    def __init__(self):
        self.arrays, self.singles = [], []

    def _submit_array_jobs(self, jobs):
        self.arrays.append([j.name for j in jobs])

    def _submit_job(self, job):
        self.singles.append(job.name)


def test_install_wraps_the_plugin_executor(monkeypatch):
    import snakemake_executor_plugin_slurm as plugin

    monkeypatch.setattr(plugin, "Executor", _FakeExecutor)
    assert slurm_arrays.install() is True
    assert slurm_arrays.install() is True  # idempotent: wrapped once
    ex = _FakeExecutor()
    jobs = [_job("a"), _job("b", mem_mb=5000), _job("c"), _job("d", mem_mb=5000), _job("e", runtime=9)]
    ex._submit_array_jobs(jobs)
    assert ex.arrays == [["a", "c"], ["b", "d"]] and ex.singles == ["e"]


def test_other_plugin_version_is_refused(monkeypatch):
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "9.9.9")
    with pytest.raises(HeadgeomError, match="written for 2.8.0"):
        slurm_arrays.install()
