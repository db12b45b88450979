"""Coverage of the claims ledger: the inventory of the papers' printed numbers
(config/paper_numbers.yaml), its checks against the paper files and the ledger, the numeric-token
audit, the coverage line of `headgeom claims`, and the activation stage's ledger entries."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from headgeom.publish.claim_forms import reduce_values
from headgeom.publish.claims import build_rows, load_ledger
from headgeom.outputs import OUTPUTS
from headgeom.verify.claims_coverage import (coverage, coverage_line, inventory_numbers, inventory_problems, load_inventory,
                                      numbers_in, token_audit)
from headgeom.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[3]
# the paper texts ship in docs/papers (sha256 recorded in the inventory), or where HEADGEOM_PAPERS says
PAPERS = Path(os.environ.get("HEADGEOM_PAPERS", ROOT / "docs" / "papers"))
needs_papers = pytest.mark.skipif(not (PAPERS / "read-write-spaces-pk-ja.txt").exists(),
                                  reason=f"the paper texts are not at {PAPERS} (set HEADGEOM_PAPERS)")


def _shipped():
    ledger = load_ledger(ROOT / "config/claims.yaml")
    rows, _ = build_rows(ledger, ROOT / "no-such-dir", [])
    return ledger, rows, load_inventory(ROOT / "config/paper_numbers.yaml")


# ------------------------------------------------------------------ the shipped inventory and ledger


def test_every_ledger_row_has_a_printed_number_and_back():
    ledger, rows, inv = _shipped()
    assert inventory_problems(inv, {r["id"]: r["paper_value"] for r in rows}) == []
    c = coverage(rows, inv)
    assert c["unlisted"] == 0 and c["numbers"] == len(inventory_numbers(inv)) > 700
    # activation numbers: one set of entries, each reading an activation-stage table, except the
    # run's setup (windows, tokens), which is config and says so
    act = [e for e in ledger if ".act." in e["id"]]
    act_tables = {o.name for o in OUTPUTS.values() if o.kind == "table" and o.shard_models == "activation"}
    assert len(act) > 40 and not [e for e in act if "issue 12" in str(e.get("reason", ""))]
    untabled = [e["id"] for e in act if e.get("table") not in act_tables and not e.get("derive")]
    assert untabled == ["pk.act.setup", "p1.act.setup"] and all("setup" in ledger_e["reason"] for ledger_e in act
                                                                  if ledger_e["id"] in untabled)
    assert [e["id"] for e in act if e.get("derive")] == ["pk.act.setup.tokens"]  # 8 windows × 256 tokens, derived


@needs_papers
def test_inventory_is_printed_in_the_papers():
    _, rows, inv = _shipped()
    assert inventory_problems(inv, {r["id"]: r["paper_value"] for r in rows}, PAPERS) == []


@needs_papers
def test_every_numeric_token_in_the_papers_is_accounted_for():
    _, _, inv = _shipped()
    a = token_audit(inv, PAPERS)
    assert a["unaccounted"] == []
    assert a["claimed"] + a["skipped"] + sum(a["rules"].values()) == a["tokens"] > 1800
    # the inventoried numbers cover most tokens outside the reference list and the names
    assert a["claimed"] > 800


def test_coverage_line_of_the_shipped_ledger(capsys):
    ledger, rows, inv = _shipped()
    assert cli_main(["claims", "-d", str(ROOT / "no-such-dir"), "--models"]) == 0
    out = capsys.readouterr().out.strip().splitlines()[-1]
    c = coverage(rows, inv)
    assert out == coverage_line(c)
    # with no model run, only the numbers derived from the settings (derive:) are judged, and they agree
    derived = [e["id"] for e in ledger if e.get("derive")]
    assert len(derived) == 4
    assert out.startswith(f"coverage: {len(inventory_numbers(inv))} numbers in the papers / {len(rows)} entries / "
                          f"{len(derived)} agrees / 0 differs / ")
    assert c["not run"] + c["not computed"] + len(derived) == len(rows) and "without an entry" not in out
    assert c["not computed"] == 20


# ------------------------------------------------------------------ the checks, on a planted paper

PAPER = ("Intro (Smith et al., 2021): the tail holds 3.98–8.00% of heads, 67 per model.\n"
         "Table: 1,234 pairs; median $1.04\\times 10^{-4}$; Section 5.2 has $T^{2}$ and 7 theory 3.\n")
LEDGER = """
claims:
  p1:
    - {id: a.pct, where: x, model: m, value: "3.98 – 8.00", reason: r}
    - {id: a.n, where: x, model: m, value: 67, reason: r}
    - {id: a.pairs, where: x, model: m, values: {pairs: 1234, median: 1.04e-4}, reason: r}
"""


def _planted(tmp_path, numbers, sha=None, extra=""):
    papers = tmp_path / "papers"
    papers.mkdir(exist_ok=True)
    (papers / "p.txt").write_text(PAPER)
    sha = sha or hashlib.sha256(PAPER.encode()).hexdigest()
    (tmp_path / "inv.yaml").write_text(f"papers: {{p1: {{files: {{p.txt: {sha}}}}}}}\nnumbers:\n  p1:\n{numbers}{extra}")
    (tmp_path / "claims.yaml").write_text(LEDGER)
    rows, _ = build_rows(load_ledger(tmp_path / "claims.yaml"), tmp_path / "none", [])
    return load_inventory(tmp_path / "inv.yaml"), {r["id"]: r["paper_value"] for r in rows}, papers


GOOD = """    - {line: 1, numbers: [["3.98–8.00%", a.pct], ["67", a.n]]}
    - {line: 2, numbers: [["1,234", a.pairs.pairs], ["1.04\\\\times 10^{-4}", a.pairs.median]], skip: [["7 theory", "theory"]], skip_rest: "theory"}
"""


def test_planted_inventory_is_clean(tmp_path):
    inv, rows, papers = _planted(tmp_path, GOOD)
    assert inventory_problems(inv, rows, papers) == []
    a = token_audit(inv, papers)
    assert a["unaccounted"] == [] and a["claimed"] == 5 and a["skipped"] == 1
    assert a["rules"]["citation year"] == 1 and a["rules"]["theory"] == 1  # "3" by skip_rest
    assert a["rules"]["section, table, figure, equation or proposition number"] == 1


@pytest.mark.parametrize("numbers, extra, sha, wanted", [
    # a number not printed on that line
    ("""    - {line: 1, numbers: [["3.98–8.00%", a.pct], ["68", a.n]]}\n""", "", None, "'68' is not printed there"),
    # printed, but out of order
    ("""    - {line: 1, numbers: [["67", a.n], ["3.98–8.00%", a.pct]]}\n""", "", None, "is not printed there"),
    # a piece of a number is not the number: "3.98–8.0" cuts 8.00 (and 67 inside 167 would not count)
    ("""    - {line: 1, numbers: [["3.98–8.0", a.pct], ["67", a.n]]}\n""", "", None, "'3.98–8.0' is not printed there"),
    # points to no ledger row
    ("""    - {line: 1, numbers: [["3.98–8.00%", a.pct], ["67", a.nn]]}\n""", "", None, "not a ledger row"),
    # the printed value is not the ledger's
    ("""    - {line: 1, numbers: [["3.98–8.00%", a.n], ["67", a.pct]]}\n""", "", None, "is not the ledger's value"),
    # a ledger row no printed number claims
    ("""    - {line: 1, numbers: [["3.98–8.00%", a.pct], ["67", a.n]]}\n""", "", None, "'a.pairs.pairs': no printed number"),
    # the paper file changed since it was read
    (GOOD, "", "0" * 64, "is not the one the inventory was read from"),
])
def test_inventory_problems_are_found(tmp_path, numbers, extra, sha, wanted):
    inv, rows, papers = _planted(tmp_path, numbers, sha, extra)
    probs = inventory_problems(inv, rows, papers)
    assert any(wanted in p for p in probs), probs


def test_an_uninventoried_number_is_unaccounted(tmp_path):
    inv, rows, papers = _planted(tmp_path, """    - {line: 1, numbers: [["3.98–8.00%", a.pct]]}\n""")
    a = token_audit(inv, papers)
    assert any("'67'" in u for u in a["unaccounted"]) and any("'1,234'" in u for u in a["unaccounted"])


def test_a_note_admits_a_different_form(tmp_path):
    numbers = GOOD.replace('["67", a.n]', '["67", a.pct]')
    inv, rows, papers = _planted(tmp_path, numbers)
    assert any("'67'" in p for p in inventory_problems(inv, rows, papers))
    inv, rows, papers = _planted(tmp_path, numbers.replace('["67", a.pct]', '["67", [a.pct, a.n], "67 heads is 3.98%"]'))
    assert inventory_problems(inv, rows, papers) == []


def test_numbers_in_reads_the_papers_forms():
    assert numbers_in("1.04\\times 10^{-4}") == [1.04e-4]
    assert numbers_in("$10^{-12}$") == [1e-12] and numbers_in("1e-6") == [1e-6]
    assert numbers_in("7,205/7,304") == [7205.0, 7304.0] and numbers_in("0.015 - 0.717") == [0.015, 0.717]
    assert numbers_in("1, 234") == [1.0, 234.0]


# ------------------------------------------------------------------ the coverage line


def test_coverage_line_counts_statuses(tmp_path, capsys):
    tables = tmp_path / "results" / "tables"
    tables.mkdir(parents=True)
    (tables / "pk_table3_models.csv").write_text("model,D,d,layers\ntiny,48,12,2\n")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "claims.yaml").write_text("""
claims:
  pk:
    - {id: ok, where: T3, model: tiny, table: pk_table3_models, values: {D: 48, d: 12}}
    - {id: bad, where: T3, model: tiny, table: pk_table3_models, column: layers, value: 3}
    - {id: far, where: T3, model: big, table: pk_table3_models, column: D, value: 4096}
    - {id: nc, where: T3, model: tiny, value: 0.5, reason: "not computed: why"}
""")
    (tmp_path / "config" / "paper_numbers.yaml").write_text("""
papers: {pk: {files: {p.txt: x}}}
numbers:
  pk:
    - {line: 1, numbers: [["48", ok.D], ["12", ok.d], ["3", bad], ["4096", far], ["0.5", nc], ["0.5", nc], ["9", gone]]}
""")
    assert cli_main(["claims", "--ledger", str(tmp_path / "config/claims.yaml"), "-d", str(tmp_path), "--models", "tiny"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line == ("coverage: 7 numbers in the papers / 5 entries / 2 agrees / 1 differs / 1 not run / 1 not computed"
                    " / 1 paper numbers without an entry")
    # csv: the table alone on stdout, the line on stderr
    assert cli_main(["claims", "--ledger", str(tmp_path / "config/claims.yaml"), "-d", str(tmp_path), "--models", "tiny",
                     "--format", "csv"]) == 0
    cap = capsys.readouterr()
    assert "coverage:" not in cap.out and cap.err.strip() == line


# ------------------------------------------------------------------ the activation ledger


def test_sumden_and_values_without_a_table(tmp_path):
    assert reduce_values(["5/7", "1/3"], "sumden") == (10.0, "10")
    assert reduce_values(["5/7", "x"], "sumden")[0] is None
    (tmp_path / "c.yaml").write_text("""
claims:
  pk:
    - {id: v, where: x, model: m, values: {a: 1, b: 2}, reason: "not computed: why"}
    - {id: w, where: x, model: m, reason: "not computed: why"}
""")
    with pytest.raises(ValueError, match="claim w"):
        load_ledger(tmp_path / "c.yaml")
    (tmp_path / "c.yaml").write_text((tmp_path / "c.yaml").read_text().splitlines()[0] + "\n" +
                                     "\n".join((tmp_path / "c.yaml").read_text().splitlines()[1:4]) + "\n")
    rows, _ = build_rows(load_ledger(tmp_path / "c.yaml"), tmp_path, [])
    assert [(r["id"], r["paper_value"], r["status"]) for r in rows] == [
        ("v.a", "1", "not computed by the pipeline"), ("v.b", "2", "not computed by the pipeline")]
