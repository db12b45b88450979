"""Switches of the reconstructed choices (issue 13 item 5): each alternative checked against an
independent computation, the default leaves the columns untouched, and the sensitivity table
names exactly the claims an alternative moves."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.linalg import subspace_angles

from headgeom.core.errors import ConfigError
from headgeom.methods import closure as C
from headgeom.methods.paper1.factorial import contrasts
from headgeom.outputs.choices import DEFAULTS, apply
from head_grams import toy_factors
from headgeom.publish import choice_sensitivity as CS
from headgeom.verify import sensitivity as CH



def test_isotropy_min_max_from_principal_angles():
    """I_D_minmax = cos(largest principal angle) / cos(smallest) between span O_h and span V_g
    (scipy's subspace angles, not headgeom's principal coordinates)."""
    f = toy_factors()
    out = C.closure_layer(f)
    for h in range(4):
        ang = subspace_angles(f.W_O[h], f.W_V[f.kv_group[h]].T)
        assert out["I_D_minmax"][h] == pytest.approx(np.cos(ang.max()) / np.cos(ang.min()), rel=1e-9)
        cos = np.cos(ang)
        assert out["I_D"][h] == pytest.approx(cos.sum() ** 2 / (6 * (cos ** 2).sum()), rel=1e-9)


def test_factorial_contrasts_by_explicit_loops():
    S = np.random.default_rng(3).random((5, 5))
    got = contrasts(S)
    n = 5
    for h in range(n):
        off_row = np.mean([S[h, j] for j in range(n) if j != h])
        off_col = np.mean([S[i, h] for i in range(n) if i != h])
        rest = np.mean([S[i, j] for i in range(n) for j in range(n) if i != h and j != h])
        assert got["row"][h] == pytest.approx(S[h, h] - off_row)
        assert got["column"][h] == pytest.approx(S[h, h] - off_col)
        assert got["interaction"][h] == pytest.approx(S[h, h] - off_row - off_col + rest)


def test_apply_picks_the_alternative_columns_and_default_is_identity():
    cols = {"g_T": np.array([1.0, 2.0]), "alpha": np.array([-0.5, 3.0]), "I_D": np.array([0.9, 0.8]),
            "I_D_minmax": np.array([0.3, 0.2]), "I_factorial": np.array([0.1, 0.2]),
            "I_factorial_ctrl": np.array([0.0, 0.0]), "I_factorial_row": np.array([1.0, 1.1]),
            "I_factorial_ctrl_row": np.array([2.0, 2.1]), "I_factorial_column": np.array([3.0, 3.1]),
            "I_factorial_ctrl_column": np.array([4.0, 4.1])}
    assert apply(cols, DEFAULTS) is cols
    out = apply(cols, {"return_gain": "fitted", "isotropy": "min_max", "factorial_contrast": "column"})
    assert out["g_T"].tolist() == [0.5, 3.0] and out["I_D"].tolist() == [0.3, 0.2]
    assert out["I_factorial"].tolist() == [3.0, 3.1] and out["I_factorial_ctrl"].tolist() == [4.0, 4.1]
    assert cols["g_T"].tolist() == [1.0, 2.0]  # the input is not changed
    with pytest.raises(ConfigError, match="choices.isotropy"):
        apply(cols, {"isotropy": "nope"})
    with pytest.raises(ConfigError, match="rerun the paper1_heads"):
        apply({"g_T": cols["g_T"], "alpha": cols["alpha"]}, {"isotropy": "min_max"})


# ------------------------------------------------------------------ table-param switches (the band)


def _anchor_workdir(root, c=0.74):
    """A workdir holding the p1_anchors table (with its sidecar) built from the shards of one
    planted layer (tests/unit/outputs/test_figs_tables.py::_membership_layer): three exactly closed siblings
    in group 0 (a band pair under every reading) and in group 1 a strong pair with F_34 ≈ 0.886,
    F_43 = 1 (in the band at τ ≤ 0.85 and under membership 'strong', not at the default τ = 0.9)."""
    import json

    from headgeom.io.shards import write_shard
    from headgeom.methods import paper1 as P1
    from headgeom.outputs import TABLES, build_output
    from test_figs_tables import PARAMS, _membership_layer, _with_model

    heads, pairs = P1.heads_layer(_membership_layer(c=c), "m", 0, PARAMS)
    paths = {}
    for fam, cols in (("paper1_heads", _with_model(heads, "m")), ("paper1_pairs", _with_model(pairs, "m"))):
        rel = f"results/shards/{fam}/m/layer0.parquet"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        write_shard(root / rel, cols, {"model": "m", "layer": 0, "params": {}})
        paths[fam] = rel
    man = root / "results/tensors/m/manifest.json"
    man.parent.mkdir(parents=True)
    man.write_text(json.dumps({"fields": {}}))
    tables = root / "results/tables"
    tables.mkdir(parents=True)
    outputs = {ext: str(tables / f"p1_anchors.{ext}") for ext in ("csv", "md", "tex")}
    outputs["prov"] = str(tables / "p1_anchors.prov.json")
    params = {"strong_threshold": 0.9, "band": {"membership": "explanation", "explanation": 0.9, "min_pairs": 1},
              "choices": dict(DEFAULTS), "pools": {}}
    assert set(TABLES["p1_anchors"].params) == set(params)
    import os

    cwd = os.getcwd()
    os.chdir(root)  # sidecars record shard paths relative to the working directory, as in a run
    try:
        build_output("table", "p1_anchors", {f: [p] for f, p in paths.items()}, [str(man)], ["m"], outputs, params)
    finally:
        os.chdir(cwd)
    return pairs


def test_band_switches_move_exactly_the_band_claims(tmp_path):
    import yaml

    from headgeom.publish.claims import load_ledger

    pairs = _anchor_workdir(tmp_path)
    F = {(int(i), int(j)): float(f) for i, j, f in zip(pairs["head_i"], pairs["head_j"], pairs["F"])}
    assert 0.85 < F[(3, 4)] < 0.9 and F[(4, 3)] > 0.99  # the planted pair sits between the thresholds
    ledger = {"claims": {"p1": [
        {"id": "band.3", "model": "m", "table": "p1_anchors", "column": "law_pairs", "value": 3},
        {"id": "band.4", "model": "m", "table": "p1_anchors", "column": "law_pairs", "value": 4},
        {"id": "strong.4", "model": "m", "table": "p1_anchors", "column": "band_pairs", "value": 4},
    ]}}
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump(ledger))
    t = CH.sensitivity(tmp_path, load_ledger(tmp_path / "claims.yaml"), ["m"])
    rows = {(r["switch"], r["alternative"]): r for r in t.rows}
    moved = "band.3: agrees → differs (3 → 4); band.4: differs → agrees (3 → 4)"
    assert rows[("paper1.band.membership", "strong")]["claims"] == moved
    assert rows[("paper1.band.membership", "strong")]["default"] == "explanation"
    assert ("paper1.band.membership", "explanation") not in rows  # the run's own reading is not an alternative
    assert ("paper1.band.explanation", "0.9") not in rows
    for tau, change in (("0.8", moved), ("0.85", moved), ("0.95", "none")):
        r = rows[("paper1.band.explanation", tau)]
        assert (r["claims"], r["default"], r["tables"], r["claims_read"]) == (change, "0.9", 1, 3)
    # the weight-space choices rebuild the same table and move nothing here
    assert rows[("choices.return_gain", "fitted")]["changed"] == 0
    # no activation tables in this workdir: those switches rebuild nothing
    assert rows[("activation.paper1.endpoint", "median_cos2")]["tables"] == 0
    assert rows[("activation.bos", "false")]["tables"] == 0
    # the alternatives are independent: evaluated in two processes, the same rows in the same order
    assert CH.sensitivity(tmp_path, load_ledger(tmp_path / "claims.yaml"), ["m"], workers=2).rows == t.rows


# ------------------------------------------------------------------ the alternatives as jobs of their own


def test_jobs_one_per_alternative_make_the_same_table_as_one_process(tmp_path):
    """The workflow's way (one ``alternative_job`` per planned alternative, each writing its row,
    then ``aggregate_job``) writes the table ``sensitivity`` makes in one process, byte for byte."""
    import yaml

    from headgeom.publish.claims import load_ledger

    _anchor_workdir(tmp_path)
    ledger = tmp_path / "claims.yaml"
    ledger.write_text(yaml.safe_dump({"claims": {"p1": [
        {"id": "band.3", "model": "m", "table": "p1_anchors", "column": "law_pairs", "value": 3},
        {"id": "band.4", "model": "m", "table": "p1_anchors", "column": "law_pairs", "value": 4}]}}))
    ref = CH.sensitivity(tmp_path, load_ledger(ledger), ["m"], tables=["p1_anchors"])
    cfg = {"paper1": {"band": {"membership": "explanation", "explanation": 0.9}}}
    alts = CS.planned(cfg, {"p1_anchors"}, [])
    assert [a.id for a in alts] == [f"{r['switch']}={r['alternative']}" for r in ref.rows]
    rows, said = [], []
    for a in alts:
        row = tmp_path / "results/sensitivity" / a.id / "row.json"
        CH.alternative_job(a.id, ledger, tmp_path, ["m"], row, ["p1_anchors"], tmp_path / "results/sensitivity" / a.id,
                           progress=said.append)
        rows.append(row)
    # progress lines while an alternative runs: each table as it is rebuilt, then the outcome
    assert "[choice_sensitivity] paper1.band.explanation=0.8: rebuilt table p1_anchors" in said
    assert "[choice_sensitivity] paper1.band.explanation=0.8: 1 tables rebuilt, 2 claims change status" in said
    out = {ext: str(tmp_path / f"out.{ext}") for ext in ("csv", "md", "tex", "html")} | {"prov": str(tmp_path / "o.json")}
    lines = []
    CS.aggregate_job(ledger, ["m"], [a.id for a in alts], rows, out, progress=lines.append)
    assert (tmp_path / "out.csv").read_text() == ref.csv() and (tmp_path / "out.md").read_text() == ref.markdown()
    assert "band.3: agrees → differs" in (tmp_path / "out.csv").read_text()
    assert len(lines) == len(alts) and lines[0].startswith(f"[choice_sensitivity] 1/{len(alts)} choices.return_gain")
    # the run's own value is no alternative: a job asked for it names the mismatch
    with pytest.raises(ConfigError, match="paper1.band.explanation=0.9"):
        CH.alternative_job("paper1.band.explanation=0.9", ledger, tmp_path, ["m"], tmp_path / "x.json", ["p1_anchors"],
                           tmp_path / "x", progress=lambda line: None)


def test_planned_alternatives_follow_the_config_and_share_forward_passes():
    """Written out by hand: the alternatives of a config skip its own value, rebuild only the
    tables the run builds, and rerun one forward pass per model and distinct (corpus, windows)."""
    act = {"bos": True, "paper1": {"corpus": "c", "n_windows": 2, "window": 128, "endpoint": "median_cos2"},
           "read_paths": {"corpus": "c", "n_windows": 2, "window": 128, "eps_exact": True}}
    cfg = {"paper1": {"band": {"membership": "strong", "explanation": 0.85}}, "activation": act}
    built = {"p1_anchors", "p1_table2_strong_tail", "p1_activations_natural_return", "pk_sec5_4_read_paths"}
    got = {a.id: a for a in CS.planned(cfg, built, ["a", "b"])}
    assert list(got) == [
        "choices.return_gain=fitted", "choices.isotropy=min_max", "choices.factorial_contrast=row",
        "choices.factorial_contrast=column", "paper1.band.membership=explanation", "paper1.band.explanation=0.8",
        "paper1.band.explanation=0.9", "paper1.band.explanation=0.95", "activation.paper1.endpoint=pooled",
        "activation.read_paths.eps_exact=false", "activation.bos=false"]
    assert got["paper1.band.explanation=0.8"].default == "0.85" and got["paper1.band.explanation=0.8"].tables == ("p1_anchors",)
    assert got["activation.paper1.endpoint=pooled"].kind == "shards"
    assert got["activation.paper1.endpoint=pooled"].tables == ("p1_activations_natural_return",)
    assert got["activation.read_paths.eps_exact=false"].families == ("activation_read_paths",)
    bos = got["activation.bos=false"]
    assert bos.kind == "forward" and bos.forwards == (("a", "c", 2, 128), ("b", "c", 2, 128))  # one per model
    assert set(bos.tables) == {"p1_activations_natural_return", "pk_sec5_4_read_paths"}
    assert "p1_table2_strong_tail" in got["choices.isotropy=min_max"].tables
    # two window shapes: two forward passes per model
    two = {**act, "read_paths": {**act["read_paths"], "n_windows": 3}}
    bos2 = next(a for a in CS.planned({**cfg, "activation": two}, built, ["a"]) if a.kind == "forward")
    assert bos2.forwards == (("a", "c", 2, 128), ("a", "c", 3, 128))
    # no activation models: the activation switches rebuild nothing (their rows still listed)
    none = {a.id: a for a in CS.planned(cfg, built, [])}
    assert none["activation.bos=false"].tables == () and none["activation.bos=false"].forwards == ()
    assert none["activation.paper1.endpoint=median_cos2"].default == "pooled"  # the builder's default then


def test_alternative_costs_sum_the_per_layer_jobs_they_recompute():
    """A shard switch recomputes its family on every layer of every activation model in one job:
    the per-layer jobs' costs (headgeom.schedule.activation_costs, called here directly) summed, beside
    the table rebuild; a table switch costs the rebuild alone; ``headgeom plan`` lists them and the
    forward reruns at the forward step's cost."""
    from headgeom.schedule import activation_costs as AC
    from headgeom.core import config as CF

    cfg = CF.load_config(overrides={"active_models": ["m"], "activation": {"enabled": True, "models": ["m"]}})
    f = {"n_layers": 5, "d_model": 64, "n_heads": 4, "n_kv_heads": 2, "d_head": 16}
    alts = {a.id: a for a in CS.planned(cfg, CS.affected_tables() + CS.activation_tables(), ["m"])}
    rp_tokens = cfg["activation"]["read_paths"]["n_windows"] * cfg["activation"]["read_paths"]["window"]
    nr_tokens = cfg["activation"]["paper1"]["n_windows"] * cfg["activation"]["paper1"]["window"]
    n_kinds = len(cfg["activation"]["read_paths"]["kinds"])
    rp_jobs = [AC.read_paths_resources(f, rp_tokens, n_kinds, layer) for layer in range(5)]
    nr_job = AC.natural_return_resources(f, nr_tokens)
    rp_job = rp_jobs[0]
    # writer layer l reads the 4 - l later layers (the last: none, priced as one)
    work = [j["work_min"] for j in rp_jobs]
    assert work[0] == AC.read_paths_resources(f, rp_tokens, n_kinds)["work_min"]
    np.testing.assert_allclose(work, [work[0] * k / 4 for k in (4, 3, 2, 1, 1)])
    rp, nr = sum(work), 5 * nr_job["work_min"]
    cost = lambda i: CS.alternative_cost(alts[i], {"m": f}, cfg)["runtime"]  # noqa: E731
    assert cost("choices.isotropy=min_max") == CS.TABLES_COST["runtime"]
    # the layers' work added up (one process does them all), not five jobs' runtime floors
    assert cost("activation.read_paths.eps_exact=false") == math.ceil(CS.TABLES_COST["runtime"] + rp)
    assert cost("activation.bos=false") == math.ceil(CS.TABLES_COST["runtime"] + rp + nr)
    assert rp_job["runtime"] == nr_job["runtime"] == 5 and 0 < rp + nr < 1  # tiny layers: floors alone
    assert cost("activation.bos=false") < CS.TABLES_COST["runtime"] + 5 * (rp_job["runtime"] + nr_job["runtime"])
    # memory: the largest layer's job, plus what the process keeps of reader layers where it recomputes read paths
    from headgeom.jobs.activation import READER_TERMS_MB

    mem = lambda i: CS.alternative_cost(alts[i], {"m": f}, cfg)["mem_mb"]  # noqa: E731
    floor = CS.TABLES_COST["mem_mb"]
    assert mem("activation.read_paths.eps_exact=false") == max(floor, *(j["mem_mb"] for j in rp_jobs)) + READER_TERMS_MB
    assert mem("activation.paper1.endpoint=median_cos2") == max(floor, nr_job["mem_mb"])
    jobs = CS.planned_jobs(cfg, {"m": f})
    fwd = [j for j in jobs if j.rule == "sensitivity_forward"]
    assert len(fwd) == len(alts["activation.bos=false"].forwards) >= 1
    assert fwd[0].runtime == AC.forward_resources(f, nr_tokens)["runtime"]
    assert fwd[0].output.startswith("results/sensitivity/activation.bos=false/results/activations/m/")
    assert sorted(j.rule for j in jobs if j.rule != "sensitivity_forward") == sorted(
        ["sensitivity_tables"] * 8 + ["sensitivity_shards"] * 3)


def test_a_table_whose_builder_read_none_of_a_switchs_columns_is_kept_and_the_rows_are_unchanged(tmp_path,
                                                                                                 monkeypatch):
    """The sidecar records the columns the builder read; a choices switch replaces only its own
    columns (apply), so a table that read none of them is its own alternative. Checked: the record
    is what the builder read (every recorded column is a paper1_heads column, the switched ones
    among them exactly where an alternative build changes the CSV), the kept table equals a forced
    rebuild byte for byte, and the sensitivity rows are those of rebuilding every table."""
    import json

    import yaml

    from headgeom.io.shards import read_shard
    from headgeom.outputs.choices import SWITCHES
    from headgeom.verify import audit
    from headgeom.publish.claims import load_ledger

    _anchor_workdir(tmp_path)
    side = json.loads((tmp_path / "results/tables/p1_anchors.prov.json").read_text())
    read = side["columns_read"]["paper1_heads"]
    heads = read_shard(tmp_path / "results/shards/paper1_heads/m/layer0.parquet")[0].column_names
    assert read and set(read) <= set(heads)
    agg = CH._agg(tmp_path, tmp_path / "results/tables", "p1_anchors")
    base = (tmp_path / "results/tables/p1_anchors.csv").read_text()
    for sw in SWITCHES:  # the record against what a forced rebuild with each alternative gives
        for alt in sw.alternatives[1:]:
            out = tmp_path / "forced" / f"{sw.key}={alt}"
            audit.rebuild_table(agg, tmp_path, out, params={**agg.params, "choices": {**DEFAULTS, sw.key: alt}})
            same = (out / "p1_anchors.csv").read_text() == base
            if CH._reads_none_of(agg, sw.columns):
                assert same, (sw.key, alt)
    assert any(CH._reads_none_of(agg, sw.columns) for sw in SWITCHES)  # the case is exercised here
    # a table that reads a switch's columns (p1_factorial: I_factorial) is rebuilt, and it moves
    from headgeom.outputs import build_output

    tables = tmp_path / "results/tables"
    fac = {ext: str(tables / f"p1_factorial.{ext}") for ext in ("csv", "md", "tex")} | {
        "prov": str(tables / "p1_factorial.prov.json")}
    monkeypatch.chdir(tmp_path)
    build_output("table", "p1_factorial", {"paper1_heads": ["results/shards/paper1_heads/m/layer0.parquet"]},
                 ["results/tensors/m/manifest.json"], ["m"], fac, {"choices": dict(DEFAULTS)})
    fagg = CH._agg(tmp_path, tables, "p1_factorial")
    contrast = next(sw for sw in SWITCHES if sw.key == "factorial_contrast")
    assert not CH._reads_none_of(fagg, contrast.columns)
    audit.rebuild_table(fagg, tmp_path, tmp_path / "forced-f", params={"choices": {**DEFAULTS, contrast.key: "row"}})
    assert (tmp_path / "forced-f/p1_factorial.csv").read_text() != (tables / "p1_factorial.csv").read_text()
    monkeypatch.undo()
    ledger = tmp_path / "claims.yaml"
    ledger.write_text(yaml.safe_dump({"claims": {"p1": [
        {"id": "band.3", "model": "m", "table": "p1_anchors", "column": "law_pairs", "value": 3}]}}))
    said = []
    kept = CH.sensitivity(tmp_path, load_ledger(ledger), ["m"], progress=said.append)
    monkeypatch.setattr(CH, "_reads_none_of", lambda agg, columns: False)
    forced = CH.sensitivity(tmp_path, load_ledger(ledger), ["m"])
    assert kept.rows == forced.rows
    # no record (a sidecar written before it was kept): the table is rebuilt
    monkeypatch.undo()
    assert not CH._reads_none_of(audit.Aggregation("p1_anchors", {}, ["m"], []), SWITCHES[0].columns)
