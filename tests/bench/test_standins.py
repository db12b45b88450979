"""The stand-ins of the paper models (bench/standins.py): every config/models.yaml entry has a
shape (agreeing with the entry's own ``shape:`` where it records one), derived checkpoints are
built after what they derive from, and built stand-ins have the real counts and ratio, near-closed
heads where planted (checked on the weights headgeom extracts, against the raw V^T O), and
perturbations of the stated size. The checkpoints are also served by the multi-repo loopback
hub and fetched with ``source: hf``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from headgeom.io.checkpoint import open_checkpoint
from headgeom.io.store import TensorStore, extract
import standins

ROOT = Path(__file__).resolve().parents[2]

MODELS = yaml.safe_load((ROOT / "config" / "models.yaml").read_text())["models"]
LINEAGES = {  # config/paper.yaml's Table 3 lineages (commented out there)
    "pythia-2.8b-deduped": ["pythia-2.8b-deduped-step0", "pythia-2.8b-deduped-step1000",
                            "pythia-2.8b-deduped-step71000", "pythia-2.8b-deduped"],
    "olmo-1b": ["olmo-1b-step1000", "olmo-1b-step110000", "olmo-1b-step330000", "olmo-1b-step738020"],
}


def test_every_model_has_a_shape_and_derived_ones_come_after_their_parents():
    final = {m: ms[-1] for ms in LINEAGES.values() for m in ms}
    for name, entry in MODELS.items():
        standins.shape_for(name, entry, final)  # raises on a missing or disagreeing shape
    order = [m for m, *_ in standins.plan_checkpoints(MODELS, LINEAGES)]
    assert sorted(order) == sorted(MODELS)
    for m, parent, scale, _ in standins.plan_checkpoints(MODELS, LINEAGES):
        if parent is not None:
            assert order.index(parent) < order.index(m) and scale > 0
    derived = {m: p for m, p, *_ in standins.plan_checkpoints(MODELS, LINEAGES)}
    assert derived["qwen2.5-7b-instruct"] == "qwen2.5-7b" and derived["qwen3-4b-instruct"] == "qwen3-4b-base"
    assert derived["pythia-2.8b-deduped-step0"] == "pythia-2.8b-deduped" and derived["pythia-2.8b-deduped"] is None


def test_a_disagreeing_shape_is_refused():
    entry = dict(MODELS["qwen2.5-7b"], shape={**MODELS["qwen2.5-7b"]["shape"], "n_kv_heads": 8})
    with pytest.raises(SystemExit, match="disagrees"):
        standins.shape_for("qwen2.5-7b", entry, {})


def _closure_defect(O, V):
    """||V^T O - (tr/d) I|| / ||V^T O||: 0 exactly when T = O V^T satisfies T^2 = alpha T with
    full-rank factors (V^T O = alpha I)."""
    M = V.T @ O
    return float(np.linalg.norm(M - np.trace(M) / M.shape[0] * np.eye(M.shape[0])) / np.linalg.norm(M))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    work = tmp_path_factory.mktemp("standins")
    names = ["gpt2-124m", "pythia-70m", "qwen3-4b-base", "qwen3-4b-instruct", "qwen3-235b-a22b"]
    models = {m: MODELS[m] for m in names}
    text = "The parish register records that the poet was baptized in April. " * 8
    repos = standins.build(work, models, {}, text, log=lambda *a: None)
    return work, models, repos


@pytest.mark.parametrize("name", ["gpt2-124m", "pythia-70m", "qwen3-4b-base", "qwen3-235b-a22b"])
def test_standin_shape_and_planted_heads(built, name, tmp_path):
    work, models, _ = built
    shape = standins.SHAPES[name]
    ckpt = work / "checkpoints" / name
    cfg = json.loads((ckpt / "config.json").read_text())
    assert cfg["model_type"] == shape.model_type
    extract(open_checkpoint(ckpt), tmp_path / "store", model=name, source={"type": "local"}, log=lambda *a: None)
    store = TensorStore(tmp_path / "store")
    planted = json.loads((work / "standins.json").read_text())[name]["planted_heads"]
    assert planted >= shape.layers
    defects_planted, defects_other = [], []
    for layer in (0, shape.layers - 1):
        f = store.layer_factors(layer)
        assert (f.n_heads, f.n_kv, f.d_head) == (shape.heads, shape.kv_heads, standins.D_HEAD)
        assert f.n_heads * f.d_head / f.d_model == pytest.approx(shape.ratio)
        for h in range(f.n_heads):
            d = _closure_defect(f.O(h), f.V(int(f.kv_group[h])))
            (defects_planted if h % 8 == layer % 8 else defects_other).append(d)
    assert max(defects_planted) < 0.25, defects_planted
    assert min(defects_other) > 0.5, min(defects_other)


def test_instruct_twin_is_a_small_perturbation(built):
    work, _, _ = built
    from safetensors.torch import load_file

    a = load_file(str(work / "checkpoints" / "qwen3-4b-base" / "model.safetensors"))
    b = load_file(str(work / "checkpoints" / "qwen3-4b-instruct" / "model.safetensors"))
    assert a.keys() == b.keys()
    key = "model.layers.3.self_attn.o_proj.weight"
    x, y = a[key].double().numpy(), b[key].double().numpy()
    rel = np.linalg.norm(y - x) / np.linalg.norm(x)
    # scale 0.03 of the tensor's SD per entry: about 0.03 of its norm (bfloat16 rounding aside)
    assert 0.02 < rel < 0.045, rel


def test_standins_fetch_through_the_multi_repo_hub(built, tmp_path, monkeypatch):
    """Two repos behind one endpoint, a branch revision and a commit revision: the fetch's
    source records the repo, the commit and the bytes; an unknown repo is RepoNotFound."""
    from huggingface_hub.utils import close_session
    from hubserver import MultiHub, isolate_hub_client

    from headgeom.core.errors import CheckpointError
    from headgeom.io.fetch import fetch_model

    _, models, repos = built
    isolate_hub_client(tmp_path / "hf", monkeypatch, 0.01)
    close_session()
    with MultiHub(repos) as hub:
        from huggingface_hub import constants

        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        # huggingface_hub reads HF_ENDPOINT at import: patch what it derived from it
        monkeypatch.setattr(constants, "ENDPOINT", hub.endpoint)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            hub.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
        for name in ("gpt2-124m", "qwen3-4b-instruct"):
            man = fetch_model(name, models[name], tmp_path / name, log=lambda *a: None)
            src = man["source"]
            assert src["repo_id"] == models[name]["repo_id"]
            assert src["commit_sha"] == standins._commit_for(models[name]["repo_id"], models[name]["revision"])
            assert hub.repos[models[name]["repo_id"]].repo_bytes_sent > 0
        with pytest.raises(CheckpointError):
            fetch_model("x", {"source": "hf", "repo_id": "nobody/nothing", "revision": "main"}, tmp_path / "x",
                        log=lambda *a: None)
    close_session()
