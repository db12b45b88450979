"""The end-of-run summary (results/summary.md, headgeom.publish.summary) on the shared tiny run."""

from __future__ import annotations

import csv
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tinyrun import copy_run, snakemake, tiny_run


def _cell(run: Path, table: str, model: str, column: str) -> str:
    with open(run / "results/tables" / f"{table}.csv", newline="") as fh:
        return next(r for r in csv.DictReader(fh) if r["model"] == model)[column]


def _rows(md: str) -> dict[str, tuple[str, str]]:
    """{label: (value, source)} of the summary's headline tables."""
    out = {}
    for m in re.finditer(r"^\| (.+?) \| (.+?) \| `(.+?)` \|$", md, re.M):
        out[m.group(1)] = (m.group(2), m.group(3))
    return out


@pytest.mark.slow
def test_summary_shows_each_headline_cell_of_its_table(tmp_path_factory, snakemake_bin, root):
    run = tiny_run(tmp_path_factory, snakemake_bin, root)
    md = (run / "results/summary.md").read_text()
    assert md.startswith("# headgeom run summary") and "## tiny" in md
    rows = _rows(md)
    checked = 0
    for label, (value, source) in rows.items():
        table, _, column = source.partition(":")
        if value == "not built":
            assert not (run / "results/tables" / f"{table}.csv").exists(), label
            continue
        if label.startswith("null verdict"):
            comparison = label.removeprefix("null verdict, ")
            with open(run / "results/tables" / f"{table}.csv", newline="") as fh:
                r = next(r for r in csv.DictReader(fh) if r["model"] == "tiny" and r["comparison"] == comparison)
            assert value == f"{r['exceeds_all']} of {r['conditions']} conditions above all {r['samples']} samples"
        else:
            want = float(_cell(run, table, "tiny", column))
            got = float(value)
            assert math.isclose(got, want, rel_tol=5e-4) or (math.isnan(want) and math.isnan(got)), (label, got, want)
        checked += 1
    # the planted heads: two strong heads, as the closure table says
    assert rows["strong heads (closure P above the threshold)"][0] == "2"
    assert checked >= 10, rows
    claims = re.search(r"(\d+) ledger entries", md)
    with open(run / "results/tables/claims.csv", newline="") as fh:
        assert claims and int(claims.group(1)) == sum(1 for _ in csv.DictReader(fh))


@pytest.mark.slow
def test_summary_is_printed_when_a_run_rebuilds_it_and_not_otherwise(tmp_path_factory, tmp_path, snakemake_bin, root):
    run = copy_run(tiny_run(tmp_path_factory, snakemake_bin, root), tmp_path / "run")
    (run / "results/summary.md").unlink()
    r = snakemake(snakemake_bin, root, run)
    assert "# headgeom run summary" in r.stdout + r.stderr
    assert (run / "results/summary.md").is_file()
    again = snakemake(snakemake_bin, root, run)  # nothing to do: no stale summary on the console
    assert "# headgeom run summary" not in again.stdout + again.stderr


@pytest.mark.slow
def test_summary_command_prints_the_same_summary(tmp_path_factory, snakemake_bin, root):
    run = tiny_run(tmp_path_factory, snakemake_bin, root)
    out = subprocess.run([str(Path(sys.executable).parent / "headgeom"), "summary", "-d", str(run)],
                         capture_output=True, text=True, check=True).stdout
    assert out.rstrip("\n") == (run / "results/summary.md").read_text().rstrip("\n")
