"""Per-model designs (issue 13 item 1): `--configfile config/models.yaml config/paper.yaml` schedules
exactly each paper's design. Small synthetic checkpoints stand in for Qwen3-235B-A22B (writing
spaces of every layer, nulls on writing spaces at layer 46 only, 3 samples, nothing else null, no
cross-layer comparison) and Qwen2.5-7B (O/Q/K/V pairs, Q and K within-layer nulls at every layer,
cross-layer pairs and nulls, 30 samples, no paper 1 jobs), under config/paper.yaml's own
`scopes:` entries; the dry run's job list, `headgeom plan` and one real null job are checked."""

from __future__ import annotations

import pytest
import yaml

from headgeom.core.errors import ConfigError
from headgeom.commands import plan as P
from headgeom.core import config as CF
from headgeom.schedule import designs
from headgeom.schedule.families import JOBS
from synth import write_llama
from test_plan import _dry_run
from tinyrun import snakemake

pytestmark = pytest.mark.slow

Q3, Q7 = "qwen3-235b-a22b", "qwen2.5-7b"
L3, L7 = 48, 4  # layer 46 must exist in the Qwen3 stand-in


def _expected(fields7) -> set[tuple[str, str]]:
    """(rule, output) of every per-layer job of the papers' design, written out by hand."""
    jobs = {("pk_within_layer", f"results/shards/pk_within/{Q3}/layer{l}.parquet") for l in range(L3)}
    jobs |= {("pk_null_within", f"results/shards/pk_null_within/{Q3}/layer46/block0.parquet")}
    jobs |= {(r, f"results/shards/{fam}/{Q3}/layer{l}.parquet") for l in range(L3)
             for r, fam in (("paper1_heads", "paper1_heads"), ("paper1_capacity", "paper1_capacity"))}
    jobs |= {("pk_within_layer", f"results/shards/pk_within/{Q7}/layer{l}.parquet") for l in range(L7)}
    # 30 samples in blocks of 10 (config/paper.yaml): blocks 0, 1, 2
    jobs |= {("pk_null_within", f"results/shards/pk_null_within/{Q7}/layer{l}/block{b}.parquet")
             for l in range(L7) for b in range(3)}
    jobs |= {("pk_cross_layer", f"results/shards/pk_cross/{Q7}/part0.parquet")}  # 6 layer pairs: one part
    # cross-layer nulls: one sample a job (pk.nulls.cross_samples_per_job) lays the stand-in's 6 layer pairs out as
    # one part, and 10 of its samples are within the least a job asks for: blocks of samples_per_job, 0, 1, 2
    jobs |= {("pk_null_cross", f"results/shards/pk_null_cross/{Q7}/block{b}/part0.parquet") for b in range(3)}
    return jobs


@pytest.fixture(scope="module")
def paper_design(tmp_path_factory, snakemake_bin, root):
    w = tmp_path_factory.mktemp("scopes")
    write_llama(w / "q3", n_layers=L3, d_model=16, n_heads=4, n_kv=2, d_head=8, closed=())  # H d = 2 D, as Qwen3-235B
    write_llama(w / "q7", n_layers=L7, d_model=24, n_heads=4, n_kv=2, d_head=6, closed=())
    # the registry entries of config/models.yaml, pointed at the stand-ins
    cfg = {"models": {Q3: {"source": "local", "path": str(w / "q3")}, Q7: {"source": "local", "path": str(w / "q7")}},
           "active_models": [Q3, Q7], "activation": {"enabled": False}}
    (w / "standins.yaml").write_text(yaml.safe_dump(cfg))
    files = [str(root / "config" / "models.yaml"), str(root / "config" / "paper.yaml"), "standins.yaml"]
    for m in (Q3, Q7):
        snakemake(snakemake_bin, root, w, f"results/tensors/{m}/manifest.json", configfiles=files)
    r = snakemake(snakemake_bin, root, w, "-n", configfiles=files)
    dry = {o: j for o, j in _dry_run(r.stdout + r.stderr).items() if j["rule"] in JOBS}
    config = CF.load_config([root / "config" / "models.yaml", root / "config" / "paper.yaml", w / "standins.yaml"])
    return {"w": w, "files": files, "dry": dry, "config": config}


def test_dry_run_schedules_exactly_the_papers_design(paper_design):
    dry = paper_design["dry"]
    assert {(j["rule"], o) for o, j in dry.items()} == _expected(None)


def test_plan_lists_the_same_jobs_with_the_same_resources(paper_design):
    p = P.plan(paper_design["config"], paper_design["w"])
    planned = {j.output: j for j in p["jobs"]}
    dry = paper_design["dry"]
    assert planned.keys() == dry.keys()
    for o, j in planned.items():
        assert (j.rule, j.mem_mb, j.runtime) == (dry[o]["rule"], dry[o]["mem_mb"], dry[o]["runtime"]), o
    assert "at layers 46, n = 3; no cross nulls" in p["models"][Q3]["design"]


def test_qwen3_null_job_draws_writing_spaces_only_three_samples(paper_design, snakemake_bin, root):
    """The one null job runs with the design's params: kind O, samples 0..2, both null types;
    Table 4 then has the paper's Qwen3 row (1 condition, 3 samples per null)."""
    from headgeom.io.shards import read_shard

    w = paper_design["w"]
    (w / "q3only.yaml").write_text(yaml.safe_dump({"active_models": [Q3]}))  # keep the run small
    shard = f"results/shards/pk_null_within/{Q3}/layer46/block0.parquet"
    snakemake(snakemake_bin, root, w, shard, "results/tables/pk_table4_null_summary.csv",
              "results/tables/pk_fig3_fig9_conditions.csv", configfiles=paper_design["files"] + ["q3only.yaml"])
    t, prov = read_shard(w / shard)
    cols = t.to_pydict()
    assert set(cols["kind"]) == {"O"} and sorted(set(cols["sample"])) == [0, 1, 2]
    assert sorted(set(cols["null"])) == ["reassign", "rotation"] and set(cols["layer"]) == {46}
    assert prov["params"]["kinds"] == ["O"] and prov["params"]["samples"] == [0, 1, 2]
    import csv

    rows = list(csv.DictReader(open(w / "results/tables/pk_table4_null_summary.csv")))
    q3 = [r for r in rows if r["model"] == Q3]
    assert len(q3) == 1 and q3[0]["conditions"] == "1" and q3[0]["samples"] == "3"
    assert {r["model"] for r in rows} == {Q3}
    # n beside every r of the conditions table
    cond = [r for r in csv.DictReader(open(w / "results/tables/pk_fig3_fig9_conditions.csv")) if r["r"] not in ("", "–")]
    assert cond and all(r["n_samples"] for r in cond)
    assert {r["n_samples"] for r in cond if r["model"] == Q3} == {"3"}


def test_layer_lists_and_errors():
    assert designs.layer_list(None, 3) == [0, 1, 2]
    assert designs.layer_list([5, "0-2", 1], 6) == [0, 1, 2, 5]
    with pytest.raises(ConfigError, match="outside the model"):
        designs.layer_list([46], 10, "pk.nulls.within_layers of 'm'")
    with pytest.raises(ConfigError, match="empty range"):
        designs.layer_list(["4-2"], 10)


def test_no_scope_is_the_global_design():
    config = CF.load_config()
    fields = {"n_layers": 3, "d_model": 48, "n_heads": 4, "n_kv_heads": 2, "d_head": 12}
    m = config["active_models"][0]
    assert designs.model_config(config, m) is config
    assert all(designs.runs(j, config, m) for j in JOBS)
    nulls = config["pk"]["nulls"]
    n_blk = -(-nulls["within_samples"] // nulls["samples_per_job"])
    assert len(designs.job_wildcards("pk_null_within", config, m, fields)) == 3 * n_blk
    # a model-entry scope and the top-level scopes merge; later wins
    config = CF.load_config(overrides={"models": {m: {"design": {"pk": {"nulls": {"within_samples": 1, "types": ["rotation"]}}}}},
                                      "designs": {m: {"pk": {"nulls": {"within_samples": 2}}}}})
    n = designs.model_config(config, m)["pk"]["nulls"]
    assert (n["within_samples"], n["types"]) == (2, ["rotation"])


def test_by_layer_null_settings_reach_the_jobs(tmp_path, snakemake_bin, root):
    """pk.nulls.by_layer: layer 1 gets writing-space nulls with 3 samples (one job of 3), layer 2
    none, layer 0 the model's own (Q and K, 2 samples); the dry run, the plan and the job's
    shard agree."""
    from headgeom.io.shards import read_shard

    write_llama(tmp_path / "ck", n_layers=3, d_model=24, n_heads=4, n_kv=2, d_head=6, closed=())
    cfg = {"models": {"m": {"source": "local", "path": str(tmp_path / "ck")}}, "active_models": ["m"],
           "activation": {"enabled": False},
           "designs": {"m": {"stages": ["pk"], "pk": {"cross_kinds": [], "nulls": {
               "within_kinds": ["Q", "K"], "within_samples": 2, "samples_per_job": 2,
               "by_layer": [{"layers": ["1-2"], "within_kinds": ["O"], "within_samples": 3, "samples_per_job": 3},
                            {"layers": [2], "within_samples": 0}]}}}}}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    snakemake(snakemake_bin, root, tmp_path, "results/tensors/m/manifest.json")
    r = snakemake(snakemake_bin, root, tmp_path, "-n")
    dry = {o: j for o, j in _dry_run(r.stdout + r.stderr).items() if j["rule"] == "pk_null_within"}
    assert set(dry) == {"results/shards/pk_null_within/m/layer0/block0.parquet",
                        "results/shards/pk_null_within/m/layer1/block0.parquet"}
    p = P.plan(CF.load_config([tmp_path / "cfg.yaml"]), tmp_path)
    assert {j.output for j in p["jobs"] if j.rule == "pk_null_within"} == set(dry)
    snakemake(snakemake_bin, root, tmp_path, *sorted(dry))
    for layer, kinds, samples in ((0, ["K", "Q"], [0, 1]), (1, ["O"], [0, 1, 2])):
        t, prov = read_shard(tmp_path / f"results/shards/pk_null_within/m/layer{layer}/block0.parquet")
        cols = t.to_pydict()
        assert sorted(set(cols["kind"])) == kinds and sorted(set(cols["sample"])) == samples
        assert prov["params"]["samples"] == samples
