"""Shared by the workflow scripts: send a job's output to its log file, and end a failing job's
log with one recognizable line, ``headgeom error: <what went wrong>``, which the workflow's
``onerror`` handler prints on the console for every failed job (``end_of_run_errors``)."""

import atexit
import os
import re
import sys
import time
import traceback

CONSOLE_EVERY_S = 15.0  # a job's progress reaches the console at most this often, and not before

#: the start of the last line of a failed job's log
MARKER = "headgeom error: "


def error_line(exc: BaseException) -> str:
    """One line for an exception: a HeadgeomError's own message (it is written for the person
    running the pipeline), anything else with its type."""
    from headgeom.core.errors import HeadgeomError

    msg = " ".join(str(exc).split())
    if isinstance(exc, HeadgeomError) and msg:
        return msg
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


TIMING = "headgeom timing: "  # the prefix of a job's last log line (read by headgeom.commands.timings)


def process_age() -> float | None:
    """Seconds since this process started (Linux /proc), None where that is not known."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of proc(5): starttime, clock ticks after boot
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def timing_line(startup_s: float | None, work_s: float) -> str:
    """The line a job writes to its log when its work is done (startup nan: not known)."""
    startup = "nan" if startup_s is None else f"{startup_s:.3f}"
    return f"{TIMING}startup_s={startup} work_s={work_s:.3f}"


def to_log(snakemake):
    """The job's log function (every workflow script calls this first): stdout and stderr go to
    the log; when the job ends without an error its log's last line is its timing
    (the process's age now, its start-up, and the time from now, its work)."""
    startup, t0 = process_age(), time.perf_counter()
    fh = open(snakemake.log[0], "w", buffering=1)
    sys.stdout = sys.stderr = fh
    failed = []

    def log(msg):
        print(msg, file=fh, flush=True)

    last = [time.monotonic()]

    def progress(msg):
        """A progress line of a long job: always in its log; on the console of a local run (under
        SLURM the job's console is its SLURM output file) once the job has run CONSOLE_EVERY_S and
        at most that often, so that short jobs stay quiet."""
        log(msg)
        now = time.monotonic()
        if now - last[0] >= CONSOLE_EVERY_S:
            last[0] = now
            print(msg, file=sys.__stderr__, flush=True)

    def on_uncaught(kind, exc, tb):  # the traceback, then the one line
        failed.append(kind)
        traceback.print_exception(kind, exc, tb, file=fh)
        print(MARKER + error_line(exc), file=fh, flush=True)

    def on_exit():
        if not failed and not fh.closed:
            log(timing_line(startup, time.perf_counter() - t0))

    sys.excepthook = on_uncaught
    atexit.register(on_exit)
    log.progress = progress
    return log


def progress_of(log):
    """The progress printer of a job's ``log`` (the log itself when it has none, e.g. print)."""
    return getattr(log, "progress", log)


# --------------------------------------------------------------------------- end of a failed run

_ERROR = re.compile(r"^Error in rule (\S+):\s*$")
_JOB = re.compile(r"^(?:local)?(?:rule|checkpoint) (\S+):\s*$")
_FIELD = re.compile(r"^\s+(jobid|log|wildcards):\s?(.*)$")
_FINISHED = re.compile(r"^Finished jobid: (\d+)\b")


END = ("end",)  # block_update: the line ends the job's block


def block_update(block: dict, line: str):
    """Read one line of a job's block in a Snakemake log into ``block`` (its ``jobid``, ``log``
    files, ``wildcards``): the key read, END when the line ends the block (not indented), None
    for any other line."""
    g = _FIELD.match(line)
    if not g:
        return END if line.strip() and not line[:1].isspace() else None
    key, val = g.groups()
    if key == "log":
        block["log"] = [p.strip() for p in val.split(" (check log file(s)")[0].split(",") if p.strip()]
    else:
        block[key] = val.strip()
    return key


def failed_jobs(text: str) -> list[dict]:
    """The failed jobs in a Snakemake log of one run: its "Error in rule" blocks (rule, jobid,
    log files), with each job's wildcards from the job's own description earlier in the log. A
    job that finished after its last error (a retry that succeeded) is left out."""
    errors, wildcards, finished_at, last_error = [], {}, {}, {}
    cur = None  # the block being read: ("job" | "error", dict)
    for i, line in enumerate(text.splitlines()):
        m, e, f = _JOB.match(line), _ERROR.match(line), _FINISHED.match(line)
        if m or e:
            cur = ("error" if e else "job", {"rule": (e or m).group(1), "jobid": None, "wildcards": "", "log": []})
            if e:
                errors.append((i, cur[1]))
            continue
        if f:
            finished_at[f.group(1)] = i
        if cur is None:
            continue
        key = block_update(cur[1], line)
        if key is END:
            cur = None
        elif key == "jobid" and cur[0] == "job":
            wildcards[cur[1]["jobid"]] = cur[1]
    for i, j in errors:
        last_error[j["jobid"]] = i
    out, seen = [], set()
    for i, j in errors:
        jid = j["jobid"]
        if jid in seen or finished_at.get(jid, -1) > last_error[jid]:
            continue
        seen.add(jid)
        desc = wildcards.get(jid)
        if desc is not None and desc["rule"] == j["rule"]:
            j["wildcards"] = j["wildcards"] or desc["wildcards"]
            j["log"] = j["log"] or desc["log"]
        out.append(j)
    return out


def marker_line(path) -> str | None:
    """The ``headgeom error:`` line of a job log (the last one), or None."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = [ln.rstrip("\n") for ln in fh if ln.startswith(MARKER)]
    except OSError:
        return None
    return lines[-1][len(MARKER):] if lines else None


def end_of_run_errors(snakemake_log, logs_dir="logs", since: float | None = None) -> list[str]:
    """One console line per failed job of this run: ``rule (wildcards): <its error>  [log: path]``.
    The failed jobs come from Snakemake's own log of the run; where that cannot be read, from the
    job logs under ``logs_dir`` written since ``since`` that end with the marker."""
    jobs = []
    for path in [snakemake_log] if isinstance(snakemake_log, (str, os.PathLike)) else list(snakemake_log or []):
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                jobs += failed_jobs(fh.read())
        except (OSError, TypeError):
            pass
    lines, named = [], set()
    for j in jobs:
        logs = j["log"]
        err = next((e for e in map(marker_line, logs) if e), None)
        where = f" ({j['wildcards']})" if j["wildcards"] else ""
        path = logs[0] if logs else None
        if err is None:
            err = ("no error line in its log (killed, out of memory or time, or failed before its script ran; "
                   "the log and Snakemake's message above say more)")
        line = f"{j['rule']}{where}: {err}" + (f"  [log: {path}]" if path else "")
        if line not in lines:  # every attempt of a retried job that failed each time: one line
            lines.append(line)
        named.update(os.path.normpath(p) for p in logs)
    if since is not None and os.path.isdir(logs_dir):  # job logs Snakemake's log did not name
        for root, _, files in os.walk(logs_dir):
            for f in sorted(files):
                p = os.path.join(root, f)
                if os.path.normpath(p) in named or not f.endswith(".log"):
                    continue
                try:
                    if os.path.getmtime(p) < since:
                        continue
                except OSError:
                    continue
                err = marker_line(p)
                if err:
                    lines.append(f"{os.path.relpath(p, logs_dir)}: {err}  [log: {p}]")
    return lines
