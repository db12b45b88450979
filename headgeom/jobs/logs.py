"""Shared by the workflow scripts: send a job's output to its log file."""

import sys
import time

CONSOLE_EVERY_S = 15.0  # a job's progress reaches the console at most this often, and not before


def to_log(snakemake):
    fh = open(snakemake.log[0], "w", buffering=1)
    sys.stdout = sys.stderr = fh

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

    log.progress = progress
    return log


def progress_of(log):
    """The progress printer of a job's ``log`` (the log itself when it has none, e.g. print)."""
    return getattr(log, "progress", log)
