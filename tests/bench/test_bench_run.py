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


def _env():
    return {"numpy": "x", "scipy": "y", "env": {"OMP_NUM_THREADS": None, "OPENBLAS_NUM_THREADS": "1"},
            "affinity_cpus": 2, "loadavg_1m": 0.0}


def _e2e(run_wall, paper_wall, paper_rules_wall):
    rules = [{"rule": "total", "jobs": 387, "wall_s": paper_rules_wall, "timed": 386, "work_s": 0.0,
              "startup_s": 0.0, "timed_wall_s": paper_rules_wall, "overhead_s": 0.0}]
    return {"cores": 2, "jobs": 302, "returncode": 0, "wall_s": run_wall,
            "paper": {"returncode": 0, "wall_s": paper_wall, "jobs": 387, "rules": rules}}


def _row(summary, starts):
    return next(line for line in summary.splitlines() if line.startswith(starts))


@pytest.mark.parametrize(("paper_wall", "verdict"), [(1171.0, "FAIL"), (600.0, "PASS"), (599.0, "PASS"), (601.0, "FAIL")])
def test_the_paper_run_is_judged_against_600_s(paper_wall, verdict):
    from sections.summary import summarize

    s = summarize({"e2e": _e2e(185.0, paper_wall, 2273.0)}, _env())
    row = _row(s, "| end to end | `--configfile config/paper.yaml` after it")
    assert f"| {paper_wall:.0f} s | ≤ 600 s | {verdict} |" in row, row
    # the floor no schedule of the same jobs beats on these cores: their summed wall over the cores
    floor = _row(s, "| end to end | the same run's summed job wall time / 2 cores")
    assert "| 1136 s | – |" in floor, floor
    assert "| 185 s | ≤ 300 s | PASS |" in _row(s, "| end to end | cold `make run` wall time")


def test_the_share_a_stage_would_reach_with_one_part_at_the_rate():
    from sections.nulls import share_with_part_at_rate

    # 100 FLOP, 50 of them at 100 FLOP/s (0.5 s) beside 1 s of the rest: 100 FLOP in 1.5 s, 2/3 of the rate
    assert share_with_part_at_rate(100.0, 50.0, 1.0, 100.0) == pytest.approx(2 / 3, rel=1e-15)
    # everything at the rate and nothing else: the rate itself
    assert share_with_part_at_rate(100.0, 100.0, 0.0, 100.0) == pytest.approx(1.0, rel=1e-15)
