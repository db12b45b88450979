"""The local run's job server (headgeom.rules.jobserver) and the per-layer jobs' command
(headgeom.rules.jobclient): a job handed over runs in a forked child with the command's directory,
environment, BLAS threads, stdout and values; its failure or exit status is the command's; killing the
command kills the job; without a server the command runs the job in its own process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from headgeom.rules import jobclient, jobserver, scripts

HELPERS = Path(__file__).resolve().parents[2] / "helpers"


PLUGIN = {"PYTHONPATH": os.pathsep.join(filter(None, [str(HELPERS), os.environ.get("PYTHONPATH")])),
          "HEADGEOM_PLUGINS": "jobserver_entries"}  # the test entries, registered as a plugin's


@pytest.fixture(scope="module")
def server():
    """A server started as the workflow starts it, with the test entries."""
    with pytest.MonkeyPatch.context() as mp:
        for k, v in PLUGIN.items():
            mp.setenv(k, v)
        try:
            path = jobserver.start()
            assert path and os.path.exists(path)
            yield path
        finally:
            jobserver.stop()


def spec(out: Path, **params) -> str:
    return json.dumps({"input": jobclient.named({"manifest": "m.json"}), "output": jobclient.named({"o": str(out)}),
                       "wildcards": jobclient.named({"model": "tiny", "layer": "3"}),
                       "params": jobclient.named(params)})


def command(entry: str, out: Path, log: Path, server: str | None, cwd: Path, threads: int = 2):
    env = dict(os.environ, JOBSERVER_TEST_MARKER="from the command", OPENBLAS_NUM_THREADS=str(threads),
               OMP_NUM_THREADS=str(threads))
    env.pop(jobclient.ENV, None)
    if server:
        env[jobclient.ENV] = server
    env.update(PLUGIN)
    argv = [sys.executable, "-m", "headgeom.rules.jobclient", entry,
            spec(out, samples=[0, 1], kind="Q"), str(log), "2", "700", "5", str(threads), "a_rule"]
    return subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_job_runs_forked_from_the_server_with_the_commands_directory_environment_and_values(server, tmp_path):
    out = tmp_path / "seen.json"
    p = command("report", out, tmp_path / "job.log", server, tmp_path)
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 0, stderr
    seen = json.loads(out.read_text())
    assert seen["ppid"] != p.pid and seen["pid"] != p.pid  # not the command's process ...
    assert seen["numpy_loaded_before"]  # ... but a child of the server, which had imported numpy
    assert seen["cwd"] == str(tmp_path)
    assert seen["marker"] == "from the command"
    assert set(seen["blas_threads"]) == {2}  # every BLAS (numpy's, scipy's): the job's threads, though the server runs on one
    assert seen["params"] == {"samples": [0, 1], "kind": "Q"}
    assert seen["input"] == {"manifest": "m.json"} and seen["wildcards"] == {"model": "tiny", "layer": "3"}
    assert seen["resources"] == {"attempt": 2, "mem_mb": 700, "runtime": 5}
    assert (seen["threads"], seen["rule"], seen["log"]) == (2, "a_rule", str(tmp_path / "job.log"))
    assert "stdout of the job" in stdout  # the command's own stdout


def test_without_a_server_the_command_runs_the_job_in_its_own_process(tmp_path):
    out = tmp_path / "seen.json"
    p = command("report", out, tmp_path / "job.log", None, tmp_path, threads=1)
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 0, stderr
    seen = json.loads(out.read_text())
    assert seen["pid"] == p.pid  # the command replaced itself by the job's interpreter
    assert seen["params"] == {"samples": [0, 1], "kind": "Q"} and set(seen["blas_threads"]) == {1}
    assert "stdout of the job" in stdout


@pytest.mark.parametrize("entry, rc", [("fails", 1), ("exits_3", 3)])
def test_a_failing_job_fails_its_command_and_ends_its_log_with_the_error(server, tmp_path, entry, rc):
    log = tmp_path / "job.log"
    p = command(entry, tmp_path / "out", log, server, tmp_path)
    p.communicate(timeout=60)
    assert p.returncode == rc
    if entry == "fails":
        assert log.read_text().strip().splitlines()[-1] == "headgeom error: ValueError: boom on purpose"


def test_killing_the_command_kills_its_job(server, tmp_path):
    out = tmp_path / "pid"
    p = command("sleeps", out, tmp_path / "job.log", server, tmp_path)
    deadline = time.monotonic() + 30
    while not (out.exists() and out.read_text()):
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.05)
    job = int(out.read_text())
    os.kill(job, 0)  # running
    p.send_signal(signal.SIGTERM)  # as Snakemake cancels a job
    p.wait(10)
    deadline = time.monotonic() + 10
    while _alive(job):
        assert time.monotonic() < deadline, "the job outlived its command"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie (ended, not yet reaped) is not running
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_the_server_ends_with_the_process_that_started_it(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    path = str(tmp_path / "socket")
    srv = subprocess.Popen([sys.executable, "-m", "headgeom.rules.jobserver", "serve", path, str(parent.pid)])
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(path):
            assert time.monotonic() < deadline and srv.poll() is None
            time.sleep(0.05)
        parent.kill()
        parent.wait()
        srv.wait(10)
        assert srv.returncode == 0
    finally:
        for proc in (parent, srv):
            if proc.poll() is None:
                proc.kill()


def test_a_job_whose_values_are_not_plain_data_runs_in_the_scripts_process(server, tmp_path):
    class Smk:  # a script's snakemake object with a value JSON does not take
        def __init__(self):
            for part in jobserver.PARTS:
                setattr(self, part, jobserver.Named([], {}))
            self.output = jobserver.Named([str(tmp_path / "seen.json")], {})
            self.params = jobserver.Named([object()], {"x": object()})
            self.threads, self.rule, self.config = 1, "r", {}

    with pytest.raises(TypeError):
        jobserver.snapshot(Smk())
    calls = []
    scripts.ENTRIES["jobserver_test_here"] = lambda smk: calls.append(os.getpid())
    try:
        jobserver.run_script("jobserver_test_here", Smk())
    finally:
        del scripts.ENTRIES["jobserver_test_here"]
    assert calls == [os.getpid()]


def test_an_unknown_entry_is_a_config_error():
    from headgeom.core.errors import ConfigError

    with pytest.raises(ConfigError, match="no job entry 'nope'"):
        scripts.entry_function("nope")


class _Dag:
    def __init__(self, n):
        self.n = n

    def needrun_jobs(self):
        return iter(range(self.n))


class _Deploy:
    def __init__(self, methods):
        self.deployment_method = methods


class _Workflow:
    def __init__(self, n=10, main=True, local=True, methods=frozenset()):
        self.dag, self.is_main_process, self.local_exec = _Dag(n), main, local
        self.deployment_settings = _Deploy(methods)


@pytest.mark.parametrize("wf, off, want", [
    (_Workflow(), "", True),
    (_Workflow(n=jobserver.MIN_JOBS - 1), "", False),  # a few jobs: the server's imports would cost more
    (_Workflow(main=False), "", False),  # a cluster job's own Snakemake
    (_Workflow(local=False), "", False),  # a cluster run: its jobs run elsewhere
    (_Workflow(methods={"conda"}), "", False),  # its jobs run another interpreter
    (_Workflow(), "1", False),
    (_Workflow(), "0", True),
])
def test_which_runs_start_a_server(monkeypatch, wf, off, want):
    monkeypatch.setenv(jobclient.OFF, off)
    assert jobserver.wanted(wf) is want


def test_the_per_layer_command_is_one_text_for_every_job_and_install():
    """Snakemake formats a ``shell:`` when the job runs, after jobs.smk's loop has ended: the command is one
    string for every job, its values filled in by Snakemake (a job's name in it would be the last job's);
    and it reruns a rule whose command text changed, so the text names no path (a moved checkout or venv
    would rerun every job)."""
    from headgeom.rules.jobs import job_command
    from headgeom.schedule.families import JOBS

    cmd = job_command(_Workflow())
    assert "{params.job}" in cmd and "{params.spec:q}" in cmd
    assert not any(name in cmd for name in JOBS)
    # and no path of this install: Snakemake reruns a rule whose command text changed
    assert sys.executable not in cmd and "/" not in cmd and "HEADGEOM_PYTHON" in cmd
