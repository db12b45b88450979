"""The activation stage per architecture, on tiny random checkpoints transformers saves and runs
(with the character-level tokenizer of tests/helpers/synth_hf.py):

  * writes where the model adds them: for an architecture with a norm on the attention output before the
    residual add (Gemma-3, Gemma-2, OLMo-2) the heads' recorded writes sum to the tensor the
    decoder layer adds to its residual (MLP zeroed: layer output - layer input), float32, 1e-5;
  * post-LN (BERT): the read paths' normalization columns are NaN with the flag
    ``post_ln_read_path`` and the table says so; a pre-LN model keeps them finite;
  * the forward pass records the sha256 of every tokenizer file (and of a GGUF's tokenizer
    metadata), and an edited tokenizer file changes it;
  * the weight check covers the pre-attention norm's gain and epsilon.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
import transformers

from headgeom.core.errors import ModelRunError
from headgeom.jobs import activation as act_jobs
from headgeom.outputs.pk import read_paths
from headgeom.jobs.activation import forward_job, read_layer, read_paths_job
from headgeom.schedule.families import FORWARD
from headgeom.methods.read_paths import NORM_COLUMNS
from headgeom.io.texts import make_windows
from headgeom.io.fetch import fetch_model
from headgeom.io.shards import read_shards
from headgeom.io.store import TensorStore

from references import head_writes
from synth_hf import TEXT, _char_tokenizer, write_synthetic_llama

PARAMS = {"n_windows": 2, "window": 24, "bos": True, "device": "cpu", "weight_rtol": 1e-5}
QUIET = dict(log=lambda *_: None)
FORWARD_QUIET = dict(QUIET, step=FORWARD.name)  # forward_job also names its registry step
CFG = dict(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, head_dim=16, max_position_embeddings=64, rms_norm_eps=1e-6, pad_token_id=0,
           bos_token_id=1, eos_token_id=2, tie_word_embeddings=False, sliding_window=64, layer_types=None)


def _checkpoint(root, mt, **extra):
    """A tiny random ``mt`` checkpoint (float32, random norm gains, every MLP output zeroed so that a
    decoder layer adds exactly its attention write) with the character tokenizer."""
    ckpt = root / "ckpt"
    ckpt.mkdir()
    kw = dict(CFG, **extra)
    if mt == "bert":
        kw = dict(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=64, pad_token_id=0)
    cfg = transformers.AutoConfig.for_model(mt, **kw)
    torch.manual_seed(0)
    cls = transformers.AutoModel if mt == "bert" else transformers.AutoModelForCausalLM
    model = cls.from_config(cfg).float().eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(0.5 + torch.rand(p.shape, generator=g))
            if "mlp.down_proj" in name:
                p.zero_()
    model.save_pretrained(ckpt)
    _char_tokenizer(ckpt)
    (root / "text.txt").write_text(TEXT)
    entry = {"source": "local", "path": str(ckpt)}
    fetch_model(mt, entry, root / "store", **QUIET)
    return entry, {"source": "local", "path": str(root / "text.txt")}


def _layer_adds(ckpt, ids):
    """Per decoder layer: layer output - layer input (what it adds to the residual), float32."""
    model = transformers.AutoModel.from_pretrained(ckpt, dtype=torch.float32).eval()
    base = model.base_model
    layers = base.layers
    rec = {l: {"in": [], "out": []} for l in range(len(layers))}

    def pre(l):
        def f(mod, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]
            rec[l]["in"].append(x.detach().reshape(-1, x.shape[-1]).numpy().copy())
        return f

    def post(l):
        def f(mod, args, out):
            o = out[0] if isinstance(out, tuple) else out
            rec[l]["out"].append(o.detach().reshape(-1, o.shape[-1]).numpy().copy())
        return f

    hs = [h for l, layer in enumerate(layers) for h in (layer.register_forward_pre_hook(pre(l), with_kwargs=True),
                                                       layer.register_forward_hook(post(l)))]
    try:
        with torch.no_grad():
            for w in ids:
                inp = torch.as_tensor(w[None, :])
                model(input_ids=inp, attention_mask=torch.ones_like(inp))
    finally:
        for h in hs:
            h.remove()
    return {l: np.concatenate(r["out"]) - np.concatenate(r["in"]) for l, r in rec.items()}


@pytest.mark.parametrize("mt", ["gemma3_text", "olmo2", "gemma2"])
def test_post_norm_writes_sum_to_what_the_layer_adds(mt, tmp_path):
    entry, corpus = _checkpoint(tmp_path, mt)
    act = tmp_path / "acts"
    summary = forward_job(mt, entry, tmp_path / "store", "toy", corpus, act, PARAMS, **FORWARD_QUIET)
    assert summary["write"]["write_point"] == "post_norm" and summary["write"]["module"] == "post_attention_layernorm"
    tok = transformers.AutoTokenizer.from_pretrained(entry["path"])
    ids, _ = make_windows(tok, TEXT, "toy", PARAMS["n_windows"], PARAMS["window"], bos=True)
    adds = _layer_adds(entry["path"], ids)
    store = TensorStore(tmp_path / "store")
    for l, added in adds.items():
        arrays, meta = read_layer(act, l)
        assert arrays["write_scale"].shape == (ids.size,) and arrays["write_gain"].shape == (64,)
        u = head_writes(store.layer_factors(l).W_O, arrays["z"], arrays, meta).sum(axis=1)
        err = np.max(np.abs(u - added)) / np.max(np.abs(added))
        assert err < 1e-5, (mt, l, err)
        # before the norm (write_point: pre_norm) the writes do not sum to what the layer adds
        u0 = head_writes(store.layer_factors(l).W_O, arrays["z"], arrays, meta, "pre_norm").sum(axis=1)
        assert np.max(np.abs(u0 - added)) / np.max(np.abs(added)) > 1e-2
    # the read paths run on both write points; the residual writes change share and energies
    out = {}
    for wp in ("residual", "pre_norm"):
        out[wp] = tmp_path / f"rp-{wp}.parquet"
        read_paths_job(tmp_path / "store", act, 0, out[wp], {"kinds": ["Q", "V"], "write_point": wp}, **QUIET)
    r, r0 = read_shards([out["residual"]])[0], read_shards([out["pre_norm"]])[0]
    assert np.isfinite(r["share"]).all() and np.isfinite(r["e_lin"]).all()
    assert not np.allclose(r["e_lin"], r0["e_lin"])
    if mt != "olmo2":  # OLMo-2's readers have no pre-attention norm (flagged; see the post-LN test)
        assert np.isfinite(r["e_norm"]).all() and set(r["flags"]) == {""}
    else:
        assert set(r["flags"]) == {"no_pre_norm_read_path"} and np.isnan(r["e_norm"]).all()


def test_gemma1_has_no_post_attention_norm():
    """Gemma-1's post_attention_layernorm is its pre-MLP norm: writes are the o-projection's."""
    from headgeom.architectures import architecture_for

    assert architecture_for({"model_type": "gemma"}).post_norm is None
    assert architecture_for({"model_type": "gemma3_text"}).post_norm == "post_attention_layernorm"
    assert architecture_for({"model_type": "gemma2"}).post_norm == "post_attention_layernorm"


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    base = tmp_path_factory.mktemp("llama")
    (base / "ckpt").mkdir()
    write_synthetic_llama(base / "ckpt")
    (base / "text.txt").write_text(TEXT)
    entry = {"source": "local", "path": str(base / "ckpt")}
    fetch_model("synth", entry, base / "store", **QUIET)
    return base, entry, {"source": "local", "path": str(base / "text.txt")}


def _read_paths(store, act, tmp_path, L=2):
    paths = []
    for l in range(L):
        paths.append(tmp_path / f"rp{l}.parquet")
        read_paths_job(store, act, l, paths[-1], {"kinds": ["Q", "K", "V"]}, **QUIET)
    return read_shards(paths)[0]


def test_post_ln_read_path_columns_are_nan_and_flagged(tmp_path, llama):
    entry, corpus = _checkpoint(tmp_path, "bert")
    forward_job("bert", entry, tmp_path / "store", "toy", corpus, tmp_path / "acts", PARAMS, **FORWARD_QUIET)
    r = _read_paths(tmp_path / "store", tmp_path / "acts", tmp_path)
    assert len(r["writer"]) and set(r["flags"]) == {"post_ln_read_path"}
    for k in NORM_COLUMNS:
        assert np.isnan(r[k]).all(), k
    assert np.isfinite(r["e_lin"]).all() and np.isfinite(r["share"]).all() and np.isfinite(r["rho"]).all()
    t = read_paths.pk_sec5_4_read_paths(r, ["bert"])
    for row in t.rows:
        assert row["flags"] == "post_ln_read_path"
        for k in read_paths.NORM_SPLIT:
            assert np.isnan(row[k]), k
        assert row["cross_positive"] is None
        assert np.isfinite(row["share_rho_spearman"])
    assert "post_ln_read_path" in t.notes and "not measured" in t.notes
    # a pre-LN model keeps them finite and unflagged
    base, lentry, lcorpus = llama
    forward_job("synth", lentry, base / "store", "toy", lcorpus, tmp_path / "lacts", PARAMS, **FORWARD_QUIET)
    (tmp_path / "l").mkdir()
    rl = _read_paths(base / "store", tmp_path / "lacts", tmp_path / "l")
    assert set(rl["flags"]) == {""}
    for k in NORM_COLUMNS:
        assert np.isfinite(rl[k]).all(), k
    for row in read_paths.pk_sec5_4_read_paths(rl, ["synth"]).rows:
        assert row["flags"] == "" and all(np.isfinite(row[k]) for k in read_paths.NORM_SPLIT)


def test_tokenizer_files_are_hashed_and_an_edit_changes_the_hash(tmp_path, llama):
    base, entry, corpus = llama
    s1 = forward_job("synth", entry, base / "store", "toy", corpus, tmp_path / "a1", PARAMS, **FORWARD_QUIET)
    files = s1["tokenizer"]["files_sha256"]
    assert {"tokenizer.json", "tokenizer_config.json"} <= set(files)
    assert read_layer(tmp_path / "a1", 0)[1]["tokenizer"]["files_sha256"] == files
    other = tmp_path / "ckpt2"
    shutil.copytree(base / "ckpt", other)
    cfg = json.loads((other / "tokenizer_config.json").read_text())
    cfg["model_max_length"] = 4096  # an edit that leaves the token ids alone
    (other / "tokenizer_config.json").write_text(json.dumps(cfg))
    s2 = forward_job("synth", {"source": "local", "path": str(other)}, base / "store", "toy", corpus, tmp_path / "a2",
                     PARAMS, **FORWARD_QUIET)
    f2 = s2["tokenizer"]["files_sha256"]
    assert f2["tokenizer_config.json"] != files["tokenizer_config.json"]
    assert f2["tokenizer.json"] == files["tokenizer.json"]


def test_gguf_tokenizer_metadata_is_hashed(tmp_path):
    from synth import write_gguf_stub as write

    from headgeom.io.forward import tokenizer_files

    write(tmp_path / "a.gguf", ["a", "bb", "ccc"])
    write(tmp_path / "b.gguf", ["a", "bb", "ccd"])
    write(tmp_path / "c.gguf", ["a", "bb", "ccc"])
    h = {n: tokenizer_files(tmp_path, None, tmp_path / f"{n}.gguf")["gguf:tokenizer.*"] for n in "abc"}
    assert h["a"] != h["b"] and h["a"] == h["c"]


def test_weight_check_covers_the_norm_gain(tmp_path, llama, monkeypatch):
    base, entry, corpus = llama
    orig = TensorStore.layer_factors

    def perturbed(self, layer):
        f = orig(self, layer)
        if layer == 1:
            f.norm_gain = f.norm_gain * (1 + 1e-3)
        return f

    monkeypatch.setattr(TensorStore, "layer_factors", perturbed)
    with pytest.raises(ModelRunError, match=r"model 'synth' layer 1: .*differ in the pre-attention norm gain \(max rel"):
        forward_job("synth", entry, base / "store", "toy", corpus, tmp_path / "a", PARAMS, **FORWARD_QUIET)


def test_weight_check_covers_the_norm_eps(tmp_path, llama, monkeypatch):
    base, entry, corpus = llama
    s = forward_job("synth", entry, base / "store", "toy", corpus, tmp_path / "ok", PARAMS, **FORWARD_QUIET)
    assert all(c["norm_eps"] == 0.0 and c["norm_gain"] < 1e-6 for c in s["weight_check"].values())
    monkeypatch.setattr(act_jobs, "_store_eps", lambda store, architecture=None: 1e-6)  # the model runs 1e-5
    with pytest.raises(ModelRunError, match=r"model 'synth' layer 0: .*differ in the pre-attention norm epsilon"):
        forward_job("synth", entry, base / "store", "toy", corpus, tmp_path / "a", PARAMS, **FORWARD_QUIET)
