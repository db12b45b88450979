"""``headgeom audit --claim`` agrees with the ledger: an entry that the claims table calls not run,
not computed or not comparable exits 2 with the claims table's own words, audits no cell (in
particular no pooled row of other models than the entry's), and the ledger page shows no audit
command for it."""

from __future__ import annotations

import csv
import time

import pytest

from headgeom.cli import main as cli
from headgeom.outputs.formats import Column, Table
from headgeom.verify import audit as AUD
from headgeom.verify.claim_audit import audit_claim
from headgeom.publish.claims import claims_job, load_ledger
from headgeom.publish.ledger_page import ledger_rows

# The run's models are a and b; a trajectory table pools them in an "all (final)" row, which the
# entry p1.t3.ci reads for other models (x, y): not run, though a row matches its filter.
LEDGER = """
claims:
  p1:
    - {id: p1.t3.ci, where: Table 3, quantity: "pooled interval", models: [x, y], table: traj,
       row: {lineage: "all (final)"}, pooled_over: checkpoint, values: {e_lo: 0.468, e_hi: 0.643},
       note: "the paper's checkpoints are not named"}
    - {id: p1.pool, where: Table 3, models: [a, c], table: traj, row: {lineage: "all (final)"}, pooled_over: checkpoint,
       column: e_lo, value: 0.1}
    - {id: p1.x, where: abstract, model: a, value: 3, reason: "not computed: a setting of the study"}
    - {id: p1.ok, where: Table 3, model: a, table: traj, row: {checkpoint: a}, column: e_lo, value: 0.1}
"""


@pytest.fixture
def run(tmp_path):
    d = tmp_path / "results/tables"
    d.mkdir(parents=True)
    rows = [{"lineage": "l", "checkpoint": m, "e_lo": v, "e_hi": v + 1} for m, v in (("a", 0.1), ("b", 0.2))]
    rows.append({"lineage": "all (final)", "checkpoint": "pooled", "e_lo": 0.15, "e_hi": 1.15})
    t = Table("traj", "t", [Column(c, c) for c in ("lineage", "checkpoint", "e_lo", "e_hi")], rows)
    (d / "traj.csv").write_text(t.csv())
    (tmp_path / "ledger.yaml").write_text(LEDGER)
    outs = {k: str(d / f"claims.{k}") for k in ("csv", "md", "tex")} | {"prov": str(d / "claims.prov.json")}
    claims_job(tmp_path / "ledger.yaml", d, ["a", "b"], outs)
    return tmp_path


def claims_csv(w) -> dict[str, dict]:
    with open(w / "results/tables/claims.csv", newline="") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def test_no_cell_entries_exit_2_with_the_claims_tables_words_and_audit_nothing(run, monkeypatch, capsys):
    def no_audit(*a, **k):
        raise AssertionError("audited a cell of an entry the ledger says reads none")

    monkeypatch.setattr(AUD, "audit", no_audit)
    rows = claims_csv(run)
    assert rows["p1.t3.ci.e_lo"]["status"] == "not run"
    assert rows["p1.pool"]["status"] == "not comparable"
    assert rows["p1.x"]["status"] == "not computed by the pipeline"
    for cid in ("p1.t3.ci.e_lo", "p1.t3.ci.e_hi", "p1.pool", "p1.x"):
        t0 = time.perf_counter()
        assert cli(["audit", "--claim", cid, "-d", str(run)]) == 2
        assert time.perf_counter() - t0 < 5
        err = capsys.readouterr().err
        r = rows[cid]
        words = "; ".join(x for x in (r["status"], r["note"]) if x)
        assert err.strip() == f"headgeom audit: {cid}: no cell of this run to audit ({words})", err


def test_an_entry_with_a_verdict_is_audited(run, monkeypatch):
    seen = []

    def fake_audit(workdir, table, sel, column, **kw):
        seen.append((table, sel, column))
        raise AUD.AuditError("stop here")

    monkeypatch.setattr(AUD, "audit", fake_audit)
    with pytest.raises(AUD.AuditError, match="stop here"):
        audit_claim(run, "p1.ok", out=lambda *a: None)
    assert seen == [("traj", {"checkpoint": "a"}, "e_lo")]


def test_the_ledger_page_shows_no_audit_command_for_an_entry_that_reads_no_cell(run):
    ledger = load_ledger(run / "ledger.yaml")
    rows = list(claims_csv(run).values())
    page = {r["id"]: r for r in ledger_rows(ledger, rows, run / "results/tables")}
    assert page["p1.ok"]["audit"] == "headgeom audit --claim p1.ok"
    for cid in ("p1.t3.ci.e_lo", "p1.t3.ci.e_hi", "p1.pool", "p1.x"):
        assert page[cid]["audit"] == "", cid


def test_an_unknown_claim_id_exits_2_naming_it(run, capsys):
    """The ledger's cell lookup (headgeom.publish.ledger_cells) fails as the audit's own error: one
    line, exit 2, no traceback."""
    assert cli(["audit", "--claim", "p1.nope", "-d", str(run), "--ledger", str(run / "ledger.yaml")]) == 2
    assert capsys.readouterr().err.strip() == ("headgeom audit: no ledger entry 'p1.nope' "
                                                 "(e.g. p1.t3.ci, p1.pool, p1.x, p1.ok)")
