"""The claims ledger (config/claims.yaml) and the `claims` table."""

from __future__ import annotations

import csv
import json
import re

import pytest
import yaml

from headgeom.publish.claim_forms import agrees, reduce_values
from headgeom.publish.claims import build_claims, load_ledger
from tinyrun import copy_run, snakemake, tiny_run

LEDGER_TEST = """
claims:
  pk:
    - {id: tiny.pkw, where: Table 5, model: tiny, table: pk_table5_writing, values: {D: 48, d: 12, heads: 4, iso: 0.2500}}
    - {id: tiny.t3, where: Table 3, model: tiny, table: pk_table3_models, values: {heads: "4 / 2", writer_pairs: 6}}
    - {id: tiny.wrong, where: Table 3, model: tiny, table: pk_table3_models, column: layers, value: 12}
    - {id: qwen.t3, where: Table 3, model: qwen2.5-7b, table: pk_table3_models, values: {D: 3584, layers: 28}}
  p1:
    - {id: tiny.strong, where: Table 2, models: [tiny], table: p1_table2_strong_tail, row: {model: "{model}"}, column: strong,
       reduce: sum, value: 2, quantity: planted closed heads}
    - {id: tiny.part, where: Table 2, models: [tiny, qwen3-4b-base], table: p1_table2_strong_tail, row: {model: "{model}"},
       column: strong, reduce: sum, value: 2}
    - {id: six, where: Table 2, models: [pythia-2.8b-deduped, qwen3-4b-base], table: p1_table2_strong_tail, row: {model: "{model}"},
       column: strong_pct, reduce: range, value: "3.98 – 8.00"}
    - {id: nocode, where: abstract, model: tiny, value: 0.336, reason: a pooled median the pipeline does not report}
"""


def _rows(path):
    with open(path, newline="") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


# ------------------------------------------------------------------ agreement at printed precision


@pytest.mark.parametrize("claim, got, ok", [
    ("3.98", 3.984, True), ("3.98", 3.986, False), ("0.0833", 1 / 12, True), ("6.130", 6.1304, True),
    ("6.130", 6.1306, False), ("1.04e-4", 1.044e-4, True), ("1.04e-4", 1.046e-4, False), ("338", 338.0, True),
    ("3.98 – 8.00", (3.981, 7.996), True), ("3.98 – 8.00", (3.981, 7.994), False), ("880/881", (880, 881), True),
    ("880/881", (879, 881), False), ("8 / 12", "8 / 12", True), ("all", (5, 5), True), ("all", (4, 5), False),
    ("< 1e-12", 3e-13, True), ("< 1e-12", 2e-12, False), ("> 0", 0.1, True), ("12 / 12", "12 / 12", True),
    ("0.145 – 0.221", "0.145 – 0.221", True), ("0.145 – 0.221", "0.146 – 0.221", False), ("30", "30", True),
])
def test_agreement_at_printed_precision(claim, got, ok):
    assert agrees(claim, got) is ok


def test_order_of_magnitude_and_reducers():
    # of order: within half a decade either way, symmetric on a log scale
    assert agrees("1e-10", 3e-10, tol="order") and agrees("1e-10", 3.3e-11, tol="order")
    assert not agrees("1e-10", 4.2e-10, tol="order") and not agrees("1e-10", 2.9e-11, tol="order")
    assert reduce_values(["1/2", "3/4"], "sumfrac") == ((4, 6), "4/6")
    assert reduce_values(["1/2", "3/4"], "sumfrac_pct")[0] == pytest.approx(400 / 6)
    lo_hi, shown = reduce_values(["0.2", "0.1", "nan"], "range")  # a NaN cell is not dropped silently
    assert all(x != x for x in lo_hi) and shown == "nan (1 of 3 cells NaN)" and not agrees("0.1 – 0.2", lo_hi)
    assert reduce_values(["0.2", "0.1"], "range") == ((0.1, 0.2), "0.1 – 0.2")
    assert reduce_values(["2", "3"], "sum") == (5.0, "5")
    assert reduce_values(["np.float64(25.0)"], "one")[0] == 25.0


# ------------------------------------------------------------------ the shipped ledger


def test_shipped_ledger_is_well_formed(root):
    ledger = load_ledger(root / "config/claims.yaml")
    assert len(ledger) > 80
    known = set(yaml.safe_load((root / "config/config.yaml").read_text())["models"]) | set(
        yaml.safe_load((root / "config/models.yaml").read_text())["models"])
    for e in ledger:
        models = [e["model"]] if "model" in e else e["models"]
        assert set(models) <= known, (e["id"], set(models) - known)
    papers = {e["paper"] for e in ledger}
    assert papers == {"p1", "pk"}
    wheres = {e["where"] for e in ledger}
    for t in [f"Table {i}" for i in range(1, 10)]:
        assert t in wheres, t  # PK Tables 1-9
    assert {"Table 3", "Table 4"} <= wheres and any("Table 2" in w for w in wheres) and any("abstract" in w for w in wheres)


@pytest.mark.slow
def test_ledger_reads_columns_the_pipeline_writes(tmp_path_factory, snakemake_bin, root):
    """Every table, row key and column the ledger reads exists in the pipeline's tables."""
    from headgeom.outputs import TABLES

    run = tiny_run(tmp_path_factory, snakemake_bin, root)
    for e in load_ledger(root / "config/claims.yaml"):
        if "table" not in e:
            continue
        if TABLES[e["table"]].shard_models == "activation":
            continue  # no activation stage on the tiny run: tests/unit/jobs/test_activation_stage.py checks these
        path = run / f"results/tables/{e['table']}.csv"
        assert path.exists(), (e["id"], e["table"])
        header = next(csv.reader(open(path)))
        cols = list(e["values"]) if "values" in e else [e["column"]]
        keys = {k for r in (e.get("rows") or [e.get("row") or {}]) for k in r}
        if e.get("pooled_over"):
            keys.add(e["pooled_over"])
        assert set(cols) <= set(header) and keys <= set(header), (e["id"], set(cols) | keys - set(header))


# ------------------------------------------------------------------ the claims rule


@pytest.mark.slow
def test_claims_table_on_the_tiny_run(tmp_path_factory, snakemake_bin, root):
    run = tiny_run(tmp_path_factory, snakemake_bin, root)
    # the shipped ledger: the tiny model is none of the papers', so every claim is "not run"
    # (or not computed by the pipeline at all), except the numbers derived from the papers' settings
    rows = _rows(run / "results/tables/claims.csv")
    ledger = load_ledger(root / "config/claims.yaml")
    assert len(rows) >= len(ledger)
    derived = {e["id"] for e in ledger if e.get("derive")}
    assert {r["status"] for i, r in rows.items() if i not in derived} <= {"not run", "not computed by the pipeline"}
    assert {rows[i]["status"] for i in derived} == {"agrees"}
    assert rows["pk.t3.qwen7b.D"]["paper_value"] == "3584" and rows["pk.t3.qwen7b.D"]["pipeline"] == "–"
    prov = json.loads((run / "results/tables/claims.prov.json").read_text())
    assert prov["ledger"]["claims"] == len(ledger) and prov["params"]["models"] == ["tiny"]
    assert {p["path"].split("/")[-1] for p in prov["inputs"]} >= {"pk_table5_writing.csv", "pk_table3_models.csv"}
    for ext in ("md", "tex"):
        assert "not run" in (run / f"results/tables/claims.{ext}").read_text()

    # a ledger with entries for the tiny model (claims.ledger in the config): only `claims` reruns
    w = copy_run(run, tmp_path_factory.mktemp("claims") / "run")
    (w / "ledger.yaml").write_text(LEDGER_TEST)
    (w / "cfg_claims.yaml").write_text(yaml.safe_dump({"claims": {"ledger": str(w / "ledger.yaml")}}))
    r = snakemake(snakemake_bin, root, w, configfiles=("cfg.yaml", "cfg_claims.yaml"))
    ran = sorted(set(re.findall(r"^(?:local)?rule (\S+):$", r.stdout + r.stderr, flags=re.M)))
    # read the ledger or its table: the claims, every alternative of the choice sensitivity and its table
    assert ran == ["all", "choice_sensitivity", "claims", "macros", "sensitivity_shards", "sensitivity_tables", "summary"], ran
    rows = _rows(w / "results/tables/claims.csv")
    assert rows["tiny.pkw.D"]["pipeline"] == "48" and rows["tiny.pkw.D"]["status"] == "agrees"
    assert rows["tiny.pkw.iso"]["pipeline"] == "0.25" and rows["tiny.pkw.iso"]["status"] == "agrees"
    assert rows["tiny.t3.heads"]["pipeline"] == "4 / 2" and rows["tiny.t3.heads"]["status"] == "agrees"
    assert rows["tiny.t3.writer_pairs"]["status"] == "agrees"
    assert rows["tiny.wrong"]["pipeline"] == "2" and rows["tiny.wrong"]["status"] == "differs"
    assert rows["tiny.strong"]["pipeline"] == "2" and rows["tiny.strong"]["status"] == "agrees"
    assert rows["tiny.strong"]["quantity"] == "planted closed heads"
    assert rows["tiny.part"]["status"] == "partial (1 of 2 models run)" and rows["tiny.part"]["pipeline"] == "2"
    for cid in ("qwen.t3.D", "qwen.t3.layers", "six"):
        assert rows[cid]["status"] == "not run" and rows[cid]["pipeline"] == "–", rows[cid]
    assert rows["nocode"]["status"] == "not computed by the pipeline" and "pooled median" in rows["nocode"]["note"]
    assert "pk_table5_writing[model=tiny].D" == rows["tiny.pkw.D"]["read"]
    # the macros, rebuilt with the ledger: values at the paper's printed precision ("0.2500": four decimals)
    tex = (w / "results/tables/claims_macros.tex").read_text()
    for line in ("\\newcommand{\\hgTinyPkwD}{48}", "\\newcommand{\\hgTinyPkwDVerdict}{agrees}",
                 "\\newcommand{\\hgTinyPkwIso}{0.2500}", "\\newcommand{\\hgTinyWrong}{2}",
                 "\\newcommand{\\hgTinyWrongVerdict}{differs}", "\\newcommand{\\hgQwenTThreeD}{--}"):
        assert line in tex, line
    # the ledger page links a claim to the row it reads
    page = (w / "results/tables/claims.html").read_text()
    assert '"href": "pk_table5_writing.html#row-0"' in page and "headgeom audit --claim tiny.pkw.D" in page
    # the same table from the command line
    t = build_claims(load_ledger(w / "ledger.yaml"), w / "results/tables", ["tiny"])
    assert {r["id"]: r["status"] for r in t.rows} == {k: v["status"] for k, v in rows.items()}
