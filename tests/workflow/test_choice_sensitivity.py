"""The choice-sensitivity table on the shared tiny run (issue 13 item 5): an alternative moves
exactly the claims that read what it changes. The claims are built so the answer is known: one
states the default g_T median, one the fitted-gain median computed here from the shards
(median |alpha*|), one the median closure P (no switch touches it)."""

from __future__ import annotations

import csv

import pytest
import yaml

from headgeom.io.shards import read_shards
from headgeom.outputs.paper1.orientation import p1_factorial
from headgeom.outputs.choices import apply
from headgeom.verify import sensitivity as CH
from headgeom.publish.claims import load_ledger
from tinyrun import tiny_run

pytestmark = pytest.mark.slow


def test_sensitivity_moves_exactly_the_claims_that_read_the_switched_column(tmp_path, tmp_path_factory,
                                                                            snakemake_bin, root):
    w = tiny_run(tmp_path_factory, snakemake_bin, root)
    built = list(csv.DictReader(open(w / "results/tables/choice_sensitivity.csv")))
    assert {(r["switch"], r["alternative"]) for r in built} >= {
        ("choices.return_gain", "fitted"), ("choices.isotropy", "min_max"),
        ("choices.factorial_contrast", "row"), ("choices.factorial_contrast", "column")}

    tail = next(csv.DictReader(open(w / "results/tables/p1_table2_strong_tail.csv")))
    fact = next(csv.DictReader(open(w / "results/tables/p1_factorial.csv")))
    heads, _ = read_shards(sorted((w / "results/shards/paper1_heads/tiny").glob("layer*.parquet")))
    # the row contrast's value, from the table's own builder on the switched columns
    switched = p1_factorial(apply(heads, {"factorial_contrast": "row"}), ["tiny"]).rows[0]["mean_I"]
    default, alt = f"{float(fact['mean_I']):.3g}", f"{switched:.3g}"
    assert alt != default  # the test needs the two readings to differ at the printed precision
    ledger = {"claims": {"p1": [
        {"id": "I.default", "model": "tiny", "table": "p1_factorial", "column": "mean_I", "value": default},
        {"id": "I.row", "model": "tiny", "table": "p1_factorial", "column": "mean_I", "value": alt},
        {"id": "P.wrong_v", "model": "tiny", "table": "p1_table2_strong_tail", "column": "wrong_v_median",
         "value": f"{float(tail['wrong_v_median']):.3g}"},
    ]}}
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump(ledger))
    t = CH.sensitivity(w, load_ledger(tmp_path / "claims.yaml"), ["tiny"])
    rows = {(r["switch"], r["alternative"]): r for r in t.rows}
    row = rows[("choices.factorial_contrast", "row")]
    assert row["changed"] == 2
    assert "I.default: agrees → differs" in row["claims"] and "I.row: differs → agrees" in row["claims"]
    assert "P.wrong_v" not in row["claims"]
    assert rows[("choices.factorial_contrast", "column")]["changed"] == 2  # the same value at 3 digits here
    for key in (("choices.return_gain", "fitted"), ("choices.isotropy", "min_max")):
        assert rows[key]["changed"] == 0 and rows[key]["claims"] == "none"
        assert rows[key]["tables"] == row["tables"] > 0
