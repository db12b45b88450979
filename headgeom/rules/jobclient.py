"""The per-layer jobs' command (workflow/rules/jobs.smk's ``shell:``), and the protocol by which any job
reaches the local run's job server (headgeom.rules.jobserver). Standard library only: the command runs
``python -m headgeom.rules.jobclient ENTRY SPEC LOG ATTEMPT MEM_MB RUNTIME THREADS JOB``, which starts in
about 40 ms where a ``script:`` job's Python imports Snakemake (0.13 CPU-s) before it can hand anything over.

ENTRY names the job's function (headgeom.rules.scripts.ENTRIES: per_layer_job); SPEC is the job's params
entry ``spec`` (headgeom.rules.jobs.job_spec): its input, output, wildcards and params as JSON; the rest
are Snakemake's values for the job. The client hands the job to the server (its stdout, stderr, working
directory and environment with it) and exits with the job's status. Without a server it replaces itself
with ``python -m headgeom.rules.jobserver run``, which runs the same function on the same values in this
process, as a cluster job does."""

from __future__ import annotations

import json
import os
import socket
import struct
import sys

ENV = "HEADGEOM_JOB_SERVER"  # the server's socket, in the environment of the run's jobs
OFF = "HEADGEOM_NO_JOB_SERVER"  # set (not "" or "0"): every job in its own process, as under a scheduler
SPEC_MAX_BYTES = 100_000  # a spec is one argument of the job's command line (Linux: 128 KiB at most)


def enabled() -> bool:
    return os.environ.get(OFF, "") in ("", "0")


def _send_all(sock, data: bytes, fds=()) -> None:
    if fds:
        sent = socket.send_fds(sock, [data], list(fds))
        data = data[sent:]
    sock.sendall(data)


def hand_over(entry: str, job: dict, path: str | None = None) -> int | None:
    """Hand the job (``job``: its values as jobserver.Job reads them) to the server at ``path``
    (default: the environment's HEADGEOM_JOB_SERVER) with this process's stdout, stderr, working
    directory and environment, and wait for its exit status; None when no server takes it (then
    nothing has run)."""
    path = os.environ.get(ENV) if path is None else path
    if not path or not enabled():
        return None
    try:
        body = json.dumps({"entry": entry, "job": job, "cwd": os.getcwd(), "env": dict(os.environ),
                           "argv": sys.argv}).encode()
    except (TypeError, ValueError):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    with sock:
        _send_all(sock, struct.pack("!Q", len(body)), fds=(1, 2))
        _send_all(sock, body)
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = sock.recv(64)
            if not chunk:
                break
            reply += chunk
    try:
        return int(json.loads(reply)["rc"])
    except (ValueError, KeyError, TypeError):
        print(f"headgeom: the job server's process for {entry} ended without an exit status "
              f"(killed, or out of memory)", file=sys.stderr)
        return 1


def named(values: dict) -> dict:
    """A Namedlist's plain form (jobserver.Named): its named values, in order, also by position."""
    return {"list": list(values.values()), "named": dict(values)}


def command_job(argv: list[str]) -> tuple[str, dict]:
    """(entry, job values) of the command's arguments."""
    entry, spec, log, attempt, mem_mb, runtime, threads, rule = argv
    job = json.loads(spec)
    job.update(log={"list": [log], "named": {}},
               resources=named({"attempt": int(attempt), "mem_mb": int(mem_mb), "runtime": int(runtime)}),
               threads=int(threads), rule=rule, config={})
    return entry, job


def main(argv: list[str]) -> None:
    entry, job = command_job(argv)
    rc = hand_over(entry, job)
    if rc is not None:
        sys.exit(rc)
    # no server: this job in a process of its own, with the interpreter's site and environment
    os.execv(sys.executable, [sys.executable, "-m", "headgeom.rules.jobserver", "run", entry, json.dumps(job)])


if __name__ == "__main__":
    main(sys.argv[1:])
