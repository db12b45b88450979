"""The choice-sensitivity table on the shared tiny run (issue 13 item 5): an alternative moves
exactly the claims that read what it changes. The claims are built so the answer is known: one
states the default g_T median, one the fitted-gain median computed here from the shards
(median |alpha*|), one the median closure P (no switch touches it)."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import yaml

from headgeom.io.shards import read_shards
from headgeom.verify import sensitivity as CH
from headgeom.verify.claims import load_ledger
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
    heads, _ = read_shards(sorted((w / "results/shards/paper1_heads/tiny").glob("layer*.parquet")))
    alpha = np.asarray(heads["alpha"], float)
    fitted = f"{np.median(np.abs(alpha[np.isfinite(alpha)])):.3g}"
    default = f"{float(tail['gT_median_all']):.3g}"
    assert fitted != default  # the test needs the two readings to differ at the printed precision
    ledger = {"claims": {"p1": [
        {"id": "gT.default", "model": "tiny", "table": "p1_table2_strong_tail", "column": "gT_median_all", "value": default},
        {"id": "gT.fitted", "model": "tiny", "table": "p1_table2_strong_tail", "column": "gT_median_all", "value": fitted},
        {"id": "P.median", "model": "tiny", "table": "p1_table2_strong_tail", "column": "median_P",
         "value": f"{float(tail['median_P']):.3g}"},
    ]}}
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump(ledger))
    t = CH.sensitivity(w, load_ledger(tmp_path / "claims.yaml"), ["tiny"])
    rows = {(r["switch"], r["alternative"]): r for r in t.rows}
    gain = rows[("choices.return_gain", "fitted")]
    assert gain["changed"] == 2
    assert "gT.default: agrees → differs" in gain["claims"] and "gT.fitted: differs → agrees" in gain["claims"]
    assert "P.median" not in gain["claims"]
    for key in (("choices.isotropy", "min_max"), ("choices.factorial_contrast", "row"),
                ("choices.factorial_contrast", "column")):
        assert rows[key]["changed"] == 0 and rows[key]["claims"] == "none"
        assert rows[key]["tables"] == gain["tables"] > 0
