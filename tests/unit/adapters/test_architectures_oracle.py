"""Forward-pass oracle, one test for every architecture of ``headgeom.architectures``.

Per architecture (and per config-dependent layout), transformers builds a tiny random model from a
config (hidden 64, 4 query heads, 2 KV heads where the architecture has GQA, 1 layer), biases zeroed
and norm gains random, saved as safetensors; headgeom extracts it (open_checkpoint -> extract ->
TensorStore) and the per-head factors must reproduce transformers' own forward, read through
hooks on transformers' modules (no headgeom code in the reference). The references are the
package's forward-pass oracle (``headgeom.adapters.oracle``, which ``adapter_for`` runs on every
safetensors architecture at first use, on an instance it builds itself); here they run end to end,
through a saved checkpoint, the fetch's extraction and the tensor store:

  * one token (softmax = 1), batch of H copies; in copy b every head but b is zeroed at the
    output projection's input; the projection's output must equal O_b V_{g(b)}^T n, with n the
    captured input of the attention module (the model's own pre-attention norm output);
  * the folded norm: headgeom's norm_type/norm_gain applied to the captured norm input must
    equal the captured norm output (eps read from the module);
  * Q and K through the attention logits (``test_oracle_qk``): two tokens at position 0, the
    attention input replaced by [a, c] and [a', c]; the log ratio of the weights on the two keys
    (solved from z) differs between the passes by s q_h(c).(k_g(a) - k_g(a')), one softmax
    scale s for all heads. Skipped for q/k-norm architectures (nonlinear in W_Q, W_K);
  * the activation stage's hooks (``test_activation_hooks``) from the same description.

``test_oracle_catches_broken_splits`` / ``test_oracle_qk_catches_swapped_q_heads`` break a split
(heads shifted by one, the interleave of a fused projection, the KV grouping, query heads
rotated) and check the oracle fails. All cases together: about a minute on 2 cores.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import transformers

from headgeom.adapters import ADAPTERS
from headgeom.adapters.oracle import (TOL, cut_config, oracle_errors, qk_reference, qk_residual, randomize,
                                      reference)
from headgeom.architectures import BY_MODEL_TYPE, DERIVED_TESTED, ARCHITECTURES, config_view, architecture_for
from headgeom.io.checkpoint import open_checkpoint
from headgeom.io.store import TensorStore, extract
from headgeom.outputs.pk.base_instruct import O_PROJ

T = transformers

# one case per model_type, plus the config-dependent layouts, plus llama-layout model_types that
# no Architecture names (derived from transformers' modules: headgeom.architectures.derive)
DERIVED = list(DERIVED_TESTED)
CASES = [(mt, {}) for f in ARCHITECTURES.values() for mt in f.model_types if mt != "gemma3"] + [(mt, {}) for mt in DERIVED] + [
    ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 2}),
    ("falcon", {"multi_query": False}),
    ("gpt_bigcode", {"multi_query": False}),
    ("opt", {"do_layer_norm_before": False}),
    ("stablelm", {"qk_layernorm": True, "use_parallel_residual": True}),
]
IDS = [mt + "".join(f"-{k}" for k in extra) for mt, extra in CASES]


def tiny_config(mt: str, extra: dict):
    """The oracle's cut of the config (headgeom.adapters.oracle.cut_config), then ``extra`` over it."""
    c = {"model_type": mt, **extra}
    fam = ARCHITECTURES[BY_MODEL_TYPE[mt]].resolve(config_view(c)) if mt in BY_MODEL_TYPE else ARCHITECTURES["llama"]
    kw = {**cut_config(c, fam), **extra}
    return T.AutoConfig.for_model(mt, **{k: v for k, v in kw.items() if k != "model_type"})


def _get(obj, dotted):
    for part in dotted.split("."):
        obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
    return obj


def build(mt, extra, root):
    torch.manual_seed(0)
    cfg = tiny_config(mt, extra)
    cls = T.AutoModel if mt in ("bert", "roberta") else T.AutoModelForCausalLM
    model = cls.from_config(cfg, attn_implementation="eager", experts_implementation="eager").double().eval()
    randomize(model)
    model.save_pretrained(root / "ckpt")
    ckpt = open_checkpoint(root / "ckpt")
    extract(ckpt, root / "store", model=f"tiny-{mt}", source={"type": "local"}, log=lambda *a: None)
    return model, cfg, TensorStore(root / "store")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = {}

    def get(i):
        if i not in cache:
            mt, extra = CASES[i]
            model, cfg, store = build(mt, extra, tmp_path_factory.mktemp(IDS[i]))
            fam = architecture_for(cfg.to_dict())
            rec = reference(model, fam, store.fields.n_heads, store.fields.d_head)
            cache[i] = (store, fam, rec)
        return cache[i]

    return get


@pytest.mark.parametrize("i", range(len(CASES)), ids=IDS)
def test_oracle(i, built):
    store, fam, rec = built(i)
    assert store.manifest["adapter"] == fam.name or fam.name in ADAPTERS
    for l, r in rec.items():
        lf = store.layer_factors(l)
        # base/instruct finds exactly this layer's output projection among its stored tensors
        assert [k for k in store.layer_tensors(l) if O_PROJ.search(k)] == [
            k for k in store.layer_tensors(l) if k.endswith(f".{fam.o}.weight")], IDS[i]
        err = oracle_errors(lf, r, fam)
        # float64 model; HF RMSNorms/OLMo's LayerNorm compute in float32
        assert err["o_v"] < TOL["o_v"], (IDS[i], l, err)
        if "norm" in err:
            assert err["norm"] < TOL["norm"], (IDS[i], l, err)


def _broken(lf, how):
    if how == "head_shift":  # off by one head in W_O
        return dataclasses.replace(lf, W_O=np.roll(lf.W_O, 1, axis=0))
    if how == "interleave":  # a fused layout read as the wrong split: swap v with k
        return dataclasses.replace(lf, W_V=lf.W_K.copy())
    if how == "kv_group":  # wrong GQA grouping: interleaved instead of consecutive
        return dataclasses.replace(lf, kv_group=np.arange(lf.n_heads) % lf.n_kv)
    raise ValueError(how)


@pytest.mark.parametrize("case,how", [("gpt2", "head_shift"), ("gpt_neox", "interleave"), ("llama", "kv_group")])
def test_oracle_catches_broken_splits(case, how, built):
    store, fam, rec = built(IDS.index(case))
    lf = _broken(store.layer_factors(0), how)
    assert oracle_errors(lf, rec[0], fam)["o_v"] > 1e-2


@pytest.mark.parametrize("case", ["gpt2", "codegen", "falcon-new_decoder_architecture-num_kv_heads"])
def test_oracle_qk_catches_swapped_q_heads(case, built, tmp_path):
    store, fam, _ = built(IDS.index(case))
    model, _, _ = build(*CASES[IDS.index(case)], tmp_path)
    lf = store.layer_factors(0)
    lf = dataclasses.replace(lf, W_Q=np.roll(lf.W_Q, 1, axis=0))
    assert qk_residual(lf, qk_reference(model, fam, store.fields.d_model)[0])[0] > 1e-2


QK_SKIP = "q/k norm: the logits are of normalized q and k (not linear in W_Q, W_K)"


@pytest.mark.parametrize("i", range(len(CASES)), ids=IDS)
def test_oracle_qk(i, built, tmp_path):
    mt, extra = CASES[i]
    store, fam, _ = built(i)
    if fam.qk_norm:
        pytest.skip(QK_SKIP)
    model, _, _ = build(mt, extra, tmp_path)
    for l, r in qk_reference(model, fam, store.fields.d_model).items():
        res, s = qk_residual(store.layer_factors(l), r)
        assert res < TOL["qk"] and s > 0, (IDS[i], l, res, s)


@pytest.mark.parametrize("i", range(len(CASES)), ids=IDS)
def test_activation_hooks(i, built, tmp_path):
    """The activation stage's hooks, from the same description: its weight check matches the
    store, the captured z reproduces the output projection's input (sum_h O_h z_h + b_o equals
    the o module's output), and the pre-attention norm's eps is readable."""
    from headgeom.io.forward import HOOK_MAPS, LoadedModel, capture, weight_check
    from references import head_writes
    from headgeom.architectures import config_eps, hook_map

    mt, extra = CASES[i]
    store, fam, _ = built(i)
    model, cfg, _ = build(mt, extra, tmp_path)
    assert mt in DERIVED or HOOK_MAPS[mt]["o"] == fam.o
    f = store.fields
    lm = LoadedModel(model.base_model, None, mt, hook_map(fam), {}, f.n_heads, f.n_kv_heads, f.d_head)
    outs, posts = {}, {}

    def keep(l, into):
        def f(m, a, o):
            into[l] = o.detach().reshape(-1, o.shape[-1]).double().numpy()
        return f

    handles = [lm.module(l, "o").register_forward_hook(keep(l, outs)) for l in range(lm.n_layers())]
    if fam.post_norm:  # what the post-attention norm hands to the residual add
        handles += [lm.module(l, "post_norm").register_forward_hook(keep(l, posts)) for l in range(lm.n_layers())]
    try:
        cap = capture(lm, np.array([[5, 7, 9]]))
    finally:
        for h in handles:
            h.remove()
    eps_store = config_eps(store.manifest["config"], fam)
    for l in range(lm.n_layers()):
        lf = store.layer_factors(l)
        check = weight_check(lm, lf, l, eps_store)
        assert max(check.values()) < 1e-12, (IDS[i], check)
        # the pre-attention norm's gain and epsilon are checked wherever the architecture has a parametric norm
        assert ("norm_gain" in check) == bool(fam.norm and fam.norm_weight), IDS[i]
        assert ("norm_eps" in check) == bool(fam.norm), (IDS[i], check)
        z = cap[l]["z"].astype(np.float64)
        y = np.einsum("hDd,nhd->nD", lf.W_O, z)
        assert np.max(np.abs(y - outs[l])) <= 1e-5 * np.max(np.abs(outs[l])), IDS[i]
        eps = lm.norm_eps(l)
        assert (eps is None) == (fam.norm is None) and (eps is None or 0 < eps < 1e-3), IDS[i]
        # a post-attention norm: the heads' writes through it sum to its output (what the residual gets)
        assert ("write_scale" in cap[l]) == bool(fam.post_norm), IDS[i]
        if fam.post_norm:
            u = head_writes(lf.W_O, z, cap[l], {"write": {"norm_type": fam.post_norm_type}}).sum(axis=1)
            assert np.max(np.abs(u - posts[l])) <= 1e-5 * np.max(np.abs(posts[l])), IDS[i]


def test_architecture_key_forces_an_architecture_or_errors():
    from headgeom.adapters import adapter_for
    from headgeom.core.errors import HeadgeomError

    assert adapter_for({"model_type": "mistral"}, architecture="mixtral").name == "mixtral"
    assert architecture_for({"model_type": "llama"}, "falcon").split in ("concat", "grouped", "per_head")
    with pytest.raises(HeadgeomError, match="not a known architecture"):
        adapter_for({"model_type": "llama"}, architecture="no-such-architecture")
    with pytest.raises(HeadgeomError, match="not a known architecture"):
        architecture_for({"model_type": "llama"}, "no-such-architecture")
    with pytest.raises(HeadgeomError, match="latent attention"):
        adapter_for({"model_type": "deepseek_v3"})
    with pytest.raises(HeadgeomError, match="unknown architecture 'mamba_x'"):
        architecture_for({"model_type": "mamba_x"})
