"""Snakemake end to end on a tiny synthetic checkpoint in a temp dir."""

import csv
import json
import subprocess

import numpy as np
import pytest
import yaml

from headgeom.io.shards import read_shard
from headgeom.commands.timings import timings
from synth import write_llama

pytestmark = pytest.mark.slow


def _run(snakemake_bin, root, workdir, *args, timeout=600):
    # targets and flags first: --configfile takes every word after it
    cmd = [snakemake_bin, *args, "-s", str(root / "Snakefile"), "-d", str(workdir), "-c2", "--configfile",
           str(workdir / "cfg.yaml")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    return r.stdout + r.stderr


@pytest.fixture
def tiny(tmp_path):
    ckpt = tmp_path / "ckpt"
    # two exactly closed heads planted: layer 0 head 0, layer 1 head 3
    write_llama(ckpt, closed=((0, 0, 1.5), (1, 3, -0.8)), shards=2)
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump({
        "models": {"tiny": {"source": "local", "path": str(ckpt)}},
        "active_models": ["tiny"],
    }))
    return tmp_path


def test_local_checkpoint_end_to_end(snakemake_bin, root, tiny):
    _run(snakemake_bin, root, tiny)
    for family in ("paper1_heads", "pk_within"):
        for layer in (0, 1):
            assert (tiny / f"results/shards/{family}/tiny/layer{layer}.parquet").exists()
    assert not (tiny / "results/shards/closure").exists()  # closure is computed once per layer, in paper1_heads
    t, prov = read_shard(tiny / "results/shards/paper1_heads/tiny/layer1.parquet")
    assert {"model", "layer", "head", "kv_group", "P", "alpha", "g_T", "P_wrong_v"} <= set(t.column_names)
    assert prov["model"] == "tiny" and prov["layer"] == 1
    assert {k: prov["params"][k] for k in ("identity_rtol", "rank_rtol")} == {"identity_rtol": 1e-10, "rank_rtol": 1e-6}
    assert prov["code"]["source_sha256"] and prov["model_source"]["source"]["type"] == "local"
    assert set(prov["tensors"]) == {f"model.layers.1.self_attn.{x}_proj.weight" for x in "qkvo"} | {"model.layers.1.input_layernorm.weight"}
    P = np.asarray(t.column("P"))
    assert np.isclose(P[3], 1.0) and np.isclose(np.asarray(t.column("alpha"))[3], -0.8)
    pk_t, _ = read_shard(tiny / "results/shards/pk_within/tiny/layer0.parquet")
    assert {"model", "layer", "kind", "head_i", "head_j", "pk", "rho", "min_angle_deg"} <= set(pk_t.column_names)
    assert sorted(set(pk_t.column("kind").to_pylist())) == ["K", "O", "Q", "V"]

    rows = list(csv.DictReader(open(tiny / "results/tables/p1_table2_strong_tail.csv")))
    assert len(rows) == 1 and rows[0]["model"] == "tiny"
    assert int(rows[0]["heads"]) == 8 and int(rows[0]["strong"]) == 2  # exactly the planted heads
    assert float(rows[0]["neg_alpha"]) == 0.5
    prov_t = json.loads((tiny / "results/tables/p1_table2_strong_tail.prov.json").read_text())
    assert len(prov_t["inputs"]) == 2 and prov_t["params"] == {
        "strong_threshold": 0.9, "sweep": [0.75, 0.775, 0.8, 0.825, 0.85, 0.875, 0.9, 0.925, 0.95, 0.975],
        "choices": {"return_gain": "rms", "isotropy": "participation", "factorial_contrast": "interaction"}}
    pkw = list(csv.DictReader(open(tiny / "results/tables/pk_table5_writing.csv")))
    assert pkw[0]["D"] == "48" and pkw[0]["d"] == "12" and int(pkw[0]["layers"]) == 2
    for ext in ("md", "tex"):
        assert "tiny" in (tiny / f"results/tables/p1_table2_strong_tail.{ext}").read_text()
    for fig in ("p1_fig_closure_ccdf", "pk_fig_rho_ccdf_layer"):
        assert (tiny / f"figures/{fig}.png").stat().st_size > 1000
        assert (tiny / f"figures/{fig}.pdf").stat().st_size > 1000
    # PK suite: every layer and layer pair has its statistics and null comparison
    conds = list(csv.DictReader(open(tiny / "results/tables/pk_fig3_fig9_conditions.csv")))
    assert len(conds) == 2 * 4 + 1 * 3  # 2 layers x O/Q/K/V within, 1 layer pair x Q/K/V across
    assert all(c["r"] not in ("", "nan") for c in conds if c["kind"] != "K" and c["kind"] != "V")
    ranks = {(r["kind"]): r for r in csv.DictReader(open(tiny / "results/tables/pk_sec5_1_ranks.csv"))}
    assert ranks["O"]["rank_min"] == "12" and ranks["O"]["expected"] == "0" and ranks["K"]["rank_max"] == "12"
    # W_O^l's singular values against numpy's SVD of the stored output projection, head by head side by side
    from headgeom.io.store import TensorStore

    spec = list(csv.DictReader(open(tiny / "results/tables/pk_sec5_3_wo_spectrum.csv")))
    assert [r["layer"] for r in spec] == ["0", "1"]
    for r in spec:
        W_O = TensorStore(tiny / "results/tensors/tiny").layer_factors(int(r["layer"])).W_O
        sv = np.linalg.svd(np.hstack(list(W_O)), compute_uv=False)
        assert [float(r[k]) for k in ("s1", "s2", "s3")] == pytest.approx(sv[:3], rel=1e-9)
        assert float(r["median"]) == pytest.approx(np.median(sv), rel=1e-9) and int(r["n"]) == sv.size
    t4 = list(csv.DictReader(open(tiny / "results/tables/pk_table4_null_summary.csv")))
    assert {r["comparison"] for r in t4} >= {"writing, within layer", "writing -> Q, across layers"}
    # where the run's time went, from its own logs: every job of every rule wrote its timing line
    rows, _ = timings(tiny)
    by = {r["rule"]: r for r in rows}
    assert {"fetch", "pk_within_layer", "paper1_heads", "table_p1_table2_strong_tail", "summary"} <= set(by)
    assert by["pk_within_layer"]["jobs"] == 2 and by["all"]["timed"] == 0  # `all` has no log
    assert all(r["timed"] == r["jobs"] for r in rows if r["rule"] not in ("all", "total")), rows
    assert 0 < by["total"]["work_s"] <= by["total"]["wall_s"] + by["total"]["jobs"]  # 1-s stamps
    assert 0 < by["total"]["startup_s"] <= by["total"]["wall_s"] + by["total"]["jobs"]
    # nothing left to do: every target of headgeom.targets.all_targets was built
    assert "Nothing to be done" in _run(snakemake_bin, root, tiny, "-n")


def test_single_table_target_builds_only_its_dag(snakemake_bin, root, tiny):
    out = _run(snakemake_bin, root, tiny, "results/tables/p1_table2_strong_tail.csv")
    assert (tiny / "results/tables/p1_table2_strong_tail.csv").exists()
    assert not (tiny / "results/shards/pk_within").exists()
    assert not (tiny / "figures/p1_fig_closure_ccdf.png").exists()
    assert "pk_within_layer" not in out


def test_bad_config_names_the_key(snakemake_bin, root, tmp_path):
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump({"tables": {"strong_threshold": 1.5, "small_angle_deg": 10.0}}))
    r = subprocess.run([snakemake_bin, "-s", str(root / "Snakefile"), "-d", str(tmp_path), "-n", "--configfile",
                        str(tmp_path / "cfg.yaml")], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "strong_threshold" in r.stdout + r.stderr
