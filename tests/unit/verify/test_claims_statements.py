"""The papers' quantified statements without digits (config/paper_numbers.yaml `statements:`): each
is printed where the inventory says, and is either checked by ledger rows (a qualitative entry with
a predicate over a table, or numeric entries whose agreement is the statement) or given a reason
from the fixed list; the coverage line counts them apart from the numbers."""

from __future__ import annotations

import csv
import hashlib

import pytest

from headgeom.publish.claims import AGREES, DIFFERS, NOT_RUN, build_rows, load_ledger
from headgeom.verify.claims_coverage import (STATEMENT_REASONS, coverage, coverage_line, inventory_problems,
                                             inventory_statements, load_inventory, statement_problems, statement_reason)
from test_claims_coverage import PAPERS, ROOT, _shipped, needs_papers


@needs_papers
def test_every_statement_is_printed_and_checked_or_reasoned():
    _, rows, inv = _shipped()
    assert statement_problems(inv, {r["id"] for r in rows}, PAPERS) == []
    sts = inventory_statements(inv)
    assert len(sts) >= 40 and {s["paper"] for s in sts} == {"p1", "pk"}
    assert sum(1 for s in sts if s["claims"]) >= 25


def test_every_qualitative_entry_checks_a_statement():
    ledger, rows, inv = _shipped()
    claimed = {c for s in inventory_statements(inv) for c in s["claims"]}
    qual = [e for e in ledger if e.get("kind") == "qualitative"]
    qual_rows = {e["id"] + (f".{c}" if "values" in e else "") for e in qual for c in (e.get("values") or [None])}
    assert len(qual) >= 12 and qual_rows <= claimed
    # a qualitative entry reads a table (a statement without one has a reason instead)
    assert all(e.get("table") for e in ledger if e.get("kind") == "qualitative")


def test_the_issues_statements_are_entries():
    """Haar differences in all nine models, every lineage's gaps, no gap at initialization,
    nonradial responses in every family, leakage, five band families, the below-d/D layer set."""
    ledger = {e["id"]: e for e in load_ledger(ROOT / "config/claims.yaml")}
    for cid, column, value in (("p1.q.haar_models", "diff_h", "all > 0"), ("p1.q.final_half", "c_over_p", "all < 0.5"),
                               ("p1.q.final_growth", "growth_diff", "all > 0"), ("p1.q.init_no_gap", "e_ci_zero", "all true"),
                               ("p1.q.nonradial", "nonradial_diff", "all > 0"), ("p1.q.leakage", "leak_share_red", "> 0.5"),
                               ("p1.q.band_families", "law_pairs", "exactly 5 of 7 ≥ 10"),
                               ("pk.s55.qwen7b.V_low_ratio.set", "layer", "{0, 7, 9, 18, 19, 21}")):
        assert (ledger[cid]["column"], ledger[cid]["value"]) == (column, value), cid


@pytest.mark.parametrize("reason, category", [
    ("theory", "theory"),
    ("no criterion stated (no width for 'approximately zero')", "no criterion stated"),
    ("interpretation of other entries (p1.cap.gap_ratio)", "interpretation of other entries"),
    ("because we said so", None),
    ("", None),
    (None, None),
])
def test_statement_reason_category(reason, category):
    assert statement_reason(reason) == category
    assert category is None or category in STATEMENT_REASONS


PAPER = "All heads agree in every layer. Most pairs are weak.\n"


def _planted(tmp_path, statements):
    papers = tmp_path / "papers"
    papers.mkdir(exist_ok=True)
    (papers / "p.txt").write_text(PAPER)
    sha = hashlib.sha256(PAPER.encode()).hexdigest()
    (tmp_path / "inv.yaml").write_text(f"papers: {{p1: {{files: {{p.txt: {sha}}}}}}}\nnumbers: {{}}\nstatements:\n  p1:\n{statements}")
    (tmp_path / "claims.yaml").write_text("""
claims:
  p1:
    - {id: q.layers, where: x, kind: qualitative, model: m, table: t, row: {model: "{model}"}, column: pos, reduce: each, value: "all > 0"}
""")
    rows, _ = build_rows(load_ledger(tmp_path / "claims.yaml"), tmp_path, ["m"])
    return load_inventory(tmp_path / "inv.yaml"), rows, papers


def test_a_statement_without_rows_or_a_listed_reason_is_a_problem(tmp_path):
    good = ('    - {line: 1, text: "in every layer", claims: [q.layers]}\n'
            '    - {line: 1, text: "Most pairs are weak", reason: "no criterion stated (weak)"}\n')
    inv, rows, papers = _planted(tmp_path, good)
    assert inventory_problems(inv, {r["id"]: r["paper_value"] for r in rows}, papers) == []
    for bad, wanted in (('    - {line: 1, text: "Most pairs are weak"}\n', "neither ledger rows nor a reason"),
                        ('    - {line: 1, text: "Most pairs are weak", reason: "obvious"}\n', "neither ledger rows nor a reason"),
                        ('    - {line: 1, text: "Most pairs are strong", reason: "theory"}\n', "is not printed there"),
                        ('    - {line: 1, text: "in every layer", claims: [q.gone]}\n', "not a ledger row")):
        inv, rows, papers = _planted(tmp_path, good + bad)
        probs = inventory_problems(inv, {r["id"]: r["paper_value"] for r in rows}, papers)
        assert len(probs) == 1 and wanted in probs[0], (bad, probs)
    # a qualitative entry no statement points to is reported like a number nobody prints
    inv, rows, papers = _planted(tmp_path, '    - {line: 1, text: "Most pairs are weak", reason: "theory"}\n')
    assert any("'q.layers'" in p and "no printed number or statement" in p
               for p in inventory_problems(inv, {r["id"]: r["paper_value"] for r in rows}, papers))


def test_coverage_line_counts_statements_apart(tmp_path):
    stm = ('    - {line: 1, text: "in every layer", claims: [q.layers]}\n'
           '    - {line: 1, text: "Most pairs are weak", reason: "no criterion stated"}\n'
           '    - {line: 1, text: "All heads agree"}\n')

    def line_for(table_rows, run):
        with open(tmp_path / "t.csv", "w", newline="") as fh:
            csv.writer(fh).writerows([["model", "pos"]] + table_rows)
        inv = _planted(tmp_path, stm)[0]
        rows, _ = build_rows(load_ledger(tmp_path / "claims.yaml"), tmp_path, run)
        return rows[0]["status"], coverage_line(coverage(rows, inv))

    status, line = line_for([["m", "0.3"]], ["m"])
    assert status == AGREES
    assert line.endswith("; 3 qualitative statements / 1 checked by entries (1 agree / 0 differ / 0 not run / 0 other) "
                         "/ 1 with a reason / 1 without either"), line
    assert line_for([["m", "-0.3"]], ["m"])[0] == DIFFERS
    assert "(0 agree / 1 differ / 0 not run / 0 other)" in line_for([["m", "-0.3"]], ["m"])[1]
    status, line = line_for([["z", "0.3"]], [])
    assert status == NOT_RUN and "(0 agree / 0 differ / 1 not run / 0 other)" in line
