"""Session fixture: a real one-node SLURM cluster (slurmctld, slurmd, slurmdbd + MariaDB).

``.ci/slurm-up.sh`` installs what is missing and starts the daemons; if it cannot, the
requesting test fails with the script's output (there is no skip: a test that needs the
cluster and does not get it is a failure). At the end of the session ``.ci/slurm-down.sh``
stops the daemons, but only if this session started any of them, so a cluster that a
developer brought up by hand stays up. Set HEADGEOM_SLURM_KEEP=1 to always keep it.

Import the fixture into a test module with ``from slurm_cluster import slurm_cluster``.
"""

from __future__ import annotations

import csv
import io
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UP = REPO / ".ci" / "slurm-up.sh"
DOWN = REPO / ".ci" / "slurm-down.sh"
SNAKEMAKE = REPO / ".venv" / "bin" / "snakemake"
UP_TIMEOUT_S = 600  # a fresh machine installs ~200 MB of packages first


@dataclass
class SlurmCluster:
    state_dir: Path
    up_output: str
    started_here: bool
    up_seconds: float

    def sacct(self, *args: str) -> list[dict[str, str]]:
        """Run ``sacct -X -P`` with ``args`` and return one dict per job (allocation)."""
        fmt = "JobID,JobName,State,ExitCode,Partition,Account,Comment"
        proc = subprocess.run(
            ["sacct", "-X", "-P", "--format", fmt, *args],
            capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60,
        )
        if proc.returncode != 0:
            raise AssertionError(f"sacct {' '.join(args)} failed:\n{proc.stderr}")
        return list(csv.DictReader(io.StringIO(proc.stdout), delimiter="|"))

    def jobs_of_run(self, run_id: str, expect: int | None = None,
                    wait_s: float = 30.0) -> list[dict[str, str]]:
        """Jobs whose name is the Snakemake SLURM run ID (the plugin names jobs that way).

        slurmdbd records finished jobs asynchronously; poll briefly until ``expect`` jobs
        are all in a final state.
        """
        deadline = time.monotonic() + wait_s
        while True:
            jobs = self.sacct("--name", run_id, "--starttime", "now-1days")
            done = [j for j in jobs if j["State"] not in ("PENDING", "RUNNING", "REQUEUED")]
            if (expect is None or len(done) >= expect) or time.monotonic() > deadline:
                return jobs
            time.sleep(1)


def run_id_from_log(text: str) -> str:
    """The executor prints ``SLURM run ID: <uuid>`` once per Snakemake invocation."""
    m = re.search(r"SLURM run ID: (\S+)", text)
    if not m:
        raise AssertionError("no 'SLURM run ID' in Snakemake output: did it use the slurm executor?\n"
                             + text[-4000:])
    return m.group(1)


def _run_script(script: Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(script)], cwd=REPO, capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=timeout,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )


@pytest.fixture(scope="session")
def slurm_cluster():
    if os.geteuid() != 0:
        pytest.fail(".ci/slurm-up.sh must run as root (it installs packages and starts "
                    "system daemons); run the SLURM tests as root, as CI does", pytrace=False)
    t0 = time.monotonic()
    try:
        proc = _run_script(UP, UP_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        pytest.fail(f".ci/slurm-up.sh did not finish within {UP_TIMEOUT_S}s:\n{out}", pytrace=False)
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        # Stop whatever it managed to start before failing.
        _run_script(DOWN, 120)
        pytest.fail(f".ci/slurm-up.sh failed (exit {proc.returncode}):\n{output}", pytrace=False)
    cluster = SlurmCluster(
        state_dir=Path(os.environ.get("HEADGEOM_SLURM_STATE", "/tmp/headgeom-slurm")),
        up_output=output,
        started_here=bool(re.search(r"\] started \w+ \(pid", output)),
        up_seconds=time.monotonic() - t0,
    )
    print(f"\n[slurm_cluster] up in {cluster.up_seconds:.1f}s\n{output}")
    yield cluster
    if cluster.started_here and os.environ.get("HEADGEOM_SLURM_KEEP") != "1":
        down = _run_script(DOWN, 120)
        print(down.stdout + down.stderr)
        assert down.returncode == 0, f".ci/slurm-down.sh failed:\n{down.stdout}{down.stderr}"


def run_snakemake(args: list[str], cwd: Path, limit_s: int) -> subprocess.CompletedProcess:
    """``timeout -k 15 <limit> .venv/bin/snakemake ...`` with no stdin, CI-style.

    The kill-after matters: a Snakemake stuck polling SLURM ignores SIGTERM.
    """
    env = {**os.environ, "CI": os.environ.get("CI", "true")}
    # A test run from inside a SLURM job must not leak that job's variables into sbatch.
    env = {k: v for k, v in env.items() if not k.startswith("SLURM_")}
    cmd = ["timeout", "-k", "15", str(limit_s), str(SNAKEMAKE), *args]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=env, timeout=limit_s + 60)
    if proc.returncode in (124, 137):
        raise AssertionError(
            f"snakemake exceeded {limit_s}s and was killed (exit {proc.returncode}); "
            f"jobs in queue:\n{subprocess.run(['squeue'], capture_output=True, text=True).stdout}\n"
            f"--- snakemake output (tail) ---\n{(proc.stdout + proc.stderr)[-6000:]}")
    return proc
