"""The local run's job server: one process with the jobs' libraries imported (numpy, scipy, pyarrow,
matplotlib, headgeom) that forks a child for each job, so that a job does not pay those imports
again (about 0.2-0.3 CPU-s a process on this project's machines, more than many embedded-model jobs
take for their work).

A job reaches the server from its command (headgeom.rules.jobclient: the per-layer jobs' ``shell:``)
or its workflow script (``run_script``: the tables, figures and the rest): its values (input, output,
log, params, wildcards, resources, threads, rule, config) as JSON, its working directory and
environment, and its stdout and stderr (the descriptors themselves). The forked child takes that
environment (BLAS threads included) and those descriptors, runs the job's entry
(headgeom.rules.scripts.ENTRIES) on the same values (``Job``), runs the exit handlers a process runs
at exit (the log's timing line) and answers with its exit status, which the command or script exits
with. The child dies with its command: when that end of the connection closes (Snakemake cancelled
the job), the child exits at once. The same entry runs in the job's own process where there is no
server (a cluster job, ``--use-conda``, a run of fewer than MIN_JOBS jobs, ``HEADGEOM_NO_JOB_SERVER=1``)
or a script's values are not plain JSON; either way it computes the same values in the same order.

The workflow starts the server for a local run (``start``, from the Snakefile's ``onstart``) and
stops it when the run ends (``stop``); the server also exits when the Snakemake process that
started it is gone. Its socket lives in a directory only its user can open."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import struct
import sys
import tempfile
import threading
import time

from headgeom.jobs.draws import BLAS_THREAD_VARS, blas_threads_named
from headgeom.rules.jobclient import ENV, enabled, hand_over
from headgeom.rules.scripts import entry_function

START_TIMEOUT_S = 60.0


class Named(list):
    """A Snakemake Namedlist's values as the workflow scripts read them: by position, by name
    (attribute), ``items()``, ``keys()``, ``get()``."""

    def __init__(self, values=(), named=None):
        super().__init__(values)
        self._named = dict(named or {})

    def __getattr__(self, name):
        try:
            return self.__dict__["_named"][name]
        except KeyError:
            raise AttributeError(name) from None

    def items(self):
        return self._named.items()

    def keys(self):
        return self._named.keys()

    def get(self, name, default=None):
        return self._named.get(name, default)


PARTS = ("input", "output", "log", "params", "wildcards", "resources")


def _plain(x):
    """A Snakemake value as plain JSON data (a Namedlist or tuple as a list)."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if x is None or isinstance(x, (str, bool, int, float)):
        return x
    raise TypeError(f"{type(x).__name__} is not plain data")


def snapshot(smk) -> dict:
    """The values of a Snakemake object a workflow script reads, as JSON data (TypeError: a value
    that is not plain data)."""
    out = {p: {"list": _plain(list(getattr(smk, p))), "named": _plain(dict(getattr(smk, p).items()))}
           for p in PARTS}
    out.update(threads=int(smk.threads), rule=str(smk.rule), config=_plain(dict(smk.config)))
    return out


class Job:
    """A job's values as a workflow script reads them from its ``snakemake`` object."""

    def __init__(self, snap: dict):
        for p in PARTS:
            setattr(self, p, Named(snap[p]["list"], snap[p]["named"]))
        self.threads, self.rule, self.config = snap["threads"], snap["rule"], snap["config"]


# ------------------------------------------------------------------------------------ the script's side


def run_script(entry: str, smk) -> None:
    """A workflow script's body: its job run by the server where there is one, else here. Exits
    with the job's status when the server ran it."""
    try:
        job = snapshot(smk)
    except TypeError:  # not plain data: run here
        job = None
    rc = None if job is None else hand_over(entry, job)
    if rc is None:
        entry_function(entry)(smk)
    elif rc:
        sys.exit(rc)


# ------------------------------------------------------------------------------------ the server's side


def _recv_exact(sock, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(min(1 << 20, n - len(buf)))
        if not chunk:
            raise ConnectionError("the script closed the connection")
        buf += chunk
    return buf


def _receive(conn) -> tuple[dict, list[int]]:
    head, fds, _, _ = socket.recv_fds(conn, 8, 2)
    head += _recv_exact(conn, 8 - len(head))
    (n,) = struct.unpack("!Q", head)
    return json.loads(_recv_exact(conn, n)), fds


def _blas_threads(env: dict) -> None:
    """The job's BLAS threads, as its environment asks (Snakemake sets them to the job's threads)."""
    n = blas_threads_named(env)
    if n is not None:
        from threadpoolctl import threadpool_limits

        threadpool_limits(n)


def _die_with_script(conn) -> None:
    """Exit this job's process as soon as the script's end of the connection closes."""

    def watch():
        try:
            while conn.recv(1):
                pass
        except OSError:
            pass
        os._exit(143)

    threading.Thread(target=watch, daemon=True).start()


def _exit_status(code) -> int:
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def _child(conn) -> None:
    """One job, in the forked child: never returns."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server's own handlers: not the job's
    signal.signal(signal.SIGINT, signal.default_int_handler)
    rc = 1
    try:
        msg, fds = _receive(conn)
        for fd, target in zip(fds, (1, 2)):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(msg["cwd"])
        os.environ.clear()
        os.environ.update(msg["env"])
        sys.argv = list(msg.get("argv") or [""])
        _blas_threads(msg["env"])
        _die_with_script(conn)
        rc = 0
        try:
            entry_function(msg["entry"])(Job(msg["job"]))
        except SystemExit as e:
            rc = _exit_status(e.code)
        except BaseException:
            rc = 1
            sys.excepthook(*sys.exc_info())  # the job's log records it, as in a script's process
        atexit._run_exitfuncs()  # what a script's process runs at exit: the log's timing line
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
    except BaseException as e:  # the message itself: not a job that ran
        try:
            os.write(2, f"headgeom job server: {type(e).__name__}: {e}\n".encode())
        except OSError:
            pass
        rc = 1
    try:
        conn.sendall(json.dumps({"rc": rc}).encode() + b"\n")
    except OSError:
        pass
    os._exit(rc)


def _reap(block: bool = False) -> None:
    """Wait for the ended jobs (waited for, their CPU time counts in the server's, and so in the run's,
    children's usage: ignoring SIGCHLD instead would drop it)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _preload() -> None:
    """What the jobs import, imported once before any job is forked (the plugins' entries included)."""
    import numpy  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import scipy.linalg  # noqa: F401

    import headgeom.outputs  # noqa: F401
    import headgeom.publish.claims  # noqa: F401
    import headgeom.verify.sensitivity  # noqa: F401
    from headgeom.outputs.formats import pyplot
    from headgeom.schedule.families import load_plugins

    pyplot()
    load_plugins()


def serve(path: str, parent: int | None = None) -> None:
    """Listen at ``path`` and fork a child for each job, until the process ``parent`` is gone or
    SIGTERM; then wait for the jobs still running."""
    _preload()

    parent = os.getppid() if parent is None else parent
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the jobs and Snakemake, which then stops this
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = f"{path}.{os.getpid()}"
    sock.bind(tmp)
    sock.listen(64)
    os.replace(tmp, path)  # the socket appears when it accepts
    sock.settimeout(0.5)
    while not stopping and os.getppid() == parent:
        _reap()
        try:
            conn, _ = sock.accept()
        except (TimeoutError, socket.timeout, InterruptedError):
            continue
        conn.settimeout(None)
        if os.fork() == 0:
            sock.close()
            _child(conn)
        conn.close()
    sock.close()
    _reap(block=True)


# ------------------------------------------------------------------------------------ the workflow's side

_SERVER: dict = {}


MIN_JOBS = 4  # a run of fewer jobs starts none: the server's imports cost about what 3 jobs' own do


def planned_jobs(workflow) -> int | None:
    """The jobs the run has to do as it starts (a checkpoint adds more later); None where not known."""
    try:
        return sum(1 for _ in workflow.dag.needrun_jobs())
    except Exception:  # Snakemake's internals: unknown is not an error
        return None


def wanted(workflow) -> bool:
    """Whether a run forks its jobs from a server: a local run's main process with at least MIN_JOBS
    jobs to do, no conda or container deployment (their jobs run another interpreter), not switched
    off (HEADGEOM_NO_JOB_SERVER)."""
    if not enabled() or not getattr(workflow, "is_main_process", False) or not getattr(workflow, "local_exec", False):
        return False
    settings = getattr(workflow, "deployment_settings", None)
    if settings is not None and settings.deployment_method:
        return False
    n = planned_jobs(workflow)
    return n is None or n >= MIN_JOBS


def start(workflow=None, say=None) -> str | None:
    """Start the server for this run's jobs (``workflow``: the Snakefile's, checked with ``wanted``;
    None: start it) and point the jobs at it (``HEADGEOM_JOB_SERVER``); its socket's path, or None
    where the run's jobs run each in its own process."""
    import subprocess

    if workflow is not None and not wanted(workflow):
        return None
    home = tempfile.mkdtemp(prefix="headgeom-jobs-")  # mode 0700: only this user can connect
    path = os.path.join(home, "socket")
    env = dict(os.environ, **{k: "1" for k in BLAS_THREAD_VARS})  # no BLAS threads before a fork
    env.pop(ENV, None)
    proc = subprocess.Popen([sys.executable, "-m", "headgeom.rules.jobserver", "serve", path, str(os.getpid())],
                            env=env, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not os.path.exists(path):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            shutil.rmtree(home, ignore_errors=True)
            if say is not None:
                say("headgeom: the job server did not start; each job runs in its own process")
            return None
        time.sleep(0.02)
    _SERVER.update(proc=proc, home=home)
    os.environ[ENV] = path
    atexit.register(stop)
    return path


def stop() -> None:
    """Stop the server this process started (the jobs it forked have ended with the run)."""
    import subprocess

    proc, home = _SERVER.pop("proc", None), _SERVER.pop("home", None)
    os.environ.pop(ENV, None)
    if proc is not None and proc.poll() is None:
        proc.terminate()  # it waits for its jobs, then exits
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if home:
        shutil.rmtree(home, ignore_errors=True)


def run(entry: str, job_json: str) -> None:
    """A job handed over by its command (headgeom.rules.jobclient) where there is no server: here."""
    entry_function(entry)(Job(json.loads(job_json)))


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3])
    else:
        sys.exit("usage: python -m headgeom.rules.jobserver serve SOCKET PARENT_PID | run ENTRY JOB_JSON")
