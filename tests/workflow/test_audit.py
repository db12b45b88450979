"""Audit of reported numbers (headgeom audit), provenance sidecars and the Snakemake report, on
the shared tiny run (tests/tinyrun.py)."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from headgeom.io.shards import write_shard
from headgeom.outputs import TABLES as REGISTERED_TABLES
from headgeom.verify.audit import AuditError, audit, render_full
from tinyrun import copy_run, snakemake, tiny_run

pytestmark = pytest.mark.slow

KEYS = ("model", "lineage", "checkpoint", "scope", "comparison", "kind", "test", "layer", "layer_r", "null", "pair", "t")

# one number per table: (row filter, column); tables not listed here (added later) get a generic
# pick: the last row, selected by its key columns, and its first numeric non-key column
PICKS = {
    "pk_table5_writing": ({"model": "tiny"}, "sd_median"),
    "pk_table1_min_angles": ({"model": "tiny", "comparison": "writing -> K, across layers"}, "min_angle"),
    "pk_table2_lower_bound": ({"model": "tiny"}, "min_V"),
    "pk_table3_models": ({"model": "tiny"}, "random_sd"),
    "pk_table4_null_summary": ({"model": "tiny", "comparison": "writing, within layer"}, "median_r"),
    "pk_table6_min_angle_vs_nulls": (None, "obs_min_angle"),
    "pk_table7_reading_within": ({"model": "tiny", "kind": "Q"}, "min_angle"),
    "pk_table8_cross_nulls": ({"model": "tiny", "kind": "V"}, "median_ratio_rotation"),
    "pk_table9_weighted": (None, "max_weighted"),
    "pk_appendix_h_self_overlap": ({"model": "tiny", "test": "V_vs_O"}, "p_max"),
    "p1_table2_strong_tail": ({"model": "tiny"}, "gT_med"),
    "p1_table3_trajectories": ({"checkpoint": "tiny"}, "e_gap"),
    "p1_table4_sibling_law": ({"model": "tiny"}, "rho"),
    "p1_capacity": ({"model": "tiny"}, "cap_strong"),
}
# the tiny run has no activation stage (its checkpoint has no tokenizer); the activation tables
# are audited in test_activation_workflow.py
TABLES = [n for n, o in REGISTERED_TABLES.items() if o.shard_models != "activation"]


@pytest.fixture(scope="module")
def run(tmp_path_factory, snakemake_bin, root):
    return tiny_run(tmp_path_factory, snakemake_bin, root)


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _num(x):
    try:
        return float(x)
    except ValueError:
        return None


def _pick(run, table):
    rows = _rows(run / f"results/tables/{table}.csv")
    if not rows:
        pytest.skip(f"{table} has no rows on the tiny run")
    filt, col = PICKS.get(table, (None, None))
    if filt is None:
        r = rows[-1]
        filt = {k: r[k] for k in KEYS if k in r}
    if col is None:
        col = next(c for c in rows[0] if c not in KEYS and _num(rows[-1][c]) is not None)
    return filt, col


@pytest.mark.parametrize("table", TABLES)
def test_audit_recomputes_a_number_of_every_table(run, table):
    filt, col = _pick(run, table)
    res = audit(run, table, filt, col, find_rows=False)
    text = "\n".join(render_full(res))
    assert res.verdicts.shards.ok, text
    assert res.verdicts.tensors.ok, text
    assert res.ok and not res.integrity, text
    assert "MATCH" in text and "MISMATCH" not in text
    # what it printed: aggregation, rule and command, shard provenance, tensors with sha256s
    assert f"snakemake -c2 results/tables/{table}.csv --forcerun table_{table}" in text
    prov = json.loads((run / f"results/tables/{table}.prov.json").read_text())
    for rec in prov["inputs"]:
        if rec["provenance"].get("model") == filt.get("model", "tiny"):
            assert rec["path"] in text
    if prov["inputs"]:
        assert "config  " in text and "seeds   " in text and "code    headgeom" in text
        manifest = json.loads((run / "results/tensors/tiny/manifest.json").read_text())
        some_tensor = next(iter(prov["inputs"][0]["provenance"]["tensors"]))
        assert manifest["tensors"][some_tensor]["sha256"] in text
        assert manifest["store_sha256"][:16] in text and "local " in text


def test_audit_cli_as_typed(run):
    exe = Path(sys.executable).parent / "headgeom"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "headgeom.cli"]
    r = subprocess.run([*cmd, "audit", "p1_table2_strong_tail", "--row", "model=tiny", "--column", "strong_pct", "--full"],
                       cwd=run, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    # --full: the whole trace, every shard with its provenance
    assert out.count("\n    config  ") == 2 and out.count("\n    seeds   ") == 2 and out.count("identity_rtol=1e-10") == 2, out
    for s in ("Aggregation", "results/shards/paper1_heads/tiny/layer1.parquet", "identity_rtol=1e-10", "rule       table_p1_table2_strong_tail",
              "snakemake -c2 results/tables/p1_table2_strong_tail.csv --forcerun table_p1_table2_strong_tail",
              "snakemake -c2 results/shards/paper1_heads/tiny/layer0.parquet --forcerun paper1_heads",
              "model.layers.1.self_attn.o_proj.weight", "(a) from the 2 listed shards: 25.0  -> MATCH (exact)",
              "(b) from the tensors", "Verdict: MATCH"):
        assert s in out, (s, out)
    # a number that is not there: exit 2 and a message naming the rows
    r = subprocess.run([*cmd, "audit", "p1_table2_strong_tail", "--row", "model=nope", "--column", "strong", "-d", str(run)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no row" in r.stderr and "model=tiny" in r.stderr


def _cli():
    exe = Path(sys.executable).parent / "headgeom"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "headgeom.cli"]


def _recorded_tensors(prov_inputs, model="tiny"):
    """The distinct tensors the shards of ``model`` record (groups by layer flattened)."""
    names = set()
    for rec in prov_inputs:
        pv = rec["provenance"]
        if pv.get("model") != model:
            continue
        for group in (pv.get("tensors"), pv.get("tensors_readers"), pv.get("final_tensors")):
            for k, v in (group or {}).items():
                names |= set(v) if isinstance(v, dict) else {k}
    return names


def test_audit_default_view_is_one_screen(run):
    r = subprocess.run([*_cli(), "audit", "p1_table2_strong_tail", "--row", "model=tiny", "--column", "strong_pct"],
                       cwd=run, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    lines = out.splitlines()
    assert len(lines) <= 40, out
    # the number, and the rows it was computed from: the builder reads P, the two planted closed heads pass
    assert lines[0].startswith("p1_table2_strong_tail [model=tiny] strong_pct = 25.0"), out
    assert "Computed from 8 heads of paper1_heads (model = tiny, 2 shards); the number moves with P" in out, out
    assert "2 of 8 heads with P ≥ 0.9 (strong_threshold): " in out, out
    assert re.search(r"layer 0 head 0 P=1(\.0+)?\b", out) and re.search(r"layer 1 head 3 P=1(\.0+)?\b", out), out
    # rule, code, config once, inputs as counts, verdicts
    assert "Rule table_p1_table2_strong_tail: " in out and "snakemake -c2 results/tables/p1_table2_strong_tail.csv --forcerun table_p1_table2_strong_tail" in out
    assert re.search(r"Code: table headgeom \S+ (git \w{12} \((clean|dirty)\)|\(no git commit recorded\))", out), out
    assert out.count("identity_rtol=1e-10") == 1 and out.count("strong_threshold=0.9") == 1, out
    prov = json.loads((run / "results/tables/p1_table2_strong_tail.prov.json").read_text())
    n_tensors = len(_recorded_tensors(prov["inputs"]))
    assert f"Inputs: 2 shards sha256 OK (2 feed the row); 1 tensor store sha256 OK; {n_tensors} tensors sha256 OK" in out
    assert "FAILED" not in out and "config  " not in out  # no per-shard provenance blocks
    assert "(a) from the 2 listed shards: 25.0 -> MATCH (exact)" in out and "(b) from the tensors" in out
    assert "Verdict: MATCH" in out


def test_audit_json_parses_and_carries_what_was_checked(run):
    r = subprocess.run([*_cli(), "audit", "p1_table2_strong_tail", "--row", "model=tiny", "--column", "strong", "--json",
                        "--no-tensors", "-d", str(run)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(r.stdout)
    assert {"number", "rows", "rule", "builder", "code", "config", "inputs", "verdicts", "ok"} <= set(rep)
    assert rep["ok"] is True and rep["number"]["value"] == "2" and rep["number"]["row"] == {"model": "tiny"}
    assert rep["rule"]["name"] == "table_p1_table2_strong_tail" and "p1_table2_strong_tail" in rep["builder"]["function"]
    assert rep["config"]["strong_threshold"]["value"] == 0.9 and "identity_rtol" in rep["config"]
    assert [s["status"] for s in rep["inputs"]["shards"]] == ["ok", "ok"]
    assert rep["inputs"]["tensors"] and all(t["status"] == "ok" for t in rep["inputs"]["tensors"])
    fam = rep["rows"]["families"][0]
    assert fam["used"] == ["P"] and fam["counts"][0]["count"] == 2 and len(fam["top"]) == 2
    assert rep["verdicts"]["shards"]["verdict"] == "MATCH" and rep["verdicts"]["tensors"] is None


def test_corrupted_shard_is_a_listed_failure_in_the_default_view(run, tmp_path):
    w = copy_run(run, tmp_path / "run")
    shard = w / "results/shards/paper1_heads/tiny/layer0.parquet"
    b = bytearray(shard.read_bytes())
    footer = int.from_bytes(b[-8:-4], "little")
    b[(len(b) - 8 - footer) // 2] ^= 0xFF  # one flipped byte in the data pages
    shard.write_bytes(bytes(b))
    r = subprocess.run([*_cli(), "audit", "p1_table2_strong_tail", "--row", "model=tiny", "--column", "strong", "--no-tensors",
                        "-d", str(w)], capture_output=True, text=True, timeout=300)
    out = r.stdout
    assert r.returncode == 1, out + r.stderr
    assert len(out.splitlines()) <= 40, out
    assert "Inputs: 2 shards checked, 1 FAILED" in out, out
    # the shard against its own content record (headgeom.io.shards), not only against the sidecar
    assert "  FAILED results/shards/paper1_heads/tiny/layer0.parquet is damaged: " in out, out
    # the verdict on the one screen says DAMAGED and names the input (not MISMATCH, not only under --full)
    assert "Verdict: DAMAGED — 1 input of this number fails its own checks (FAILED above): " \
           "results/shards/paper1_heads/tiny/layer0.parquet (damaged (" in out, out
    # --json carries the failure, item by item
    r = subprocess.run([*_cli(), "audit", "p1_table2_strong_tail", "--row", "model=tiny", "--column", "strong", "--no-tensors",
                        "--json", "-d", str(w)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    rep = json.loads(r.stdout)
    assert rep["ok"] is False
    bad = [s for s in rep["inputs"]["shards"] if s["status"] != "ok"]
    assert [s["path"] for s in bad] == ["results/shards/paper1_heads/tiny/layer0.parquet"], rep["inputs"]
    assert any("layer0.parquet is damaged" in x for x in rep["integrity"])


def test_tampered_shard_is_a_mismatch(run, tmp_path):
    w = copy_run(run, tmp_path / "run")
    shard = w / "results/shards/paper1_heads/tiny/layer1.parquet"
    t = pq.read_table(shard)
    P = t.column("P").to_numpy().copy()
    assert abs(P[3] - 1.0) < 1e-9  # the planted closed head
    P[3] = 0.5
    # rewritten as a job writes a shard (with a content record of its own): sound by itself, but not
    # the shard the table was built from
    cols = {c: t.column(c).to_numpy(zero_copy_only=False) for c in t.column_names}
    write_shard(shard, {**cols, "P": P}, json.loads(t.schema.metadata[b"headgeom"]))
    res = audit(w, "p1_table2_strong_tail", {"model": "tiny"}, "strong", find_rows=False)
    text = "\n".join(render_full(res))
    assert not res.ok
    assert res.verdicts.shards.ok is False and res.verdicts.shards.value == "1"  # the table says 2
    assert res.verdicts.tensors.ok is True  # the tensors still give the published number
    assert any("layer1.parquet: file sha256 differs" in x for x in res.integrity)
    assert "sha256 DIFFERS from sidecar" in text and "MISMATCH" in text
    # the CLI exits 1
    r = subprocess.run([sys.executable, "-m", "headgeom.cli", "audit", "p1_table2_strong_tail", "--row", "model=tiny",
                        "--column", "strong", "-d", str(w), "--no-tensors"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "MISMATCH" in r.stdout
    # rewritten with pyarrow alone (no content record): named as damaged, and not recomputed from
    pq.write_table(pq.read_table(shard), shard)
    res = audit(w, "p1_table2_strong_tail", {"model": "tiny"}, "strong", tensors=False)
    assert not res.ok and res.verdicts.shards.ok is False and res.verdicts.shards.verdict == "DAMAGED"
    assert "an input is damaged" in res.verdicts.shards.how and "has no content record" in res.verdicts.shards.how
    assert any("layer1.parquet is damaged: has no content record" in x for x in res.integrity)


def test_tampered_tensor_store_fails_the_tensor_recompute(run, tmp_path):
    w = copy_run(run, tmp_path / "run")
    store = w / "results/tensors/tiny/tensors.safetensors"
    b = bytearray(store.read_bytes())
    b[-8:] = bytes(8)  # the last tensor's last bytes
    store.write_bytes(bytes(b))
    res = audit(w, "p1_table2_strong_tail", {"model": "tiny"}, "strong", find_rows=False)
    text = "\n".join(render_full(res))
    assert res.verdicts.shards.ok and not res.verdicts.tensors.ok and not res.ok, text
    assert "could not recompute" in res.verdicts.tensors.how and "DIFFERS from manifest" in text


def test_audit_errors_name_what_is_there(run):
    with pytest.raises(AuditError, match="no column"):
        audit(run, "p1_table2_strong_tail", {"model": "tiny"}, "nope")
    with pytest.raises(AuditError, match="no table"):
        audit(run, "no_such_table", {}, "x")


# ------------------------------------------------------------------ sidecars and the report


def _outputs(run):
    tables = sorted(p.stem for p in (run / "results/tables").glob("*.csv"))
    figures = sorted(p.stem for p in (run / "figures").glob("*.png"))
    return tables, figures


def test_every_table_and_figure_has_a_provenance_sidecar(run):
    tables, figures = _outputs(run)
    assert "claims" in tables and "p1_table2_strong_tail" in tables and "pk_fig3_r" in figures
    for t in tables:
        prov = json.loads((run / f"results/tables/{t}.prov.json").read_text())
        assert prov["code"]["source_sha256"] and "params" in prov and "inputs" in prov, t
        if t != "claims":
            assert prov["aggregation"] and prov["columns"], t
    for f in figures:
        prov = json.loads((run / f"figures/{f}.prov.json").read_text())
        assert "params" in prov and prov["inputs"] and prov["code"]["source_sha256"], f
        for rec in prov["inputs"]:
            assert rec["sha256"] and rec["provenance"]["code"], f


def test_every_table_and_figure_has_its_own_caption(root, run):
    tables, figures = _outputs(run)
    have = {p.stem for p in (root / "workflow/report/captions").glob("*.rst")}
    # claims and choice_sensitivity read the ledger, not shards: their captions are workflow/report/table_*.rst
    missing = [f"table_{t}" for t in tables if f"table_{t}" not in have and t not in ("claims", "choice_sensitivity")] + [
        f"figure_{f}" for f in figures if f"figure_{f}" not in have]
    assert not missing, f"give {missing} a caption in headgeom/outputs/ and run `headgeom docs`"


def _report(snakemake_bin, root, run, tmp_path):
    w = copy_run(run, tmp_path / "run")
    snakemake(snakemake_bin, root, w, "--report", "report.html")
    html = (w / "report.html").read_text()
    m = re.search(r'<script id="results">\s*var results = (\{.*?\});?\s*</script>', html, re.S)
    assert m, "no results block in report.html"
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def report_results(snakemake_bin, root, run, tmp_path_factory):
    return _report(snakemake_bin, root, run, tmp_path_factory.mktemp("report"))


def test_report_lists_every_table_and_figure_with_a_caption(run, report_results):
    tables, figures = _outputs(run)
    # the report shows each table as its HTML rendering (results/tables/<name>.html)
    want = [f"results/tables/{t}.html" for t in tables if not t.startswith("p1_")] + [
        f"figures/{f}.png" for f in figures if not f.startswith("p1_")]
    missing = [p for p in want if p not in report_results]
    assert not missing, missing
    for p in want:
        cap = report_results[p]["caption"]
        assert len(re.sub("<[^>]+>", "", cap)) > 60 and "No caption written" not in cap, (p, cap)
    assert "t = 0.9" in report_results["results/tables/p1_table2_strong_tail.html"]["caption"]


def test_report_lists_paper1_tables_and_figures(run, report_results):
    tables, figures = _outputs(run)
    want = [f"results/tables/{t}.html" for t in tables if t.startswith("p1_")] + [
        f"figures/{f}.png" for f in figures if f.startswith("p1_")]
    assert want and not [p for p in want if p not in report_results]
