"""Forward passes through transformers' own modeling code, with hooks (docs/methods.md §3.1).

A config ``models:`` entry is located exactly as the fetch stage locates it
(``headgeom.io.sources.open_source``); the directory or GGUF file found there is loaded with
``from_pretrained`` (GGUF through transformers' own ``gguf_file=`` path), ``local_files_only``,
never ``trust_remote_code``. Per layer the hooks capture

  z  (tokens, H, d_head)  the input of the attention output projection split into heads: head
                          h's attention-weighted value mix, so its write is y_h = O_h z_h
  x  (tokens, d_model)    the residual entering the layer, before its norm
  attn_out (tokens, d_model)  what the attention block returns (kept only for tests)

Everything is float32 on the configured device; analysis converts to float64.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import ModelRunError

# Where the pieces sit in each transformers base model (AutoModel): headgeom.architectures.hook_map
# of the model's family (o: the output projection whose input is z; attn: the module whose first
# output is the attention block's output; q/k/v or a fused qkv: the weight check; norm: the
# pre-attention norm, None for post-LN or no norm).
from ..architectures import BY_MODEL_TYPE, FAMILIES, hook_map, split_fused  # noqa: E402

HOOK_MAPS = {mt: hook_map(FAMILIES[name]) for mt, name in BY_MODEL_TYPE.items()}


@dataclass
class LoadedModel:
    model: object  # transformers PreTrainedModel (base model)
    tokenizer: object
    model_type: str
    hooks: dict
    source: dict
    n_heads: int
    n_kv: int
    d_head: int

    def layers(self):
        return _get(self.model, self.hooks["layers"])

    def n_layers(self) -> int:
        return len(self.layers())

    def module(self, layer: int, key: str):
        return _get(self.layers()[layer], self.hooks[key])

    def norm_eps(self, layer: int) -> float | None:
        if self.hooks["norm"] is None:
            return None
        if self.hooks.get("norm_eps") is not None:  # a constant in the norm's code (OLMo)
            return float(self.hooks["norm_eps"])
        m = self.module(layer, "norm")
        for a in ("variance_epsilon", "eps", "epsilon"):
            if hasattr(m, a):
                return float(getattr(m, a))
        raise ModelRunError(f"cannot read epsilon of {type(m).__name__} in layer {layer}")


def _get(obj, dotted: str):
    for part in dotted.split("."):
        obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
    return obj


def device_for(name: str):
    import torch

    if name == "cpu":
        return torch.device("cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ModelRunError(f"config activation.device is {name!r} but no CUDA device is available here "
                                "(torch.cuda.is_available() is False); set device: cpu")
        return torch.device(name)
    raise ModelRunError(f"activation.device must be cpu or cuda[:N], not {name!r}")


@contextmanager
def _quiet_gguf_loader():
    """transformers' GGUF loader draws its own tqdm bar (not governed by disable_progress_bar), which
    fills a job log with carriage-return frames; silence it for the load."""
    from functools import partial
    from unittest import mock

    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    with mock.patch.object(gguf_utils, "tqdm", partial(gguf_utils.tqdm, disable=True)):
        yield


def _hooks_for(cfg, mt, architecture=None):
    """The hook map of the model's family (forced by ``architecture``), resolved for its config."""
    from ..architectures import family_for
    from ..core.errors import UnknownArchitectureError

    try:
        return hook_map(family_for(cfg.to_dict(), architecture))
    except UnknownArchitectureError as e:
        raise ModelRunError(str(e)) from e


def _load(path: Path, model_name: str, device, architecture=None):
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # job logs: one line per step, not progress bars
    kw = dict(local_files_only=True, trust_remote_code=False)
    if path.is_file() and path.suffix == ".gguf":
        where, kw["gguf_file"] = path.parent, path.name
    else:
        where = path
    try:
        cfg = AutoConfig.from_pretrained(where, **kw)
    except Exception as e:
        raise ModelRunError(f"model {model_name!r}: transformers cannot read its config offline ({type(e).__name__}: {e})") from e
    mt = getattr(cfg, "model_type", None)
    hooks = _hooks_for(cfg, mt, architecture)
    if hooks is None:
        raise ModelRunError(f"model {model_name!r}: the activation stage has no hook map for transformers "
                            f"model_type {mt!r} (supported: {sorted(HOOK_MAPS)}); the weight-space stages still run")
    try:
        model = AutoModel.from_pretrained(where, dtype=torch.float32, **kw)
        tok = AutoTokenizer.from_pretrained(where, **kw)
    except ModelRunError:
        raise
    except Exception as e:
        raise ModelRunError(f"model {model_name!r} (model_type {mt!r}): transformers cannot load it offline "
                            f"({type(e).__name__}: {e}); the weight-space stages still run") from e
    # a checkpoint saved without tokenizer files loads an empty tokenizer: say so here, not later
    # as a "corpus too short: 0 tokens"
    if not tok("The attention head", add_special_tokens=False)["input_ids"]:
        raise ModelRunError(f"model {model_name!r} (model_type {mt!r}): its files hold no usable tokenizer "
                            f"(a test sentence gives no tokens; add the tokenizer files to {path}); "
                            "the weight-space stages still run")
    model.eval().to(device)
    from ..architectures import config_view, family_for

    c = config_view(cfg.to_dict())
    sh = family_for(c, architecture).shapes(c)
    return model, tok, mt, hooks, sh["n_heads"], sh["n_kv_heads"], sh["d_head"]


@contextmanager
def open_model(model_name: str, entry: dict, device: str = "cpu", log=print):
    """Yield a LoadedModel for one config ``models:`` entry (located like the fetch stage)."""
    from ..io.sources import open_source

    dev = device_for(device)
    with open_source(entry, log=log) as (ckpt, source):
        path = Path(ckpt.path)
        model, tok, mt, hooks, H, G, d = _load(path, model_name, dev, entry.get("architecture"))
    yield LoadedModel(model, tok, mt, hooks, source, H, G, d)


def capture(lm: LoadedModel, ids: np.ndarray, keep_attn_out: bool = False, device: str = "cpu"):
    """Run the windows (n_windows, window) one at a time; return per layer a dict with
    z (N, H, d_head), x (N, d_model) [and attn_out (N, d_model)], float32, N = n_windows*window."""
    import torch

    L = lm.n_layers()
    buf = {l: {"z": [], "x": [], "attn_out": []} for l in range(L)}
    handles = []

    def pre_o(l):
        def f(mod, args):
            z = args[0].detach()
            buf[l]["z"].append(z.reshape(z.shape[0] * z.shape[1], lm.n_heads, lm.d_head).float().cpu().numpy())
        return f

    def pre_layer(l):
        def f(mod, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]
            buf[l]["x"].append(x.detach().reshape(-1, x.shape[-1]).float().cpu().numpy())
        return f

    def post_attn(l):
        def f(mod, args, out):
            o = out[0] if isinstance(out, tuple) else out
            buf[l]["attn_out"].append(o.detach().reshape(-1, o.shape[-1]).float().cpu().numpy())
        return f

    try:
        for l in range(L):
            handles.append(lm.module(l, "o").register_forward_pre_hook(pre_o(l)))
            handles.append(lm.layers()[l].register_forward_pre_hook(pre_layer(l), with_kwargs=True))
            if keep_attn_out:
                handles.append(lm.module(l, "attn").register_forward_hook(post_attn(l)))
        dev = next(lm.model.parameters()).device
        with torch.no_grad():
            for w in ids:
                inp = torch.as_tensor(w[None, :], dtype=torch.long, device=dev)
                lm.model(input_ids=inp, attention_mask=torch.ones_like(inp))
    finally:
        for h in handles:
            h.remove()
    out = {}
    for l in range(L):
        out[l] = {k: np.ascontiguousarray(np.concatenate(v, axis=0), dtype=np.float32)
                  for k, v in buf[l].items() if v}
    return out


def module_weights(lm: LoadedModel, layer: int) -> dict[str, np.ndarray]:
    """The transformers model's q/k/v/o weights of one layer, (out, in), float64."""
    out = {}

    def weight(key):
        W = lm.module(layer, key).weight.detach().double().cpu().numpy()
        return np.ascontiguousarray(W.T) if lm.hooks.get("conv1d") else W

    if lm.hooks.get("qkv"):  # a fused projection, split by the family's rule
        q, k, v = split_fused(weight("qkv"), lm.hooks["split"], lm.n_heads, lm.n_kv, lm.d_head)
        out.update(q=q.reshape(-1, q.shape[-1]), k=k.reshape(-1, k.shape[-1]), v=v.reshape(-1, v.shape[-1]))
    else:
        out.update({k: weight(k) for k in ("q", "k", "v")})
    out["o"] = weight("o")
    m = lm.module(layer, "o")
    if getattr(m, "bias", None) is not None:
        out["o_bias"] = m.bias.detach().double().cpu().numpy()
    return out


def weight_check(lm: LoadedModel, factors, layer: int) -> dict[str, float]:
    """Max |store - model| / max|model| per projection: the store's per-head factors (what the
    weight-space stages use) against the weights transformers runs."""
    w = module_weights(lm, layer)
    f = factors
    stacks = {
        "q": np.concatenate(list(f.W_Q), axis=0),
        "k": np.concatenate(list(f.W_K), axis=0),
        "v": np.concatenate(list(f.W_V), axis=0),
        "o": np.concatenate(list(f.W_O), axis=1),
    }
    res = {}
    for k, s in stacks.items():
        m = w[k]
        if m.shape != s.shape:
            raise ModelRunError(f"layer {layer}: {k} weight shape {m.shape} in transformers, {s.shape} in the tensor store")
        res[k] = float(np.max(np.abs(m - s)) / max(np.max(np.abs(m)), 1e-300))
    return res
