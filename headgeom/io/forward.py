"""Forward passes through transformers' own modeling code, with hooks (docs/methods.md §3.1).

A config ``models:`` entry is located as the fetch stage locates it
(``headgeom.io.sources.open_source``), except ``source: hf``: there transformers needs files, so
the repo's snapshot at the revision (config, safetensors, tokenizer files) comes into the HF cache
(``headgeom.io.hub.snapshot_for_forward``; offline: read from it). The directory or GGUF file is
loaded with ``from_pretrained`` (GGUF through transformers' own ``gguf_file=`` path),
``local_files_only``, never ``trust_remote_code``. Per layer the hooks capture

  z  (tokens, H, d_head)  the input of the attention output projection split into heads: head
                          h's attention-weighted value mix, so its write is y_h = O_h z_h
  x  (tokens, d_model)    the residual entering the layer, before its norm
  write_scale (tokens,)   architectures with a norm on the attention output before the residual add
                          (``post_norm`` of the architecture: Gemma-2/3, OLMo-2): 1 / s_t, the norm's
                          per-token factor computed from the full attention output a_t the norm
                          receives (RMSNorm: s_t = sqrt(mean(a_t^2) + eps); LayerNorm: of the
                          centred a_t), eps read from the norm module
  write_gain (d_model,)   and the norm's gain as the model applies it (weight + the architecture's
                          post_norm_offset, Gemma's 1 + w); head j's write as the model adds it to
                          the residual is then u_tj = write_gain * P_c(O_j z_tj) * write_scale_t
                          (P_c: centring, LayerNorm only), and sum_j u_tj is the norm's output
                          (minus the normed output-projection bias and a LayerNorm's bias, where
                          the model has them)
  attn_out (tokens, d_model)  what the attention block returns (kept only for tests)

Everything is float32 on the configured device; analysis converts to float64.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.errors import ModelRunError

# Where the pieces sit in each transformers base model (AutoModel): headgeom.architectures.hook_map
# of the model's architecture (o: the output projection whose input is z; attn: the module whose first
# output is the attention block's output; q/k/v or a fused qkv: the weight check; norm: the
# pre-attention norm, None for post-LN or no norm).
from ..architectures import BY_MODEL_TYPE, ARCHITECTURES, hook_map, split_fused  # noqa: E402

HOOK_MAPS = {mt: hook_map(ARCHITECTURES[name]) for mt, name in BY_MODEL_TYPE.items()}


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
    #: sha256 of every tokenizer file the tokenizer was loaded from (GGUF: of its tokenizer metadata)
    tokenizer_files: dict = field(default_factory=dict)

    def layers(self):
        return _get(self.model, self.hooks["layers"])

    def n_layers(self) -> int:
        return len(self.layers())

    def module(self, layer: int, key: str):
        return _get(self.layers()[layer], self.hooks[key])

    def norm_eps(self, layer: int) -> float | None:
        if self.hooks["norm"] is None:
            return None
        m = self.module(layer, "norm")
        if self.hooks.get("norm_eps") is not None and not any(hasattr(m, a) for a in _EPS_ATTRS):
            return float(self.hooks["norm_eps"])  # a constant in the norm's code, no attribute (OLMo)
        return _module_eps(m, layer)

    def norm_gain(self, layer: int) -> np.ndarray | None:
        """The pre-attention norm's gain as the model applies it (weight + the architecture's offset);
        None without a pre-attention norm or for a non-parametric one."""
        if self.hooks["norm"] is None or not self.hooks.get("norm_weight", True):
            return None
        w = self.module(layer, "norm").weight.detach().double().cpu().numpy()
        return w + float(self.hooks.get("norm_offset") or 0.0)

    def post_norm_eps(self, layer: int) -> float | None:
        return None if self.hooks.get("post_norm") is None else _module_eps(self.module(layer, "post_norm"), layer)


_EPS_ATTRS = ("variance_epsilon", "eps", "epsilon")


def _module_eps(m, layer: int) -> float:
    for a in _EPS_ATTRS:
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
def _gguf_loader(parsed=None):
    """transformers' GGUF loader, quiet and parsing the file once. It draws its own tqdm bar (not
    governed by disable_progress_bar), which fills a job log with carriage-return frames; it builds
    a new gguf.GGUFReader for the config (twice), for the weights and for the tokenizer, each parsing
    every metadata field element by element; and each of those four calls of its
    ``load_gguf_checkpoint`` converts every field to Python values again. On Gemma-3-270M (a
    262k-token vocabulary) a parse is about 12 s and a conversion about 3.5 s, most of its load.

    Within this context one reader per file serves them all (a reader is a read-only memory map of
    the file and its parsed fields; ``parsed``, (path, reader) of a reader the caller already
    holds, e.g. the fetch stage's GGUFFile, is used for its file), and the metadata-only calls
    (``return_tensors=False``: the config's and the tokenizer's) convert once, each caller getting
    its own deep copy. The weights' call (``return_tensors=True``) runs as transformers wrote it."""
    import copy
    import os
    from functools import partial
    from unittest import mock

    import gguf
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    from .checkpoint import gguf_reader

    parse = gguf.GGUFReader
    readers = {}
    if parsed is not None:  # (path, its gguf.GGUFReader)
        readers[(os.path.realpath(parsed[0]), "r")] = parsed[1]

    def reader(path, mode="r"):
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = gguf_reader(path, mode, base=parse)
        return readers[key]

    load = gguf_utils.load_gguf_checkpoint
    metadata = {}

    def load_once(path, return_tensors=False, *args, **kw):
        if return_tensors or args or any(v is not None for v in kw.values()):
            return load(path, return_tensors, *args, **kw)
        key = os.path.realpath(path)
        if key not in metadata:
            metadata[key] = load(path, False)
        return copy.deepcopy(metadata[key])

    with mock.patch.object(gguf_utils, "tqdm", partial(gguf_utils.tqdm, disable=True)), \
            mock.patch.object(gguf, "GGUFReader", reader), \
            mock.patch.object(gguf_utils, "load_gguf_checkpoint", load_once):
        yield


def _hooks_for(cfg, mt, architecture=None):
    """The hook map of the model's architecture (forced by ``architecture``), resolved for its config."""
    from ..architectures import architecture_for
    from ..core.errors import UnknownArchitectureError

    try:
        return hook_map(architecture_for(cfg.to_dict(), architecture))
    except UnknownArchitectureError as e:
        raise ModelRunError(str(e)) from e


def _load(path: Path, model_name: str, device, architecture=None, parsed=None):
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # job logs: one line per step, not progress bars
    kw = dict(local_files_only=True, trust_remote_code=False)
    if path.is_file() and path.suffix == ".gguf":
        where, kw["gguf_file"] = path.parent, path.name
    else:
        where = path
    with _gguf_loader(parsed) if kw.get("gguf_file") else nullcontext():
        return _load_in(where, kw, path, model_name, device, architecture)


def _load_in(where, kw: dict, path: Path, model_name: str, device, architecture=None):
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    try:
        cfg = AutoConfig.from_pretrained(where, **kw)
    except Exception as e:
        raise ModelRunError(f"model {model_name!r}: transformers cannot read its config offline ({type(e).__name__}: {e})") from e
    hooks = _hooks_for(cfg, getattr(cfg, "model_type", None), architecture)
    if hooks is None:
        _no_hooks(cfg, model_name)
    try:
        model = AutoModel.from_pretrained(where, dtype=torch.float32, **kw)
        tok = AutoTokenizer.from_pretrained(where, **kw)
    except ModelRunError:
        raise
    except Exception as e:
        raise ModelRunError(f"model {model_name!r} (model_type {getattr(cfg, 'model_type', None)!r}): transformers "
                            f"cannot load it offline ({type(e).__name__}: {e}); the weight-space stages still run") from e
    files = tokenizer_files(Path(where), tok, path if kw.get("gguf_file") else None)
    return _ready(model, tok, cfg, hooks, model_name, device, architecture, f"add the tokenizer files to {path}") + (files,)


def _no_hooks(cfg, model_name: str):
    mt = getattr(cfg, "model_type", None)
    raise ModelRunError(f"model {model_name!r}: the activation stage has no hook map for transformers "
                        f"model_type {mt!r} (supported: {sorted(HOOK_MAPS)}); the weight-space stages still run")


def _ready(model, tok, cfg, hooks, model_name: str, device, architecture, fix: str):
    """A loaded model and tokenizer checked and on ``device``: (model, tokenizer, model_type, hooks,
    n_heads, n_kv_heads, d_head)."""
    mt = getattr(cfg, "model_type", None)
    # a checkpoint saved without tokenizer files loads an empty tokenizer: say so here, not later
    # as a "corpus too short: 0 tokens"
    if not tok("The attention head", add_special_tokens=False)["input_ids"]:
        raise ModelRunError(f"model {model_name!r} (model_type {mt!r}): its files hold no usable tokenizer "
                            f"(a test sentence gives no tokens; {fix}); the weight-space stages still run")
    model.eval().to(device)
    from ..architectures import config_view, architecture_for

    c = config_view(cfg.to_dict())
    sh = architecture_for(c, architecture).shapes(c)
    return model, tok, mt, hooks, sh["n_heads"], sh["n_kv_heads"], sh["d_head"]


def loaded_model(model, tokenizer, model_name: str, device: str = "cpu", architecture=None) -> LoadedModel:
    """A LoadedModel of a transformers model object in memory and its tokenizer (headgeom.api's
    forward pass: the hooks, checks and capture of the pipeline's, on a model nobody saved). A task
    model (``...ForCausalLM``) runs its base model, as the pipeline's ``AutoModel`` load does."""
    cfg = getattr(model, "config", None)
    if cfg is None or not callable(getattr(tokenizer, "__call__", None)):
        raise ModelRunError(f"model {model_name!r}: the forward pass needs a transformers model and its tokenizer")
    hooks = _hooks_for(cfg, getattr(cfg, "model_type", None), architecture)
    if hooks is None:
        _no_hooks(cfg, model_name)
    base = getattr(model, "base_model", model)
    import torch

    if any(p.dtype != torch.float32 for p in base.parameters()):
        raise ModelRunError(f"model {model_name!r}: the forward pass runs float32 weights, as the pipeline loads "
                            "them (model.float() first)")
    m, tok, mt, hooks, H, G, d = _ready(base, tokenizer, cfg, hooks, model_name, device_for(device), architecture,
                                        "pass the model's tokenizer")
    source = {"type": "memory", "class": type(model).__name__, "name_or_path": getattr(cfg, "_name_or_path", None)}
    return LoadedModel(m, tok, mt, hooks, source, H, G, d, {})


#: files a transformers tokenizer may read besides its class's own ``vocab_files_names``
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "chat_template.jinja", "chat_template.json", "vocab.txt", "vocab.json", "merges.txt",
                   "tokenizer.model", "spiece.model", "sentencepiece.bpe.model")


def tokenizer_files(where: Path, tok, gguf: Path | None = None) -> dict[str, str]:
    """name -> sha256 of every tokenizer file in ``where`` that transformers' tokenizer loading
    reads (its class's ``vocab_files_names`` and the common configuration files); for a GGUF file
    also ``gguf:tokenizer.*``, the sha256 of its tokenizer metadata (every ``tokenizer.`` field's
    name and raw bytes, in key order)."""
    import hashlib

    from .files import sha256_file

    names = set(TOKENIZER_FILES) | {str(v) for v in (getattr(tok, "vocab_files_names", None) or {}).values()}
    out = {n: sha256_file(where / n) for n in sorted(names) if (where / n).is_file()}
    if gguf is not None:
        from gguf import GGUFReader

        h = hashlib.sha256()
        fields = GGUFReader(str(gguf)).fields
        for k in sorted(k for k in fields if k.startswith("tokenizer.")):
            h.update(k.encode() + b"\0")
            for part in fields[k].parts:
                h.update(np.ascontiguousarray(part).tobytes())
        out["gguf:tokenizer.*"] = h.hexdigest()
    return out


@contextmanager
def open_model(model_name: str, entry: dict, device: str = "cpu", log=print):
    """Yield a LoadedModel for one config ``models:`` entry (located like the fetch stage)."""
    from .checkpoint import GGUFFile
    from .sources import open_source

    dev = device_for(device)
    if entry.get("source") == "hf":
        # transformers needs files: a snapshot of the repo (weights + tokenizer) in the HF cache,
        # not the fetch stage's byte-range reader
        from .hub import snapshot_for_forward

        where, source = snapshot_for_forward(entry["repo_id"], entry.get("revision", "main"),
                                             TOKENIZER_FILES, log=log)
        model, tok, mt, hooks, H, G, d, files = _load(Path(where), model_name, dev, entry.get("architecture"))
    else:
        with open_source(entry, log=log) as (ckpt, source):
            path = Path(ckpt.path)
            # the fetch stage's reader of a GGUF file has parsed it already: transformers uses it too
            parsed = (path, ckpt.reader) if isinstance(ckpt, GGUFFile) else None
            model, tok, mt, hooks, H, G, d, files = _load(path, model_name, dev, entry.get("architecture"), parsed)
    yield LoadedModel(model, tok, mt, hooks, source, H, G, d, files)


def capture(lm: LoadedModel, ids: np.ndarray, keep_attn_out: bool = False, device: str = "cpu"):
    """Run the windows (n_windows, window) one at a time; return per layer a dict with
    z (N, H, d_head), x (N, d_model) [and attn_out (N, d_model)], float32, N = n_windows*window;
    for an architecture with a post-attention norm also write_scale (N,) and write_gain (d_model,)
    (module docstring)."""
    import torch

    L = lm.n_layers()
    buf = {l: {"z": [], "x": [], "attn_out": [], "write_scale": []} for l in range(L)}
    handles = []
    post = lm.hooks.get("post_norm")
    center = lm.hooks.get("post_norm_type") == "layernorm"
    post_eps = {l: lm.post_norm_eps(l) for l in range(L)} if post else {}

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

    def pre_post_norm(l):
        def f(mod, args, kwargs):
            a = args[0] if args else next(iter(kwargs.values()))
            a = a.detach().reshape(-1, a.shape[-1]).double().cpu().numpy()
            if center:
                a = a - a.mean(axis=1, keepdims=True)
            buf[l]["write_scale"].append(1.0 / np.sqrt(np.einsum("td,td->t", a, a) / a.shape[1] + post_eps[l]))
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
            if post:
                handles.append(lm.module(l, "post_norm").register_forward_pre_hook(pre_post_norm(l), with_kwargs=True))
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
        if post:
            m = lm.module(l, "post_norm")
            w = m.weight.detach().double().cpu().numpy() if getattr(m, "weight", None) is not None else 1.0
            out[l]["write_gain"] = np.ascontiguousarray(w + float(lm.hooks.get("post_norm_offset") or 0.0),
                                                        dtype=np.float32)
    return out


def module_weights(lm: LoadedModel, layer: int) -> dict[str, np.ndarray]:
    """The transformers model's q/k/v/o weights of one layer, (out, in), float64."""
    out = {}

    def weight(key):
        W = lm.module(layer, key).weight.detach().double().cpu().numpy()
        return np.ascontiguousarray(W.T) if lm.hooks.get("conv1d") else W

    if lm.hooks.get("qkv"):  # a fused projection, split by the architecture's rule
        q, k, v = split_fused(weight("qkv"), lm.hooks["split"], lm.n_heads, lm.n_kv, lm.d_head)
        out.update(q=q.reshape(-1, q.shape[-1]), k=k.reshape(-1, k.shape[-1]), v=v.reshape(-1, v.shape[-1]))
    else:
        out.update({k: weight(k) for k in ("q", "k", "v")})
    out["o"] = weight("o")
    m = lm.module(layer, "o")
    if getattr(m, "bias", None) is not None:
        out["o_bias"] = m.bias.detach().double().cpu().numpy()
    return out


#: what each entry of a weight check compares (error messages)
CHECKED = {"q": "query projection", "k": "key projection", "v": "value projection", "o": "output projection",
           "norm_gain": "pre-attention norm gain", "norm_eps": "pre-attention norm epsilon"}


def weight_check(lm: LoadedModel, factors, layer: int, store_eps: float | None = None) -> dict[str, float]:
    """Max |store - model| / max|model| per quantity: the store's per-head factors (what the
    weight-space stages use) against the weights transformers runs: the q/k/v/o projections and
    the pre-attention norm's gain as the model applies it (module weight + the architecture's offset),
    and, where the store's config declares it (``store_eps``), the norm's epsilon against the one
    the norm module computes with (``variance_epsilon`` / ``eps``, or the architecture's code constant)."""
    w = module_weights(lm, layer)
    f = factors
    stacks = {
        "q": np.concatenate(list(f.W_Q), axis=0),
        "k": np.concatenate(list(f.W_K), axis=0),
        "v": np.concatenate(list(f.W_V), axis=0),
        "o": np.concatenate(list(f.W_O), axis=1),
    }
    gain = lm.norm_gain(layer)
    if gain is not None:
        w["norm_gain"] = gain
        stacks["norm_gain"] = f.norm_gain if f.norm_gain is not None else np.full(gain.shape, np.nan)
    res = {}
    for k, s in stacks.items():
        m = w[k]
        if m.shape != s.shape:
            raise ModelRunError(f"layer {layer}: {CHECKED[k]} shape {m.shape} in transformers, {s.shape} in the tensor store")
        res[k] = float(np.max(np.abs(m - s)) / max(np.max(np.abs(m)), 1e-300))
    eps = lm.norm_eps(layer)
    if eps is not None and store_eps is not None:
        res["norm_eps"] = abs(float(store_eps) - eps) / max(abs(eps), 1e-300)
    return res


def weight_mismatch(model: str, layer: int, check: dict[str, float], tol: float) -> str | None:
    """One line naming the model, the layer and each quantity over ``tol``; None when all agree."""
    bad = {k: v for k, v in check.items() if not v <= tol}
    if not bad:
        return None
    what = ", ".join(f"{CHECKED.get(k, k)} (max rel. diff {v:.3g})" for k, v in bad.items())
    return (f"model {model!r} layer {layer}: what transformers runs and the tensor store differ in the {what}; "
            f"tolerance activation.weight_rtol = {tol:g} (refetch the model or check its checkpoint)")
