"""Snakemake's scheduler keeps at most one pending re-evaluation timer (headgeom/patches/scheduler_timers.py).

A real Snakemake run of a toy workflow counts its scheduling passes: with the fix they follow the
jobs' events and the run's seconds; with Snakemake's own method every event adds a timer chain
and the passes grow with events x seconds."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from headgeom.core.errors import HeadgeomError
from headgeom.patches import scheduler_timers

# 16 independent jobs of 0.5 s on one core, then the target that gathers them: about 8 s of events
# (shell jobs: a `run:` job is a Snakemake subprocess that parses the Snakefile again, seconds each)
TOY = textwrap.dedent("""
    N = 16
    rule all:
        input: expand("out/{i}.txt", i=range(N))
    rule one:
        output: "out/{i}.txt"
        shell: "sleep 0.5 && echo x > {output}"
""")

# runs Snakemake in this process, counting the scheduler's passes (its job selector calls)
RUNNER = textwrap.dedent("""
    import sys, time
    from snakemake.scheduling.job_scheduler import JobScheduler
    if sys.argv[1] == "fixed":
        from headgeom.patches import scheduler_timers
        scheduler_timers.install()
    passes = [0]
    select = JobScheduler.job_selector
    def counting(self, jobs):
        passes[0] += 1
        return select(self, jobs)
    JobScheduler.job_selector = counting
    from snakemake.cli import main
    t0 = time.time()
    try:
        main(["-c1", "-q", "-s", sys.argv[2], "-d", sys.argv[3]])
    except SystemExit as e:
        print(f"PASSES {passes[0]} WALL {time.time() - t0:.2f} RC {e.code}", file=sys.stderr)
        raise
""")


def _passes(tmp_path, variant: str) -> tuple[int, float]:
    snakefile = tmp_path / "Snakefile"
    snakefile.write_text(TOY)
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER)
    work = tmp_path / variant
    work.mkdir()
    res = subprocess.run([sys.executable, str(runner), variant, str(snakefile), str(work)],
                         capture_output=True, text=True, timeout=300)
    line = [ln for ln in res.stderr.splitlines() if ln.startswith("PASSES ")]
    assert line, res.stderr[-2000:]
    _, passes, _, wall, _, rc = line[-1].split()
    assert rc == "0", res.stderr[-2000:]
    assert len(list((work / "out").iterdir())) == 16
    return int(passes), float(wall)


def test_scheduling_passes_follow_events_not_events_times_seconds(tmp_path):
    """17 jobs: each start and end wakes the loop once, plus at most one timer pass per second."""
    passes, wall = _passes(tmp_path, "fixed")
    events = 2 * 17
    assert passes <= events + wall + 5, (passes, wall)


class _Scheduler:
    def __init__(self):
        self._open_jobs = threading.Semaphore(0)


def _wakes(s, wait: float) -> int:
    time.sleep(wait)
    n = 0
    while s._open_jobs.acquire(blocking=False):
        n += 1
    return n


def test_one_pending_timer_wakes_the_loop_once_then_can_be_started_again():
    s = _Scheduler()
    for _ in range(50):
        scheduler_timers.schedule_once(s, 0.05)
    assert _wakes(s, 0.3) == 1
    scheduler_timers.schedule_once(s, 0.05)  # the fired timer no longer counts as pending
    assert _wakes(s, 0.3) == 1
    other = _Scheduler()  # pending timers are per scheduler
    scheduler_timers.schedule_once(s, 0.05)
    scheduler_timers.schedule_once(other, 0.05)
    assert _wakes(s, 0.3) == 1 and _wakes(other, 0.0) == 1


def test_another_snakemake_version_warns_and_a_missing_method_is_refused(monkeypatch):
    from snakemake.scheduling.job_scheduler import JobScheduler

    from headgeom.patches import PinnedVersionWarning

    monkeypatch.setattr(scheduler_timers, "PINNED", {"snakemake": "0.0"})
    monkeypatch.setattr(JobScheduler, "_schedule_reevalutation", JobScheduler._schedule_reevalutation)
    with pytest.warns(PinnedVersionWarning, match=r"written for snakemake 0\.0; .* is installed"):
        assert scheduler_timers.install() is True
    monkeypatch.delattr(JobScheduler, "_schedule_reevalutation")
    with pytest.raises(HeadgeomError, match="has no _schedule_reevalutation"):
        scheduler_timers.install()


def test_the_workflow_installs_it(tmp_path, root):
    """Parsing the Snakefile (a dry run) replaces the method in the submitting process."""
    code = textwrap.dedent(f"""
        import sys
        from snakemake.cli import main
        from snakemake.scheduling.job_scheduler import JobScheduler
        try:
            main(["-n", "-q", "-s", {str(root / 'Snakefile')!r},
                  "-d", {str(tmp_path)!r}])
        except SystemExit:
            pass
        print("METHOD", JobScheduler._schedule_reevalutation.__qualname__, file=sys.stderr)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "METHOD schedule_once" in res.stderr, res.stderr[-2000:]
