"""SLURM job arrays that keep every task's own request and never lose a ready job.

Two changes to snakemake-executor-plugin-slurm 2.8.0, installed by ``install()`` on the
submitting host (the Snakefile calls it; a local run without the plugin needs nothing):

1. **Every job handed to the executor is submitted** (``submit_every_job`` replaces
   ``Executor.run_jobs``). With ``slurm-array-jobs``, the plugin's ``run_jobs`` *holds back* a
   rule's ready jobs while fewer have arrived than the DAG still has ready for that rule
   ("Array job collection incomplete ... waiting for more jobs", then nothing). Snakemake has
   already counted those jobs as running, so it never offers them again: their ``-j`` slots
   leak and the run waits forever (the plugin's issue #473). It happens whenever the scheduler
   selects only part of a rule's ready jobs: more ready jobs than the profile's ``jobs`` limit,
   or jobs that become ready one by one while the slots are full. Here a rule's jobs that
   arrive together go to SLURM as arrays, a job that arrives alone goes as a plain job, and
   nothing waits.
2. **One array per resource request** (``split_by_request`` inside ``_submit_array_jobs``).
   The plugin gives every task of an array its first job's request ("all jobs have the same
   resource requirement", ``Executor.run_array_jobs``). Our per-layer jobs do not share one
   request (models of different shapes, fan-out parts, retries at attempt x the cost model),
   so each group of two or more jobs with one request becomes its own array and a job whose
   request is unique goes as a plain job.

A watchdog (``watch_submissions``) wraps ``run_jobs``: if any job handed to the executor was
not passed on to a submission call, and nothing is running, the run stops at once with a
``HeadgeomError`` naming the rule and the jobs (instead of waiting forever); if other jobs are
still running, it waits for them to end and then fails the held jobs with the same message.
With ``submit_every_job`` in place this never fires; it guards against a plugin whose
collection step changes under us.

The plugin version is pinned (``PINNED``; pyproject.toml pins the same): another installed
version is warned about (headgeom.patches.warn_unpinned) and patched if the methods replaced here
still exist; where they are gone, ``install`` refuses, so an upgrade that changes them fails
loudly instead of silently mis-requesting or hanging.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterable
from typing import Any

from headgeom.core.errors import HeadgeomError
from headgeom.patches import warn_unpinned

PINNED = {"snakemake-executor-plugin-slurm": "2.8.0"}
UPSTREAM = ("snakemake-executor-plugin-slurm issue #473: with slurm-array-jobs, run_jobs holds back ready jobs "
            "(leaked -j slots, the run waits forever); run_array_jobs gives every task the first job's request")

# Resources that never reach sbatch, or that Snakemake derives from others (mem_mib from mem_mb,
# disk_mib from disk_mb) and that therefore add nothing to the key.
_NOT_A_REQUEST = frozenset({"_cores", "_nodes", "tmpdir", "mem_mib", "disk_mib"})

# Seconds between the watchdog's looks at the executor's running jobs while it holds jobs, and
# how long it gives a submission in flight (sbatch called, job not yet registered as running).
WATCH_INTERVAL_S = 2.0
SUBMIT_GRACE_S = 60.0


def request_key(resources: dict[str, Any], threads: int) -> tuple:
    """What a job asks SLURM for: every resource that can reach sbatch, plus its threads.

    Two jobs with equal keys can share one ``sbatch --array`` call without either one's
    request changing.
    """
    items = tuple(sorted((k, str(v)) for k, v in resources.items() if k not in _NOT_A_REQUEST))
    return (("threads", str(threads)), *items)


def split_by_request(jobs: Iterable[Any]) -> list[list[Any]]:
    """Jobs grouped by ``request_key`` (first-seen order of groups and of jobs in a group)."""
    groups: dict[tuple, list[Any]] = {}
    for job in jobs:
        groups.setdefault(request_key(dict(job.resources.items()), job.threads), []).append(job)
    return list(groups.values())


def _array_selected(executor, rule_name: str) -> bool:
    chosen = executor.array_jobs
    return ("all" in chosen or rule_name in chosen) and executor.max_array_size >= 2


def submit_every_job(self, jobs) -> None:
    """``Executor.run_jobs`` that submits every job it is handed, now.

    Group jobs go as plain jobs (SLURM arrays cannot hold them); the other jobs of a rule
    selected for arrays go to ``_submit_array_jobs`` together (split there by request; a
    request held by one job only is a plain job); everything else goes one by one.
    """
    if self._main_event_loop is None:  # as the plugin's run_jobs: reports go to this loop
        try:
            self._main_event_loop = asyncio.get_running_loop()
        except RuntimeError:
            self._main_event_loop = None
    by_rule: dict[str, list[Any]] = {}
    for job in jobs:
        if job.is_group():
            self._submit_job(job)
        else:
            by_rule.setdefault(job.rule.name, []).append(job)
    for rule_name, same_rule in by_rule.items():
        if len(same_rule) >= 2 and _array_selected(self, rule_name):
            self._submit_array_jobs(same_rule)
        else:
            for job in same_rule:
                self._submit_job(job)


def _held_message(held: list[Any], running: int) -> str:
    rules = sorted({j.rule.name for j in held})
    names = ", ".join(str(j) for j in held[:5]) + (" ..." if len(held) > 5 else "")
    state = "nothing else is running" if running == 0 else f"the {running} running job(s) have ended"
    return (
        f"the SLURM executor was handed {len(held)} job(s) of rule(s) {', '.join(rules)} and "
        f"submitted none of them, and {state}: Snakemake counts them as running, so the run "
        f"would wait forever ({names}). This is the array collection of "
        f"snakemake-executor-plugin-slurm holding jobs back (its issue #473); headgeom's "
        "submission (headgeom/patches/slurm_arrays.py) should prevent it. Rerun; if it recurs, "
        "set `slurm-array-jobs: none` in the profile."
    )


def watch_submissions(run_jobs):
    """Wrap a ``run_jobs`` so that a job it neither submits nor reports never hangs the run."""

    def watched(self, jobs):
        jobs = list(jobs)
        submitted = self.__dict__.setdefault("_headgeom_submitted", set())
        run_jobs(self, jobs)
        held = [j for j in jobs if id(j) not in submitted]
        if not held:
            return
        # running: jobs SLURM has, plus this call's submissions still in sbatch
        running = len(self.active_jobs) + (len(jobs) - len(held))
        if running == 0:
            raise HeadgeomError(_held_message(held, 0))
        self.logger.warning(f"headgeom: {len(held)} job(s) handed to SLURM were not submitted; "
                            "waiting for the running jobs to end")
        threading.Thread(target=_fail_when_idle, args=(self, held, running), daemon=True).start()

    watched._headgeom_watchdog = True
    watched.__doc__ = run_jobs.__doc__
    return watched


def _fail_when_idle(executor, held: list[Any], running: int) -> None:
    """Once nothing runs, report every held job that is still unsubmitted as failed."""
    from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

    submitted = executor._headgeom_submitted
    start = time.monotonic()
    while executor.active_jobs or time.monotonic() - start < SUBMIT_GRACE_S:
        time.sleep(WATCH_INTERVAL_S)
    still = [j for j in held if id(j) not in submitted]
    msg = _held_message(still, running)
    for job in still:
        executor._report_job_error_threadsafe(SubmittedJobInfo(job=job), msg)


def _record(submit):
    """Wrap a submission method so that the watchdog knows which jobs it was given."""

    def recording(self, arg):
        done = self.__dict__.setdefault("_headgeom_submitted", set())
        for job in arg if isinstance(arg, list) else [arg]:
            done.add(id(job))
        return submit(self, arg)

    recording.__doc__ = submit.__doc__
    return recording


def install() -> bool:
    """Make the slurm executor plugin submit every ready job, one array per request. Idempotent.

    Returns False where the plugin is not installed (a local run needs nothing). Warns where the
    installed plugin is not the ``PINNED`` version; raises HeadgeomError where it lacks a method
    this wrapper replaces.
    """
    try:
        import snakemake_executor_plugin_slurm as plugin
    except ImportError:
        return False
    from importlib.metadata import version

    executor = plugin.Executor
    needed = ("run_jobs", "_submit_job", "_submit_array_jobs", "_report_job_error_threadsafe")
    missing = [m for m in needed if not hasattr(executor, m)]
    if missing:
        raise HeadgeomError(
            f"snakemake-executor-plugin-slurm {version('snakemake-executor-plugin-slurm')} is installed; its Executor "
            f"has no {', '.join(missing)}, which headgeom's SLURM submission (headgeom/patches/slurm_arrays.py, "
            f"written for {PINNED['snakemake-executor-plugin-slurm']}) replaces. Install that version (pyproject.toml "
            "pins it) or port the patch."
        )
    warn_unpinned(PINNED, "headgeom/patches/slurm_arrays.py")
    if getattr(executor.run_jobs, "_headgeom_watchdog", False):
        return True
    original_arrays = executor._submit_array_jobs

    def submit_split(self, jobs):
        for group in split_by_request(jobs):
            if len(group) == 1:
                self._submit_job(group[0])
            else:
                original_arrays(self, group)

    submit_split.__doc__ = original_arrays.__doc__
    executor._submit_array_jobs = _record(submit_split)
    executor._submit_job = _record(executor._submit_job)
    executor.run_jobs = watch_submissions(submit_every_job)
    return True
