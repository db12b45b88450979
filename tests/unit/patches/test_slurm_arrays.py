"""Job arrays keep each task's own request (headgeom/patches/slurm_arrays.py).

The end-to-end check (sacct shows array tasks with per-group ReqMem) is in
tests/workflow/test_slurm.py; here: the grouping, and that the wrapper reaches the plugin.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from headgeom.core.errors import HeadgeomError
from headgeom.patches import slurm_arrays


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

    def run_jobs(self, jobs):
        raise AssertionError("replaced by install()")

    def _report_job_error_threadsafe(self, job_info, msg):
        raise AssertionError("not reached here")

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
    assert _FakeExecutor.run_jobs.__code__ is not slurm_arrays.submit_every_job.__code__
    assert getattr(_FakeExecutor.run_jobs, "_headgeom_watchdog", False)  # run_jobs replaced, watched


def test_other_plugin_version_warns_and_a_missing_method_is_refused(monkeypatch):
    """Another installed version: one warning naming the pinned and the installed version, and the
    patch goes in; a plugin without a method the patch replaces is refused."""
    import importlib.metadata

    import snakemake_executor_plugin_slurm as plugin

    from headgeom.patches import PinnedVersionWarning

    assert slurm_arrays.PINNED == {"snakemake-executor-plugin-slurm": "2.8.0"}
    fresh = type("Executor", (), {k: v for k, v in vars(_FakeExecutor).items() if not k.startswith("__")})
    monkeypatch.setattr(plugin, "Executor", fresh)
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "9.9.9")
    with pytest.warns(PinnedVersionWarning, match=r"snakemake-executor-plugin-slurm 2\.8\.0; 9\.9\.9 is installed"):
        assert slurm_arrays.install() is True
    delattr(fresh, "_submit_array_jobs")
    with pytest.raises(HeadgeomError, match="has no _submit_array_jobs"):
        slurm_arrays.install()


# ---------------------------------------------------------------- run_jobs: no job is held back


class _Rule(SimpleNamespace):
    pass


def _rule_job(rule, n, group=False, **res):
    job = _job(f"{rule}_{n}", **res)
    job.rule = _Rule(name=rule)
    job.is_group = lambda: group
    job.__str__ = lambda self=job: self.name
    return job


class _PluginLike:
    """The attributes the plugin's run_jobs and headgeom's replacement read, and recorders for
    the two submission calls (as the plugin's, after headgeom's split by request)."""

    def __init__(self, ready_later=(), array_jobs=("all",), active=0):
        self._main_event_loop = None
        self.logger = SimpleNamespace(debug=lambda *a: None, warning=lambda *a: None)
        self.array_jobs = set(array_jobs)
        self.max_array_size = 500
        # ready jobs the scheduler did not select this time (still in dag.ready_jobs)
        self.workflow = SimpleNamespace(dag=SimpleNamespace(ready_jobs=list(ready_later)))
        self.active_jobs = [object()] * active
        self.arrays, self.singles, self.errors = [], [], []

    def _submit_array_jobs(self, jobs):
        for group in slurm_arrays.split_by_request(jobs):
            if len(group) == 1:
                self._submit_job(group[0])
            else:
                self._headgeom_submitted.update(id(j) for j in group)
                self.arrays.append([j.name for j in group])

    def _submit_job(self, job):
        self.__dict__.setdefault("_headgeom_submitted", set()).add(id(job))
        self.singles.append(job.name)

    def _report_job_error_threadsafe(self, job_info, msg):
        self.errors.append((job_info.job.name, msg))


def _selected_part_of_a_rule():
    """8 of 17 ready `square` jobs selected (the profile's `jobs: 8`), 9 still ready."""
    jobs = [_rule_job("square", n) for n in range(17)]
    return jobs[:8], jobs[8:]


def test_the_plugins_collection_holds_back_a_partly_selected_rule():
    """Why headgeom replaces run_jobs: snakemake-executor-plugin-slurm 2.8.0 submits nothing when
    the scheduler selected fewer of a rule's jobs than are still ready (its issue #473); those
    jobs are lost. If this test fails, the plugin changed: revisit slurm_arrays."""
    import snakemake_executor_plugin_slurm as plugin

    selected, later = _selected_part_of_a_rule()
    ex = _PluginLike(ready_later=later)
    ex._headgeom_submitted = set()
    plugin.Executor.run_jobs(ex, selected)
    assert ex.arrays == [] and ex.singles == []  # held, never to be offered again
    one = _PluginLike(ready_later=later[1:])  # one job arrives while others are ready: also held
    one._headgeom_submitted = set()
    plugin.Executor.run_jobs(one, [later[0]])
    assert one.arrays == [] and one.singles == []


def test_every_handed_job_is_submitted_arrays_by_request_groups_alone():
    selected, later = _selected_part_of_a_rule()
    big = [_rule_job("capacity", n, mem_mb=4000) for n in range(2)]
    odd = _rule_job("capacity", 9, mem_mb=9000)
    grouped = _rule_job("grp", 0, group=True)
    ex = _PluginLike(ready_later=later)
    slurm_arrays.watch_submissions(slurm_arrays.submit_every_job)(ex, [*selected, *big, odd, grouped])
    assert ex.arrays == [[j.name for j in selected], ["capacity_0", "capacity_1"]]
    assert sorted(ex.singles) == ["capacity_9", "grp_0"]
    # a job that arrives alone while others of its rule are ready goes at once, as a plain job
    ex1 = _PluginLike(ready_later=later[1:])
    slurm_arrays.watch_submissions(slurm_arrays.submit_every_job)(ex1, [later[0]])
    assert ex1.singles == ["square_8"] and ex1.arrays == []
    # a rule not selected for arrays: one plain job each
    ex2 = _PluginLike(array_jobs=("other",))
    slurm_arrays.submit_every_job(ex2, selected[:3])
    assert ex2.singles == ["square_0", "square_1", "square_2"] and ex2.arrays == []


def test_watchdog_stops_a_run_that_holds_jobs_while_nothing_runs():
    import snakemake_executor_plugin_slurm as plugin

    selected, later = _selected_part_of_a_rule()
    ex = _PluginLike(ready_later=later)
    with pytest.raises(HeadgeomError, match=r"8 job\(s\) of rule\(s\) square .*wait forever"):
        slurm_arrays.watch_submissions(plugin.Executor.run_jobs)(ex, selected)


def test_watchdog_fails_held_jobs_once_the_running_ones_end(monkeypatch):
    import time

    import snakemake_executor_plugin_slurm as plugin

    monkeypatch.setattr(slurm_arrays, "WATCH_INTERVAL_S", 0.01)
    monkeypatch.setattr(slurm_arrays, "SUBMIT_GRACE_S", 0.0)
    selected, later = _selected_part_of_a_rule()
    ex = _PluginLike(ready_later=later, active=2)
    slurm_arrays.watch_submissions(plugin.Executor.run_jobs)(ex, selected)  # held; others run
    time.sleep(0.1)
    assert ex.errors == []  # still running: no verdict yet
    ex.active_jobs = []
    deadline = time.monotonic() + 5
    while len(ex.errors) < 8 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(n for n, _ in ex.errors) == sorted(j.name for j in selected)
    assert all("wait forever" in m and "running job(s) have ended" in m for _, m in ex.errors)
