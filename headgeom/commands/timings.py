"""Where a run's seconds go, per rule, from the run's own logs (``headgeom timings``).

Two sources, both written by every run:

* Snakemake's log of the run (``.snakemake/log/<date>.snakemake.log``): each job's start (the
  timestamp above its ``rule NAME:`` block) and end (the one above ``Finished jobid: N``), to the
  second. Their difference is the job's *wall* time as the scheduler saw it: the process start,
  the interpreter, the script preamble, the imports, the work and Snakemake's own bookkeeping.
* The job's log (the block's ``log:`` line), whose last ``headgeom timing:`` line
  (:func:`timing_line`, written by the workflow scripts) gives ``startup_s``, the age of the job's
  process when its script began (interpreter, Snakemake's script preamble, the script's imports),
  and ``work_s``, the time of the job function itself (reading, computing, writing; the lazy
  imports it makes included).

The table: per rule the job count, the summed and mean wall time, the summed ``work_s``, and the
start-up: ``wall - work``, of which ``startup_s`` is spent inside the job's process before its
script runs. Wall times have one-second resolution, so per-job means of short jobs are only as
good as the count behind them.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from headgeom.core.errors import TimingsError
from headgeom.core.logs import _FINISHED, _JOB as _START, END, TIMING, block_update, process_age, timing_line  # noqa: F401 (re-exported)

_STAMP = re.compile(r"^\[(\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4})\]\s*$")
_TIMING = re.compile(r"^" + re.escape(TIMING) + r"startup_s=([0-9.]+|nan) work_s=([0-9.]+)\s*$")


def parse_run_log(text: str) -> list[dict]:
    """Finished jobs of one Snakemake run log: rule, jobid, log files, start and end (datetimes)."""
    stamp, cur, started, done = None, None, {}, []
    for line in text.splitlines():
        m = _STAMP.match(line)
        if m:
            stamp = datetime.strptime(" ".join(m.group(1).split()), "%a %b %d %H:%M:%S %Y")
            cur = None
            continue
        s = _START.match(line)
        if s:
            cur = {"rule": s.group(1), "jobid": None, "log": [], "start": stamp}
            continue
        f = _FINISHED.match(line)
        if f:
            job = started.pop(f.group(1), None)
            if job is not None and stamp is not None and job["start"] is not None:
                done.append({**job, "end": stamp, "wall_s": (stamp - job["start"]).total_seconds()})
            cur = None
            continue
        if cur is None:
            continue
        key = block_update(cur, line)
        if key is END:
            cur = None
        elif key == "jobid":
            started[cur["jobid"]] = cur
    return done


def job_timing(log_path: Path) -> tuple[float, float] | None:
    """(startup_s, work_s) of the last timing line of a job log, None without one."""
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        m = _TIMING.match(line)
        if m:
            return float(m.group(1)), float(m.group(2))
    return None


def latest_run_log(workdir: Path) -> Path:
    logs = sorted((workdir / ".snakemake" / "log").glob("*.snakemake.log"))
    if not logs:
        raise TimingsError(f"no Snakemake run log under {workdir / '.snakemake' / 'log'} (has the pipeline run here?)")
    return logs[-1]


def rule_table(jobs: list[dict], workdir: Path) -> list[dict]:
    """Per rule: count, wall (sum, mean), work (sum; jobs with a timing line), startup in the
    job's process (sum) and the rest of the start-up (wall - work - startup, summed), sorted by
    summed wall time; a last row ``total``."""
    rows: dict[str, dict] = {}
    for j in jobs:
        r = rows.setdefault(j["rule"], {"rule": j["rule"], "jobs": 0, "wall_s": 0.0, "timed": 0, "work_s": 0.0,
                                        "startup_s": 0.0, "timed_wall_s": 0.0})
        r["jobs"] += 1
        r["wall_s"] += j["wall_s"]
        t = next((t for t in (job_timing(workdir / p) for p in j["log"]) if t is not None), None)
        if t is not None:
            r["timed"] += 1
            r["startup_s"] += t[0] if t[0] == t[0] else 0.0
            r["work_s"] += t[1]
            r["timed_wall_s"] += j["wall_s"]
    out = sorted(rows.values(), key=lambda r: -r["wall_s"])
    total = {"rule": "total", **{k: sum(r[k] for r in out) for k in ("jobs", "wall_s", "timed", "work_s",
                                                                      "startup_s", "timed_wall_s")}}
    for r in out + [total]:
        r["mean_wall_s"] = r["wall_s"] / r["jobs"] if r["jobs"] else 0.0
        # start-up of the timed jobs: their wall time minus their work (never below 0 per rule)
        r["overhead_s"] = max(0.0, r["timed_wall_s"] - r["work_s"]) if r["timed"] else None
    return out + [total]


def render(rows: list[dict], log: Path) -> str:
    lines = [f"Per-rule job time of {log} (wall: Snakemake's job start to finish, 1-s resolution; work: the job "
             "function, from each job's log; start-up = wall - work, of which 'in process' is before the script "
             "ran)", "",
             "| rule | jobs | wall s | mean wall s | work s | start-up s | start-up % | in process s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        o = r["overhead_s"]
        pct = f"{100 * o / r['timed_wall_s']:.0f}" if o is not None and r["timed_wall_s"] > 0 else "–"
        lines.append(f"| {r['rule']} | {r['jobs']} | {r['wall_s']:.0f} | {r['mean_wall_s']:.2f} | "
                     + (f"{r['work_s']:.1f} | {o:.1f} | {pct} | {r['startup_s']:.1f} |" if o is not None
                        else "– | – | – | – |"))
    return "\n".join(lines) + "\n"


def timings(workdir: str | Path = ".", run_log: str | Path | None = None) -> tuple[list[dict], Path]:
    workdir = Path(workdir)
    log = Path(run_log) if run_log else latest_run_log(workdir)
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise TimingsError(f"cannot read the run log {log}: {e}") from e
    jobs = parse_run_log(text)
    if not jobs:
        raise TimingsError(f"{log}: no finished job in this Snakemake log")
    return rule_table(jobs, workdir), log
