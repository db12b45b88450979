"""At most one pending re-evaluation timer in Snakemake's job scheduler.

Snakemake 9.27.1 rate-limits job starts by default (``--max-jobs-per-timespan 100/1s``). So that
jobs held back by the limit start once the timespan has passed, every pass of the scheduler's
loop ends by starting a ``threading.Timer`` that wakes the loop again after the timespan
(``JobScheduler._schedule_reevalutation``). A pass woken by that timer starts the next one, and a
pass woken by anything else (a job ending) starts one more: every such event adds a chain of
timers that never ends. After n events the loop runs about n passes per timespan, and each pass
stats every input of every ready job (``update_input_sizes``) and runs the job selector.

Measured on 2 cores (cProfile of ``make run``, 301 jobs): 21,337 passes in 240 s; the
scheduler's own CPU time grows with the run's length and job count (a quarter of a core late in
``--configfile config/paper.yaml``'s 386 jobs), and competes with the jobs for the cores.

``install()`` (the Snakefile calls it) replaces ``_schedule_reevalutation`` by one that starts a
timer only where none is pending. The limiter still gets what it needs: while a timer is pending
the loop is woken within the timespan, and the pass it wakes starts the next timer if jobs are
still held back. Nothing else about scheduling changes.

The Snakemake version is pinned (``PINNED``; pyproject.toml pins the same): another installed
version is warned about (headgeom.patches.warn_unpinned) and patched if the method still exists;
where it is gone, ``install`` refuses, so an upgrade that changes it fails loudly.
"""

from __future__ import annotations

import threading

from headgeom.core.errors import HeadgeomError
from headgeom.patches import warn_unpinned

PINNED = {"snakemake": "9.27.1"}
UPSTREAM = ("snakemake JobScheduler._schedule_reevalutation starts one threading.Timer per scheduling pass, so "
            "timer chains accumulate and the loop runs ever more passes per --max-jobs-per-timespan")


def schedule_once(self, delay: float) -> None:
    """``JobScheduler._schedule_reevalutation`` with at most one pending timer per scheduler."""
    lock = self.__dict__.setdefault("_headgeom_timer_lock", threading.Lock())
    with lock:
        if self.__dict__.get("_headgeom_timer") is not None:
            return

        def wake():
            with lock:
                self._headgeom_timer = None
            self._open_jobs.release()

        self._headgeom_timer = threading.Timer(delay, wake)
        self._headgeom_timer.start()


def install() -> bool:
    """Replace Snakemake's re-evaluation timer by ``schedule_once``. Idempotent; returns True.

    Warns where the installed Snakemake is not the ``PINNED`` version; raises HeadgeomError where
    it lacks the method replaced.
    """
    from importlib.metadata import version

    from snakemake.scheduling.job_scheduler import JobScheduler

    if not hasattr(JobScheduler, "_schedule_reevalutation"):
        raise HeadgeomError(
            f"snakemake {version('snakemake')} is installed; its JobScheduler has no _schedule_reevalutation, which "
            f"headgeom's scheduler fix (headgeom/patches/scheduler_timers.py, written for {PINNED['snakemake']}) "
            "replaces. Install that version (pyproject.toml pins it) or port the fix."
        )
    warn_unpinned(PINNED, "headgeom/patches/scheduler_timers.py")
    JobScheduler._schedule_reevalutation = schedule_once
    return True
