"""The ledger's rules over a table's rows (over_rows; median, count, countfrac) and the fixed list
of reasons a number may stay "not computed"."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from ledger_tables import reason_category, write_table
from headgeom.publish.claim_forms import reduce_values
from headgeom.publish.claims import AGREES, DIFFERS, NOT_COMPARABLE, NOT_COMPUTED_REASONS, build_rows, load_ledger

LEDGER = Path(__file__).resolve().parents[3] / "config" / "claims.yaml"

# entries still "not computed" for want of a table or column (not one of the fixed reasons); this
# list may only shrink: a new entry outside the fixed list fails the test below
OUTSTANDING: set[str] = set()


def test_not_computed_reasons_come_from_the_fixed_list():
    ledger = load_ledger(LEDGER)
    outside = {e["id"] for e in ledger if not e.get("table") and not e.get("derive") and reason_category(e["reason"]) is None}
    assert outside <= OUTSTANDING, f"'not computed' with a reason outside {NOT_COMPUTED_REASONS}: {sorted(outside - OUTSTANDING)}"
    # an outstanding entry that got a table (or a fixed reason) leaves the list
    assert outside == OUTSTANDING, f"no longer outstanding: {sorted(OUTSTANDING - outside)}"


@pytest.mark.parametrize("reason, category", [
    ("not computed: a setting of the study (config: rank_rtol)", "a setting of the study"),
    ("not computed: arithmetic on printed values (no table prints it)", None),  # derivable: computed now
    ("not computed: the paper's in-house run (124M)", "the paper's in-house run"),
    ("not computed: a property of a format (BF16)", "a property of a format"),
    ("not computed: no table groups layer pairs by distance", None),
    ("a setting of the study", None),  # without the prefix
    ("", None),
])
def test_reason_category(reason, category):
    assert reason_category(reason) == category


def test_reducers_over_cells():
    cells = ["0.3", "0.1", "0.7", "0.2"]
    assert reduce_values(cells, "median")[0] == pytest.approx(statistics.median([0.3, 0.1, 0.7, 0.2]))
    assert reduce_values(["True", "False", "True", "1", "0"], "count")[0] == 3
    assert reduce_values(["True", "False", "True"], "countfrac")[0] == (2, 3)
    assert reduce_values(["True", ""], "count")[0] is None  # an empty cell is not a verdict
    assert reduce_values(["3", "3", ""], "rows")[0] == 3  # rows, not distinct values


def _table(tmp_path, rows):
    write_table(tmp_path, "t", rows)


def _status(tmp_path, entry):
    e = {"id": "x", "paper": "pk", "model": "m", "table": "t"} | entry
    rows, _ = build_rows([e], tmp_path, ["m"])
    return rows[0]


def test_over_rows_reads_every_matching_row(tmp_path):
    _table(tmp_path, [{"model": "m", "scope": "within", "layer": i, "v": v, "flag": f}
                      for i, (v, f) in enumerate([(0.5, True), (0.2, False), (0.9, True)])]
           + [{"model": "m", "scope": "cross", "layer": 0, "v": 5.0, "flag": True},
              {"model": "other", "scope": "within", "layer": 0, "v": 0.01, "flag": True}])
    r = _status(tmp_path, {"row": {"scope": "within"}, "column": "v", "value": "0.2 – 0.9", "reduce": "range",
                           "over_rows": True})
    assert (r["status"], r["pipeline"]) == (AGREES, "0.2 – 0.9")
    assert _status(tmp_path, {"row": {"scope": "within"}, "column": "v", "value": "0.5", "reduce": "median",
                              "over_rows": True})["status"] == AGREES
    assert _status(tmp_path, {"row": {"scope": "within"}, "column": "flag", "value": "2", "reduce": "count",
                              "over_rows": True})["status"] == AGREES
    assert _status(tmp_path, {"row": {"scope": "within"}, "column": "flag", "value": "2 / 3", "reduce": "countfrac",
                              "over_rows": True})["status"] == AGREES
    assert _status(tmp_path, {"row": {"scope": "within"}, "column": "flag", "value": "3", "reduce": "count",
                              "over_rows": True})["status"] == DIFFERS
    assert _status(tmp_path, {"row": {"scope": "within"}, "column": "layer", "value": "3", "reduce": "rows",
                              "over_rows": True})["status"] == AGREES
    assert _status(tmp_path, {"row": {"scope": "within", "flag": "True"}, "column": "layer", "value": "0, 2",
                              "reduce": "list", "over_rows": True})["status"] == AGREES
    assert _status(tmp_path, {"row": {"scope": "within", "flag": "True"}, "column": "layer", "value": "0, 1",
                              "reduce": "list", "over_rows": True})["status"] == DIFFERS
    # without over_rows a filter must match one row: three rows are "no row"
    assert _status(tmp_path, {"row": {"scope": "within"}, "column": "v", "value": "0.2 – 0.9",
                              "reduce": "range"})["status"] == "no row"


def test_a_bare_null_key_in_a_row_filter_is_refused(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("claims:\n  pk:\n    - {id: a, model: m, table: t, row: {scope: within, null: rotation}, column: x, value: 1}\n")
    with pytest.raises(ValueError, match="quote"):
        load_ledger(p)
    p.write_text('claims:\n  pk:\n    - {id: a, model: m, table: t, row: {scope: within, "null": rotation}, column: x, value: 1}\n')
    assert load_ledger(p)[0]["row"] == {"scope": "within", "null": "rotation"}


def test_a_pooled_claim_reads_the_pool_of_its_models(tmp_path):
    """A pooled claim is judged only on a row that pools exactly its models: a named pool's
    pooled_models cell, else every per-model row of the table."""
    _table(tmp_path, [{"model": "a", "v": 0.1, "pooled_models": ""}, {"model": "b", "v": 0.2, "pooled_models": ""},
                      {"model": "c", "v": 0.3, "pooled_models": ""},
                      {"model": "pooled", "v": 0.2, "pooled_models": "a, b, c"},
                      {"model": "pooled ab", "v": 0.15, "pooled_models": "a, b"}])

    def status(models, row, value):
        e = {"id": "x", "paper": "p1", "models": models, "table": "t", "row": {"model": row}, "pooled_over": "model",
             "column": "v", "value": value}
        return build_rows([e], tmp_path, ["a", "b", "c"])[0][0]["status"]

    assert status(["a", "b"], "pooled ab", "0.15") == AGREES
    assert status(["a", "b"], "pooled ab", "0.3") == DIFFERS
    assert status(["a", "b", "c"], "pooled", "0.2") == AGREES
    assert status(["a", "b"], "pooled", "0.2") == NOT_COMPARABLE  # "pooled" pools c as well
    assert status(["a", "b", "c"], "pooled ab", "0.15") == NOT_COMPARABLE
    # without the column: the per-model rows ("pooled <name>" rows are not models)
    _table(tmp_path, [{"model": "a", "v": 0.1}, {"model": "b", "v": 0.2}, {"model": "pooled", "v": 0.2},
                      {"model": "pooled ab", "v": 0.15}])
    assert status(["a", "b"], "pooled", "0.2") == AGREES


def test_the_papers_pools_are_the_models_its_pooled_claims_name():
    """Every pooled paper 1 claim names the models of the paper1.pools entry whose row it reads
    (config/paper.yaml), so the stand-in and paper runs judge them instead of "not comparable"."""
    import yaml

    pools = yaml.safe_load((LEDGER.parent / "paper.yaml").read_text())["paper1"]["pools"]
    read = 0
    for e in load_ledger(LEDGER):
        label = str((e.get("row") or {}).get("model", ""))
        if e.get("pooled_over") == "model" and label.startswith("pooled "):
            name = label.removeprefix("pooled ")
            if name != "large":
                assert set(pools[name]) == set(e["models"]), e["id"]
                read += 1
    assert read >= 10
