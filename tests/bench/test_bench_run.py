"""bench/run.py (make bench) and its sections (bench/sections/): every section it names resolves to
a function of its module, and the cheapest section runs end to end through the command, writing its
JSON, env.json and summary.md with the section's rows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_every_section_resolves():
    import run as bench_run

    assert tuple(bench_run.SECTIONS) == ("stages", "closure", "pk", "nulls", "null_cross", "null_cross_threads", "fetch",
                                         "capacity", "overhead")
    for name in bench_run.SECTIONS:
        assert callable(bench_run.section(name)), name


def test_unknown_section_is_refused(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "run.py"), "--only", "closure,nope", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "unknown section(s) ['nope']" in r.stderr


@pytest.mark.slow
def test_the_fetch_section_through_the_command(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "run.py"), "--only", "fetch", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    fetch = json.loads((tmp_path / "fetch.json").read_text())
    # the loopback hub sends the needed tensors' bytes and a little more (headers, index), never less
    assert 1.0 <= fetch["ratio_transferred_over_needed"] < 1.1
    assert fetch["bytes_transferred"] < fetch["checkpoint_bytes"]
    assert json.loads((tmp_path / "env.json").read_text())["env"]["OPENBLAS_NUM_THREADS"] == "1"
    summary = (tmp_path / "summary.md").read_text()
    assert summary.startswith("# headgeom bench") and "| fetch, loopback hub | bytes transferred / bytes of the needed tensors |" in summary
    assert summary in r.stdout  # printed as written
