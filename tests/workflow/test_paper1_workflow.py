"""Paper 1 rules end to end on a tiny synthetic GQA checkpoint (4 query / 2 KV heads, planted
closed heads) and a synthetic lineage of three checkpoints made here."""

import csv
import json
import subprocess

import numpy as np
import pytest
import yaml

from headgeom.methods import paper1 as P1
from headgeom.io.shards import read_shard
from headgeom.io.store import TensorStore
from synth import write_llama

pytestmark = pytest.mark.slow

TABLES = ["p1_table2_strong_tail", "p1_table3_trajectories", "p1_table4_sibling_law", "p1_threshold_sweep", "p1_orientation_scramble", "p1_orientation_layers",
          "p1_factorial", "p1_capacity", "p1_latent_closure", "p1_anchors"]
FIGURES = ["p1_fig_closure_ccdf", "p1_fig_orientation_scramble", "p1_fig_capacity", "p1_fig_sibling_law"]
TARGETS = [f"results/tables/{t}.csv" for t in TABLES] + [f"figures/{f}.png" for f in FIGURES]


def _run(snakemake_bin, root, workdir, *args, ok=True, timeout=600):
    cmd = [snakemake_bin, *args, "-s", str(root / "Snakefile"), "-d", str(workdir), "-c2", "--configfile",
           str(workdir / "cfg.yaml")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if ok:
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    return r


def _rows(path):
    return list(csv.DictReader(open(path)))


@pytest.fixture(scope="module")
def lineage(tmp_path_factory):
    """Final checkpoint 'tiny' (closed heads L0 h0, L1 h3) and two earlier checkpoints of the same
    run: the same random weights, with the closed heads not yet (ck0) or half (ck1) formed."""
    tmp = tmp_path_factory.mktemp("p1")
    final = ((0, 0, 1.5), (1, 3, -0.8))
    write_llama(tmp / "ck0", closed=())
    write_llama(tmp / "ck1", closed=final[:1])
    write_llama(tmp / "final", closed=final)
    cfg = {
        "models": {"tiny-ck0": {"source": "local", "path": str(tmp / "ck0")},
                   "tiny-ck1": {"source": "local", "path": str(tmp / "ck1")},
                   "tiny": {"source": "local", "path": str(tmp / "final")}},
        "active_models": ["tiny"],
        "paper1": {"capacity": {"restarts": 2, "iters": 15, "sample_per_layer": 2}, "bootstrap": 200,
                   "lineages": {"tinyline": ["tiny-ck0", "tiny-ck1", "tiny"]}},
    }
    (tmp / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    return tmp


def test_paper1_rules_end_to_end(snakemake_bin, root, lineage):
    w = lineage
    _run(snakemake_bin, root, w, *TARGETS)
    for t in TABLES:
        for ext in ("csv", "md", "tex", "prov.json"):
            assert (w / f"results/tables/{t}.{ext}").stat().st_size > 100, t
    for f in FIGURES:
        for ext in ("png", "pdf"):
            assert (w / f"figures/{f}.{ext}").stat().st_size > 1000
        assert json.loads((w / f"figures/{f}.prov.json").read_text())["inputs"]

    # shards: one per model x layer, provenance with the params each job used
    t, prov = read_shard(w / "results/shards/paper1_heads/tiny/layer1.parquet")
    assert prov["job"] == "paper1_heads" and prov["model"] == "tiny" and prov["layer"] == 1
    assert prov["params"]["scramble_draws"] == 8 and prov["params"]["haar_draws"] == 2
    assert prov["code"]["source_sha256"] and prov["model_source"]["source"]["type"] == "local"
    cols = {c: t.column(c).to_pylist() for c in t.column_names}
    assert np.isclose(cols["P"][3], 1.0) and all(len(x) == 8 for x in cols["P_scramble"])
    assert max(cols["sv_relerr"]) < 1e-12 and max(cols["split_relerr"]) < 1e-8
    for m in ("tiny-ck0", "tiny-ck1", "tiny"):
        for layer in (0, 1):
            _, cp = read_shard(w / f"results/shards/paper1_capacity/{m}/layer{layer}.parquet")
            assert cp["params"]["final_model"] == "tiny" and cp["params"]["iters"] == 15
    assert not (w / "results/shards/paper1_heads/tiny-ck0").exists()  # lineage checkpoints: capacity only

    # the job's numbers are the library's numbers (same seeds in any process, executor or order)
    f = TensorStore(w / "results/tensors/tiny").layer_factors(1)
    heads, pairs = P1.heads_layer(f, "tiny", 1, prov["params"])
    assert [list(x) for x in heads["P_scramble"]] == cols["P_scramble"]
    assert heads["I_factorial"].tolist() == cols["I_factorial"]

    # Table 2: exactly the planted heads
    t2 = _rows(w / "results/tables/p1_table2_strong_tail.csv")
    assert len(t2) == 1 and t2[0]["strong"] == "2" and t2[0]["heads"] == "8" and float(t2[0]["neg_alpha"]) == 0.5

    # Table 3: the lineage in order, groups fixed at the final checkpoint
    t3 = _rows(w / "results/tables/p1_table3_trajectories.csv")
    assert [r["checkpoint"] for r in t3] == ["tiny-ck0", "tiny-ck1", "tiny"] and {r["lineage"] for r in t3} == {"tinyline"}
    assert {r["n_strong"] for r in t3} == {"2"} and {r["layers"] for r in t3} == {"2"}
    assert float(t3[0]["P_s"]) < 0.9 and np.isclose(float(t3[2]["P_s"]), 1.0)
    assert np.isclose(float(t3[2]["E_s"]), 1.0) and float(t3[2]["e_gap"]) > float(t3[0]["e_gap"])
    assert float(t3[2]["e_lo"]) <= float(t3[2]["e_gap"]) <= float(t3[2]["e_hi"])
    prov3 = json.loads((w / "results/tables/p1_table3_trajectories.prov.json").read_text())
    assert prov3["params"]["lineages"] == {"tinyline": ["tiny-ck0", "tiny-ck1", "tiny"]}
    assert len(prov3["inputs"]) == 6  # 3 checkpoints x 2 layers
    assert prov3["aggregation"] == ("headgeom.outputs: table 'p1_table3_trajectories' "
                                   "(headgeom.outputs.paper1.capacity.p1_table3_trajectories)")

    # Table 4: an exactly closed right head passes its gain to its sibling (F = rho = 1)
    t4 = _rows(w / "results/tables/p1_table4_sibling_law.csv")
    assert t4[0]["right"] == "2" and t4[0]["comp"] == "2"
    assert np.isclose(float(t4[0]["F"]), 1.0) and np.isclose(float(t4[0]["rho"]), 1.0)
    assert abs(float(t4[0]["rho_ctrl"])) < 0.5
    an = _rows(w / "results/tables/p1_anchors.csv")[0]
    assert an["rank1"] == "2/2" and np.isclose(float(an["anchor"]), 1.0)
    cap = _rows(w / "results/tables/p1_capacity.csv")[0]
    assert cap["n_strong"] == "2" and cap["n_matched"] == "2" and cap["n_sample"] == "4"

    # one table alone: only its own rule reruns (nothing upstream is stale either)
    for ext in ("csv", "md", "tex", "prov.json"):
        (w / f"results/tables/p1_table4_sibling_law.{ext}").unlink()
    r = _run(snakemake_bin, root, w, "results/tables/p1_table4_sibling_law.csv")
    out = r.stdout + r.stderr
    assert "localrule table_p1_table4_sibling_law:" in out
    for other in ("rule paper1_heads:", "rule paper1_capacity:", "fetch:", "rule table_p1_table2_strong_tail:"):
        assert other not in out
    assert (w / "results/tables/p1_table4_sibling_law.md").exists()


def test_bad_lineage_names_the_key(snakemake_bin, root, tmp_path):
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump({"paper1": {"lineages": {"broken": ["no-such-model"]}}}))
    r = _run(snakemake_bin, root, tmp_path, "-n", ok=False, timeout=120)
    assert r.returncode != 0 and "paper1.lineages.broken" in r.stdout + r.stderr
