"""headgeom timings: the per-rule table from a run's Snakemake log and its jobs' timing lines."""

from __future__ import annotations

import subprocess
import sys

import pytest

from headgeom.cli import main
from headgeom.core.errors import TimingsError
from headgeom.commands import timings

RUN_LOG = """\
Building DAG of jobs...
[Wed Dec  2 18:20:15 2026]
localcheckpoint fetch:
    output: results/tensors/m/manifest.json
    log: logs/fetch/m.log
    jobid: 4
    wildcards: model=m
DAG of jobs will be updated after completion.
[Wed Dec  2 18:20:37 2026]
Finished jobid: 4 (Rule: fetch)
1 of 4 steps (25%) done
[Wed Dec  2 18:20:38 2026]
localrule pk_within_layer:
    input: results/tensors/m/manifest.json
    log: logs/pk_within/m/layer0.log
    jobid: 7
[Wed Dec  2 18:20:39 2026]
localrule pk_within_layer:
    log: logs/pk_within/m/layer1.log
    jobid: 8
[Wed Dec  2 18:20:41 2026]
Finished jobid: 7 (Rule: pk_within_layer)
[Wed Dec  2 18:20:43 2026]
Finished jobid: 8 (Rule: pk_within_layer)
[Wed Dec  2 18:20:44 2026]
localrule table_t:
    log: logs/tables/t.log
    jobid: 9
[Wed Dec  2 18:20:45 2026]
Error in rule table_t:
    jobid: 9
"""


def _write(tmp_path):
    (tmp_path / "run.log").write_text(RUN_LOG)
    for rel, text in {
        "logs/fetch/m.log": "fetched\nheadgeom timing: startup_s=0.500 work_s=20.000\n",
        "logs/pk_within/m/layer0.log": "headgeom timing: startup_s=0.250 work_s=1.000\n",
        # the last timing line counts
        "logs/pk_within/m/layer1.log": "headgeom timing: startup_s=9.0 work_s=9.0\nheadgeom timing: startup_s=nan work_s=2.500\n",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)


def test_rule_table_from_a_run_log_and_job_logs(tmp_path):
    _write(tmp_path)
    rows, _ = timings.timings(tmp_path, tmp_path / "run.log")
    by = {r["rule"]: r for r in rows}
    assert [r["rule"] for r in rows] == ["fetch", "pk_within_layer", "total"]  # the failed table_t job is not a row
    # fetch: 18:20:15 -> 18:20:37 = 22 s; work 20 s; start-up 2 s, 0.5 s of it in the process
    assert by["fetch"]["jobs"] == 1 and by["fetch"]["wall_s"] == 22
    assert by["fetch"]["work_s"] == 20 and by["fetch"]["overhead_s"] == 2 and by["fetch"]["startup_s"] == 0.5
    # pk_within_layer: 38 -> 41 (3 s) and 39 -> 43 (4 s), overlapping; works 1 + 2.5; nan start-up counts 0
    assert by["pk_within_layer"]["jobs"] == 2 and by["pk_within_layer"]["wall_s"] == 7 and by["pk_within_layer"]["mean_wall_s"] == 3.5
    assert by["pk_within_layer"]["work_s"] == 3.5 and by["pk_within_layer"]["overhead_s"] == 3.5
    assert by["pk_within_layer"]["startup_s"] == 0.25
    assert by["total"]["jobs"] == 3 and by["total"]["wall_s"] == 29 and by["total"]["overhead_s"] == 5.5


def test_jobs_without_timing_lines_have_no_work_columns(tmp_path):
    _write(tmp_path)
    (tmp_path / "logs/pk_within/m/layer0.log").write_text("no timing here\n")
    (tmp_path / "logs/pk_within/m/layer1.log").unlink()
    rows, _ = timings.timings(tmp_path, tmp_path / "run.log")
    pk = next(r for r in rows if r["rule"] == "pk_within_layer")
    assert pk["timed"] == 0 and pk["overhead_s"] is None
    assert "| pk_within_layer | 2 | 7 | 3.50 | – | – | – | – |" in timings.render(rows, tmp_path / "run.log")


def test_cli_latest_log_and_errors(tmp_path, capsys):
    assert main(["timings", "-d", str(tmp_path)]) == 2
    assert "no Snakemake run log" in capsys.readouterr().err
    _write(tmp_path)
    logdir = tmp_path / ".snakemake" / "log"
    logdir.mkdir(parents=True)
    (logdir / "2026-12-01T000000.000000.snakemake.log").write_text("nothing finished\n")
    (logdir / "2026-12-02T182013.682162.snakemake.log").write_text(RUN_LOG)
    assert main(["timings", "-d", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "2026-12-02T182013" in out and "| fetch | 1 | 22 | 22.00 | 20.0 | 2.0 | 9 | 0.5 |" in out
    assert main(["timings", "-d", str(tmp_path), "--log", str(logdir / "2026-12-01T000000.000000.snakemake.log")]) == 2
    assert "no finished job" in capsys.readouterr().err
    with pytest.raises(TimingsError, match="cannot read"):
        timings.timings(tmp_path, tmp_path / "missing.log")


def test_process_age_is_the_age_of_the_process():
    code = "import time; time.sleep(0.6); from headgeom.commands.timings import process_age; print(process_age())"
    age = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert 0.6 <= age < 5.0
    assert timings.process_age() > 0  # this test process started before the test


def test_to_log_writes_the_timing_line_at_exit_and_none_after_an_error(tmp_path):
    prog = (
        "import sys, time; from types import SimpleNamespace; from headgeom.core.logs import to_log; "
        f"log = to_log(SimpleNamespace(log=[{str(tmp_path / 'ok.log')!r}])); log('working'); time.sleep(0.3)"
    )
    subprocess.run([sys.executable, "-c", prog], check=True)
    lines = (tmp_path / "ok.log").read_text().splitlines()
    assert lines[0] == "working"
    startup, work = timings.job_timing(tmp_path / "ok.log")
    assert 0 < startup < 5 and 0.3 <= work < 5
    bad = prog.replace("ok.log", "bad.log") + "; raise ValueError('boom')"
    assert subprocess.run([sys.executable, "-c", bad]).returncode == 1
    text = (tmp_path / "bad.log").read_text()
    assert text.splitlines()[-1] == "headgeom error: ValueError: boom"
    assert timings.job_timing(tmp_path / "bad.log") is None

