"""`headgeom diff` between a run and the same run rebuilt after one edited config key lists
exactly the cells that moved (checked against a cell-by-cell comparison of the CSVs), and
nothing else; two identical runs say so and exit 0. `headgeom audit --claim` audits every cell
a ledger entry reads (a paper-1 table and a PK table)."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tinyrun import copy_run, merge, snakemake, tiny_run

pytestmark = pytest.mark.slow


def _cells(root):
    """{(table, row index, column): cell} of every table CSV but the claims table."""
    out = {}
    for p in sorted((root / "results/tables").glob("*.csv")):
        if p.stem == "claims":
            continue
        with open(p, newline="") as fh:
            for i, r in enumerate(csv.DictReader(fh)):
                out |= {(p.stem, i, c): v for c, v in r.items()}
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory, snakemake_bin, root):
    a = tiny_run(tmp_path_factory, snakemake_bin, root)
    b = copy_run(a, tmp_path_factory.mktemp("diff") / "run")
    cfg = merge(yaml.safe_load((a / "cfg.yaml").read_text()), {"tables": {"strong_threshold": 0.05}})
    (b / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    snakemake(snakemake_bin, root, b)
    return a, b


def _diff(bin_dir, *args):
    return subprocess.run([str(bin_dir / "headgeom"), "diff", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def test_diff_lists_exactly_the_cells_an_edited_key_moved(runs, snakemake_bin):
    a, b = runs
    bin_dir = Path(snakemake_bin).parent
    r = _diff(bin_dir, a, b, "--json", "--fail-on-change")
    assert r.returncode == 1, r.stderr
    res = json.loads(r.stdout)
    # the direct recomputation: the two runs' tables, cell by cell (the rebuilt tables keep their row order)
    ca, cb = _cells(a), _cells(b)
    assert ca.keys() == cb.keys()
    expected = {(t, c, ca[(t, i, c)], cb[(t, i, c)]) + (i,) for (t, i, c) in ca if ca[(t, i, c)] != cb[(t, i, c)]}
    assert expected, "the edit moved no cell: the test would prove nothing"
    got = set()
    for t, d in res["tables"].items():
        assert not d["added"] and not d["removed"] and not d["columns_added"] and not d["columns_removed"]
        for cell in d["cells"]:
            idx = {i for (tt, i, c), v in ca.items() if tt == t and c in cell["row"] and v == cell["row"][c]}
            hits = [i for i in sorted(idx) if all(ca[(t, i, k)] == v for k, v in cell["row"].items())]
            assert len(hits) == 1, (t, cell["row"])
            got.add((t, cell["column"], cell["old"], cell["new"], hits[0]))
    assert got == expected
    # the threshold reruns the paper-1 capacity jobs (they pick heads by it) and no other shard;
    # no verdict moves (the tiny model is in no ledger entry)
    assert res["shards"]["compared"] > 0 and res["ledger"] == []
    assert {s["path"].split("/")[2] for s in res["shards"]["differ"]} <= {"paper1_capacity"}
    assert not res["tables_only"]["A"] and not res["tables_only"]["B"]
    text = _diff(bin_dir, a, b).stdout
    assert f"{len(res['tables'])} changed, {len(expected)} cells moved" in text


def test_identical_runs_exit_0(runs, snakemake_bin):
    a, _ = runs
    r = _diff(Path(snakemake_bin).parent, a, a, "--fail-on-change")
    assert r.returncode == 0 and "identical: no table cell, row, ledger verdict, figure or shard differs" in r.stdout


LEDGER = """
claims:
  p1:
    - {id: tiny.p1.strong, where: Table 2, model: tiny, table: p1_table2_strong_tail, column: strong, value: 2}
  pk:
    - {id: tiny.pk.exceeds, where: Table 8, model: tiny, table: pk_table8_cross_nulls, row: {}, over_rows: true,
       column: exceeds_all, reduce: sum, value: 1}
"""


def test_audit_claim_audits_every_cell_the_entry_reads(runs, snakemake_bin, tmp_path):
    a, _ = runs
    (tmp_path / "ledger.yaml").write_text(LEDGER)
    hg = str(Path(snakemake_bin).parent / "headgeom")
    r = subprocess.run([hg, "audit", "--claim", "tiny.pk.exceeds", "--ledger", str(tmp_path / "ledger.yaml"),
                        "-d", str(a), "--no-tensors"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    with open(a / "results/tables/pk_table8_cross_nulls.csv", newline="") as fh:
        kinds = [row["kind"] for row in csv.DictReader(fh) if row["model"] == "tiny"]
    assert len(kinds) > 1
    for k in kinds:  # one audit command and one audit per row the entry sums
        assert f"--row model=tiny --row kind={k} --column exceeds_all" in r.stdout
    assert r.stdout.count("--- cell ") == len(kinds) and r.stdout.count("Verdict: ") == len(kinds)
    assert f"reads pk_table8_cross_nulls.exceeds_all: {len(kinds)} cell(s), combined by sum" in r.stdout
    r = subprocess.run([hg, "audit", "--claim", "tiny.p1.strong", "--ledger", str(tmp_path / "ledger.yaml"),
                        "-d", str(a)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    assert "paper 2   pipeline 2   verdict: agrees" in r.stdout
    assert "(b) from the tensors" in r.stdout and "MATCH" in r.stdout
    r = subprocess.run([hg, "audit", "--claim", "nope", "--ledger", str(tmp_path / "ledger.yaml"), "-d", str(a)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "no ledger entry 'nope'" in r.stderr
