"""The registries (shard families, outputs, null models) are the one place that lists them:
everything else is generated from them, and adding one is one function + one entry."""

from __future__ import annotations

import csv
import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from headgeom.schedule import families as FAM
from headgeom.methods import nulls as N
from headgeom.publish import docs
from headgeom import outputs as O
from headgeom.outputs import registry as REG
from headgeom.outputs.formats import Column, Table
from synth import write_llama

ROOT = Path(__file__).resolve().parents[3]


def test_every_family_has_one_job_and_a_path_with_its_wildcards():
    for name, fam in FAM.SHARD_FAMILIES.items():
        job = FAM.JOBS[fam.job]
        assert fam in job.families
        assert fam.path.startswith(f"results/shards/{name}/{{model}}/")
        want = {"model"} | {w for w in ("layer", "block", "part") if w in fam.grain}
        assert set(re.findall(r"\{(\w+)\}", fam.path)) == want
        assert (job.blocks is not None) == ("block" in fam.grain)
        assert (job.fanout is not None) == ("part" in fam.grain)
    # sibling families of one job share their wildcards (one rule writes them together)
    for job in FAM.JOBS.values():
        assert len({f.grain for f in job.families}) == 1


def test_every_output_reads_registered_families_and_has_a_caption():
    for (kind, name), out in O.OUTPUTS.items():
        assert kind in REG.KINDS and out.name == name
        assert set(out.families) <= set(FAM.SHARD_FAMILIES), (name, out.families)
        assert out.caption.startswith("**"), name
        assert set(out.derived) <= {"pairs"}


def test_config_keys_named_by_the_registries_exist_in_the_default_config():
    import yaml

    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())

    def has(dpath):
        node = cfg
        for k in dpath.split("/"):
            if not isinstance(node, dict) or k not in node:
                return False
            node = node[k]
        return True

    for job in FAM.JOBS.values():
        assert all(has(d) for d in job.params.values()), job.name
    for out in O.OUTPUTS.values():
        assert all(has(d) for d in out.params.values()), out.name
    assert set(cfg["pk"]["nulls"]["types"]) <= set(N.NULL_MODELS)


def test_shard_paths_follow_the_scope():
    assert FAM.shard_paths("pk_cross", "m", 3, parts=2) == [f"results/shards/pk_cross/m/part{p}.parquet" for p in (0, 1)]
    assert FAM.shard_paths("pk_null_cross", "m", 3, {"cross": range(2)}) == [
        "results/shards/pk_null_cross/m/block0/part0.parquet", "results/shards/pk_null_cross/m/block1/part0.parquet"]
    assert len(FAM.shard_paths("pk_null_within", "m", 3, {"within": range(2)})) == 6
    assert FAM.family_of("results/shards/paper1_pairs/m/layer0.parquet").job == "paper1_heads"
    with pytest.raises(KeyError, match="not a shard of a known family"):
        FAM.family_of("results/shards/nope/m/layer0.parquet")
    for old, new in FAM.RENAMED_FAMILIES.items():  # a tree written before the rename
        with pytest.raises(KeyError, match=f"the family '{old}', since renamed '{new}'.*delete results/shards/{old}\\)"):
            FAM.family_of(f"results/shards/{old}/m/layer0.parquet")


def test_generated_docs_and_captions_are_current():
    """docs/outputs.md, docs/config.md and workflow/report/captions/ come from the registries
    and the schema: edit those and run `headgeom docs`."""
    stale = docs.stale(ROOT)
    assert not stale, f"stale generated files (run `.venv/bin/headgeom docs`): {stale}"


def test_every_schema_key_has_a_description():
    import yaml

    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    missing = []

    def walk(node, prefix):
        for k, sub in (node.get("properties") or {}).items():
            if not sub.get("description"):
                missing.append(prefix + k)
            walk(sub, prefix + k + ".")

    walk(schema, "")
    assert not missing, missing


@pytest.fixture
def store(tmp_path):
    from headgeom.io.fetch import fetch_model

    write_llama(tmp_path / "ckpt", n_layers=1, n_heads=4, n_kv=2, d_model=32, d_head=6)
    fetch_model("toy", {"source": "local", "path": str(tmp_path / "ckpt")}, tmp_path / "results/tensors/toy",
                log=lambda *a: None)
    return tmp_path


@pytest.fixture
def registry():
    """The output registry, restored after the test (toy outputs removed)."""
    saved = [(d, dict(d)) for d in (REG.OUTPUTS, REG.TABLES, REG.FIGURES)]
    yield REG
    for d, before in saved:
        d.clear()
        d.update(before)


def test_a_toy_null_model_and_a_toy_table_through_the_registries_alone(store, monkeypatch, registry):
    """One sampler + one NullModel entry makes a null the null job draws; one decorated builder
    makes a table build_output writes. The toy null flips the sign of every column
    of the stacked layer matrix, which leaves every head's space, and so every ρ, unchanged:
    its per-sample mean ρ must equal the observed mean ρ of the same layer (pk_within_layer)."""
    monkeypatch.setattr(N, "NULL_MODELS", dict(N.NULL_MODELS))
    N.register_null(N.NullModel("flip", lambda S, rng: -S, "sign flip"))
    table, _ = registry.decorators("PK paper")

    @table("toy_null_means", families=("pk_within", "pk_null_within"), params={"null_types": "pk/nulls/types"})
    def toy_table(pk_within, pk_null_within, models, null_types):
        """**Toy.** Mean ρ per ``null`` ({{ snakemake.params.null_types|join(', ') }})."""
        nw = pk_null_within
        rows = [{"model": m, "null": t, "kind": "O",
                 "mean": float(np.mean([x for x, n, k in zip(nw["mean"], nw["null"], nw["kind"]) if n == t and k == "O"]))}
                for m in models for t in null_types]
        rows.append({"model": models[0], "null": "observed", "kind": "O",
                     "mean": float(np.mean([r for r, k in zip(pk_within["rho"], pk_within["kind"]) if k == "O"]))})
        return Table(columns=[Column("model", "Model"), Column("null", "Null"),
                              Column("kind", "Kind"), Column("mean", "Mean ρ")], rows=rows)

    assert registry.TABLES["toy_null_means"].caption == "**Toy.** Mean ρ per ``null`` ({{ snakemake.params.null_types|join(', ') }})."

    w = store
    manifest = str(w / "results/tensors/toy/manifest.json")
    paths = {}
    for fam, wc, params in (
        ("pk_within", {"layer": "0"}, {"kinds": ["O"], "rank_rtol": 1e-6, "self_permutations": 10}),
        ("pk_null_within", {"layer": "0", "block": "0"},
         {"types": ["rotation", "flip"], "kinds": ["O"], "rank_rtol": 1e-6, "samples": [0, 1]}),
    ):
        f = FAM.family(fam)
        job = FAM.JOBS[f.job]
        outs = {g.output: str(w / g.path.format(model="toy", **wc)) for g in job.families}
        FAM.run_job(job.name, {"manifest": manifest}, outs, wc, params, log=lambda *a: None)
        paths[fam] = [outs[f.output]]

    out = {ext: str(w / f"toy.{ext}") for ext in ("csv", "md", "tex")} | {"prov": str(w / "toy.prov.json")}
    O.build_output("table", "toy_null_means", paths, [manifest], ["toy"], out, {"null_types": ["rotation", "flip"]})
    rows = {r["null"]: float(r["mean"]) for r in csv.DictReader(open(out["csv"]))}
    # the table's name is its registration's, its caption the builder's docstring
    # (rendered with the output's params, as the report renders it, in plain text)
    assert open(out["md"]).readline().strip() == "**toy_null_means** — Toy. Mean ρ per null (rotation, flip)."
    assert set(rows) == {"rotation", "flip", "observed"}
    assert rows["flip"] == pytest.approx(rows["observed"], rel=1e-12)
    assert rows["rotation"] != pytest.approx(rows["observed"], rel=1e-6)  # a real null moves the spaces


def test_a_builder_naming_another_table_is_refused(registry):
    table, _ = registry.decorators("PK paper")

    @table("toy_named")
    def toy_named(models):
        """**Toy.**"""
        return Table("not_toy_named", "", [Column("model", "Model")], [])

    with pytest.raises(ValueError, match="its builder named it 'not_toy_named'"):
        registry.TABLES["toy_named"].call({}, {}, ["m"], {})


def test_an_unknown_null_type_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown null 'nope'"):
        N.null_factors(np.zeros((2, 4, 2)), "nope", np.random.default_rng(0))


def test_adding_an_output_needs_no_other_edit(registry):
    """The rule loop, the build script and the docs read only the registry: a decorated builder
    gets its caption file and its docs row from `headgeom docs` alone."""
    _, figure = registry.decorators("Paper 1")

    @figure("toy_fig", families=("paper1_heads",))
    def toy_fig(paper1_heads, models):
        """**Toy figure.** Nothing."""

    toy = registry.FIGURES["toy_fig"]
    assert toy.params == {"choices": "choices"}  # reads the paper 1 per-head shards: takes choices:
    assert docs.caption_rst(toy).startswith("**Toy figure.** Nothing.\n\nModels:")
    assert "figure `toy_fig`" in docs.outputs_md()
    assert ROOT / "workflow/report/captions/figure_toy_fig.rst" in docs.generated(ROOT)
    with pytest.raises(ValueError, match="already registered"):
        figure("toy_fig")(toy_fig)
    assert dataclasses.is_dataclass(toy)


def test_schema_defaults_are_the_default_config():
    """docs/config.md shows the schema's defaults: they must be config/config.yaml's values."""
    import yaml

    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    wrong = []

    def walk(node, c, prefix):
        for k, sub in (node.get("properties") or {}).items():
            if "default" in sub and c.get(k) != sub["default"]:
                wrong.append((prefix + k, c.get(k), sub["default"]))
            if isinstance(c.get(k), dict):
                walk(sub, c[k], prefix + k + ".")

    walk(schema, cfg, "")
    assert not wrong, wrong
