"""The forward-pass oracle: an architecture description checked against transformers' own attention module.

An architecture (``headgeom.architectures``) is accepted for a safetensors checkpoint only when
transformers' own module, as the checkpoint's config builds it, computes what the architecture says.
``check(architecture, config)`` builds a tiny random instance of the config's ``model_type`` from the
config itself with the widths cut (``cut_config``: 64 wide, 4 query heads, the KV grouping kind
kept, 1 layer; transformers' own classes through ``from_config``: no weights, no remote code),
float64, biases zeroed and every norm gain or constant-initialised parameter drawn at random,
reads its factors through the architecture's adapter (``ArchitectureAdapter``, exactly as the fetch does),
and compares them with the module's forward pass, read through hooks on transformers' modules
(no headgeom code in the reference):

  * V/O (``reference``, ``oracle_errors``): one token (softmax = 1), a batch of H copies; in copy
    b every head but b is zeroed at the output projection's input; the projection's output
    must equal ``O_b V_{g(b)}^T n`` with n the attention module's captured input;
  * the folded norm: the architecture's norm type and gain applied to the pre-attention norm's
    captured input must equal its output (eps read from the module);
  * Q and K through the attention logits (``qk_reference``, ``qk_residual``), where they are
    linear (no q/k norm): two tokens at position 0, inputs [a, c] and [a', c]; the log ratio of
    the weights on the two keys differs between the passes by ``s q_h(c).(k_g(a) - k_g(a'))``;
  * the module tree (``undescribed``): every submodule of the attention block that runs before
    the output projection and that the architecture does not describe (dropout, rotary embeddings and
    a described q/k norm aside) is named with where it sits, read from the tensors it passes.

A failure refuses the architecture (``UnknownArchitectureError``) with what could not be
modelled, e.g. ``bitnet: attn_sub_norm sits between the heads' outputs and o_proj, so the OV
operator is not O V^T``. Verdicts are cached on disk (``cache_dir()``: ``$HEADGEOM_CACHE``, else
``$XDG_CACHE_HOME/headgeom``, else ``~/.cache/headgeom``; subfolder ``oracle/``), one JSON file
per (model_type, transformers version, architecture description, layout-relevant config keys), written
atomically; a warm check reads one small file and imports neither torch nor transformers.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from headgeom.architectures import DERIVED_LAYOUT, ARCHITECTURES, Architecture, config_view, derive
from headgeom.core.errors import UnknownArchitectureError
from .architecture import ArchitectureAdapter

#: bumped whenever what the oracle checks changes (old verdicts are then recomputed)
ORACLE_VERSION = 1
#: relative errors an architecture must stay under (float64 model; HF RMSNorms compute in float32)
TOL = dict(o_v=1e-10, norm=1e-5, qk=1e-4)
#: widths and counts of the tiny instance (set whatever the config says)
SMALL = dict(vocab_size=64, max_position_embeddings=64, n_positions=64, intermediate_size=64, n_inner=64,
             ffn_dim=64, word_embed_proj_dim=64, rotary_dim=8, num_local_experts=2, num_experts=2,
             num_experts_per_tok=1, moe_intermediate_size=32, shared_expert_intermediate_size=32,
             expansion_ratio=1, pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
             sliding_window=64, attention_types=[[["global"], 1]])
D_MODEL, N_HEADS, D_HEAD = 64, 4, 16
MAX_PARAMS = 5_000_000  # what a cut config may build (a 64-wide layer with its MLP or experts: far less)
#: config keys that change no module and no arithmetic of the attention block (left out of the cache key)
_NOT_LAYOUT = {"architectures", "transformers_version", "torch_dtype", "dtype", "id2label", "label2id",
               "tokenizer_class", "use_cache", "output_attentions", "output_hidden_states", "return_dict",
               "task_specific_params", "initializer_range", "rope_theta", "model_type"}
_QK_NORM = re.compile(r"(^|\.)(q|k|query|key)_?(norm|layernorm|layer_norm|ln)s?$")


# ---- the tiny instance ------------------------------------------------------------------------
def _first(c: dict, keys):
    return next((c[k] for k in keys if c.get(k) is not None), None)


def cut_config(config: dict, fam: Architecture) -> dict:
    """The config of the tiny instance: ``config`` (its text config) with the architecture's width,
    head, KV-head, head-dim and layer keys cut (MHA, GQA or MQA kept), per-layer lists cut to the
    first layer, and the sizes of ``SMALL``; every other key as the config has it."""
    c = {k: v for k, v in config_view(config).items() if not k.startswith("_")}
    H, G = _first(c, fam.heads_keys), _first(config_view(config), fam.kv_keys)
    if G == 1:
        G2 = 1
    elif G is not None and G == H or not fam.kv_keys or fam.kv_keys[0].startswith("_"):
        G2 = N_HEADS
    else:
        G2 = 2
    L = _first(c, fam.layers_keys)
    if isinstance(L, int) and L > 1:
        c.update({k: v[:1] for k, v in c.items() if isinstance(v, list) and len(v) == L})
    c.update(SMALL)
    for keys, value in ((fam.d_model_keys, D_MODEL), (fam.heads_keys, N_HEADS), (fam.layers_keys, 1),
                        (fam.head_dim_keys, D_HEAD), (tuple(k for k in fam.kv_keys if not k.startswith("_")), G2)):
        for i, k in enumerate(keys):
            if i == 0 or k in c:
                c[k] = value
    if "head_dim" in c:
        c["head_dim"] = D_HEAD
    return c


def randomize(model) -> None:
    """Biases zeroed, attention sinks at -1e4 (one token still gets weight 1), and every norm
    gain or constant-initialised parameter (a norm's ones, a scale) drawn from U(0.5, 1.5), so
    that an identity at initialisation cannot hide a module."""
    import torch

    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif "sink" in name:
                p.fill_(-1e4)
            elif "norm" in name or ".ln" in name or p.numel() > 1 and bool((p == p.flatten()[0]).all()):
                p.copy_(0.5 + torch.rand(p.shape, generator=g, dtype=p.dtype))


def tiny_model(cut: dict):
    """transformers' base model (``AutoModel``) of the cut config: float64, eager attention, eval."""
    import torch
    from transformers import AutoConfig, AutoModel

    cfg = AutoConfig.for_model(cut["model_type"], **{k: v for k, v in cut.items() if k != "model_type"})
    with torch.device("meta"):  # sized first: a composite config's uncut sub-models are not built
        n = sum(p.numel() for p in AutoModel.from_config(cfg).parameters())
    if n > MAX_PARAMS:
        raise ValueError(f"the cut config still builds {n:,} parameters (a composite model without its text config?)")
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = AutoModel.from_config(cfg, attn_implementation="eager", experts_implementation="eager")
    model = model.double().eval()
    randomize(model)
    return model


def _get(obj, dotted):
    for part in dotted.split("."):
        obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
    return obj


# ---- V/O and the pre-attention norm -----------------------------------------------------------
def reference(model, fam: Architecture, H: int, d: int) -> dict:
    """Per layer: n (attention input), x / nout / eps (the pre-attention norm's input, output and
    epsilon) and y (the output projection's output with only head b kept in batch copy b); one token."""
    import torch

    rec, handles = {}, []
    for l, layer in enumerate(_get(model.base_model, fam.layers)):
        r = rec.setdefault(l, {})

        def pre_attn(mod, args, kwargs, r=r):
            x = args[0] if args else kwargs["hidden_states"]
            r["n"] = x.detach().reshape(H, -1).double().numpy().copy()

        def pre_o(mod, args):
            z = args[0].clone().reshape(H, H, d)
            return (z.mul(torch.eye(H, dtype=z.dtype)[:, :, None]).reshape(args[0].shape),)

        def post_o(mod, args, out, r=r):
            r["y"] = out.detach().reshape(H, -1).double().numpy().copy()

        handles.append(_get(layer, fam.attn).register_forward_pre_hook(pre_attn, with_kwargs=True))
        handles.append(_get(layer, fam.o).register_forward_pre_hook(pre_o))
        handles.append(_get(layer, fam.o).register_forward_hook(post_o))
        if fam.norm:
            norm = _get(layer, fam.norm)

            def on_norm(mod, args, out, r=r, norm=norm):
                r["x"] = args[0].detach().reshape(H, -1).double().numpy().copy()
                r["nout"] = out.detach().reshape(H, -1).double().numpy().copy()
                r["eps"] = next((float(getattr(norm, a)) for a in ("variance_epsilon", "eps", "epsilon")
                                 if hasattr(norm, a)), 1e-5)

            handles.append(norm.register_forward_hook(on_norm))
    _forward(model, torch.full((H, 1), 5, dtype=torch.long), handles)
    return rec


def _forward(model, ids, handles, **kw) -> None:
    """One no-grad forward of ``ids`` (all attended), the hooks ``handles`` removed afterwards."""
    import torch

    try:
        with torch.no_grad():
            model(input_ids=ids, attention_mask=torch.ones_like(ids), **kw)
    finally:
        for h in handles:
            h.remove()


def oracle_errors(lf, r: dict, fam: Architecture) -> dict:
    """Relative errors of the factors against one layer's captured forward (``reference``)."""
    H = lf.n_heads
    pred = np.stack([lf.W_O[b] @ (lf.W_V[lf.kv_group[b]] @ r["n"][b]) for b in range(H)])
    err = {"o_v": float(np.max(np.abs(pred - r["y"])) / np.max(np.abs(r["y"])))}
    if fam.norm:
        x = r["x"]
        if lf.norm_type == "layernorm":
            xc = x - x.mean(-1, keepdims=True)
            nx = xc / np.sqrt((xc**2).mean(-1, keepdims=True) + r["eps"])
        else:
            nx = x / np.sqrt((x**2).mean(-1, keepdims=True) + r["eps"])
        err["norm"] = float(np.max(np.abs(nx * lf.norm_gain - r["nout"])) / np.max(np.abs(r["nout"])))
    return err


# ---- Q and K through the logits ---------------------------------------------------------------
def qk_reference(model, fam: Architecture, D: int, draws: int = 4) -> dict:
    """Q and K through the model's attention logits: two tokens, both at position 0 (RoPE is the
    identity there), the attention input replaced by chosen vectors [a, c] in batch copies
    0..draws-1 and [a', c] in copies draws..2 draws-1. Per layer the inputs and z of the second
    token (the query c attends to a and c)."""
    import inspect

    import torch

    g = torch.Generator().manual_seed(2)
    A = torch.randn(draws, D, generator=g, dtype=torch.float64) * 4
    A2 = torch.randn(draws, D, generator=g, dtype=torch.float64) * 4
    C = torch.randn(draws, D, generator=g, dtype=torch.float64) * 4
    X = torch.cat([torch.stack([A, C], 1), torch.stack([A2, C], 1)], 0)  # (2 draws, 2, D)
    rec, handles = {}, []
    for l, layer in enumerate(_get(model.base_model, fam.layers)):
        def pre_attn(mod, args, kwargs):
            if args:
                return (X.clone(), *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": X.clone()}

        def pre_o(mod, args, l=l):
            rec[l] = args[0].detach()[:, 1].double().numpy().copy()

        handles.append(_get(layer, fam.attn).register_forward_pre_hook(pre_attn, with_kwargs=True))
        handles.append(_get(layer, fam.o).register_forward_pre_hook(pre_o))
    ids = torch.full((2 * draws, 2), 5, dtype=torch.long)
    kw = {"position_ids": torch.zeros_like(ids)} if "position_ids" in inspect.signature(model.forward).parameters else {}
    _forward(model, ids, handles, **kw)
    return {l: (A.numpy(), A2.numpy(), C.numpy(), z) for l, z in rec.items()}


def qk_residual(lf, r) -> tuple[float, float]:
    """Relative residual of the model's logit differences against s q_h(c).(k_g(a) - k_g(a')),
    one scale s for every head and draw (the architecture's softmax scale); the weights p0, p1 on the
    two keys are solved from z = p0 V a + p1 V c (V verified by the V/O oracle)."""
    A, A2, C, z = r
    n, H = A.shape[0], lf.n_heads
    d = lf.d_head
    obs, pred = [], []
    for h in range(H):
        g = lf.kv_group[h]
        V, Q, K = lf.W_V[g], lf.W_Q[h], lf.W_K[g]
        logr = []
        for b, a in enumerate(np.concatenate([A, A2])):
            c = C[b % n]
            M = np.stack([V @ a, V @ c], 1)
            p = np.linalg.lstsq(M, z[b].reshape(H, d)[h], rcond=None)[0]
            with np.errstate(invalid="ignore", divide="ignore"):  # a module off the architecture's path: NaN, a failure
                logr.append(np.log(p[0] / p[1]))
        for b in range(n):
            obs.append(logr[b] - logr[b + n])
            pred.append((Q @ C[b]) @ (K @ A[b] - K @ A2[b]))
    obs, pred = np.array(obs), np.array(pred)
    s = float(pred @ obs / (pred @ pred))
    return float(np.max(np.abs(obs - s * pred)) / np.max(np.abs(obs))), s


# ---- the module tree --------------------------------------------------------------------------
def undescribed(model, fam: Architecture) -> list[str]:
    """What the architecture does not describe inside the attention block of layer 0: every submodule
    that runs before the output projection, other than the architecture's projections (and their
    parts), dropout, rotary embeddings and, where the architecture has one, its q/k norm; each named
    with where it sits, from the tensors it passes (two tokens, one plain forward)."""
    import torch

    layer = _get(model.base_model, fam.layers)[0]
    attn = _get(layer, fam.attn)
    within = {r: p[len(fam.attn) + 1:] for r, p in (("q", fam.q), ("k", fam.k), ("v", fam.v), ("qkv", fam.qkv),
                                                    ("o", fam.o)) if p and p.startswith(fam.attn + ".")}
    if "o" not in within:
        return []
    described = set(within.values())
    skip = (torch.nn.Dropout, torch.nn.Identity, torch.nn.Softmax, torch.nn.modules.dropout._DropoutNd)
    order, inputs, outputs, handles = {}, {}, {}, []

    def first_tensor(x):
        if isinstance(x, torch.Tensor):
            return x
        if isinstance(x, (tuple, list)):
            return next((t for t in map(first_tensor, x) if t is not None), None)
        return None

    for name, mod in attn.named_modules():
        if not name:
            continue

        def pre(m, args, kwargs, name=name):
            order.setdefault(name, len(order))
            inputs.setdefault(name, first_tensor(args) if args else first_tensor(list(kwargs.values())))

        def post(m, args, kwargs, out, name=name):
            outputs.setdefault(name, first_tensor(out))

        handles.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(mod.register_forward_hook(post, with_kwargs=True))
    _forward(model, torch.tensor([[5, 7]]), handles)
    o = within["o"]
    if o not in order:
        return []
    start = min((order[m] for r, m in within.items() if r != "o" and m in order), default=0)

    def ancestors(n):
        parts = n.split(".")
        return {".".join(parts[:i]) for i in range(1, len(parts))}

    def same(a, b):
        return (a is not None and b is not None and a.numel() == b.numel()
                and torch.allclose(a.flatten().double().sort().values, b.flatten().double().sort().values,
                                   rtol=1e-12, atol=0))

    found, covered, mods = [], set(described), dict(attn.named_modules())
    for name in sorted(order, key=order.get):
        if order[name] >= order[o] or name in covered or ancestors(name) & covered:
            continue  # after the output projection, or a part of a module described, allowed or already named
        if any(m.startswith(name + ".") for m in described):
            continue  # a container of the projections
        if (isinstance(mods[name], skip) or "Rotary" in type(mods[name]).__name__
                or fam.qk_norm and _QK_NORM.search(name)):
            covered.add(name)
            continue
        found.append(name)
        covered.add(name)
    out = []
    for name in found:
        x, y = inputs.get(name), outputs.get(name)
        if same(y, inputs.get(o)):
            out.append(f"{name} sits between the heads' outputs and {o}, so the OV operator is not O V^T")
        elif "v" in within and same(x, outputs.get(within["v"])):
            out.append(f"{name} sits on the value path (after {within['v']}), so the OV operator is not O V^T")
        elif any(r in within and same(x, outputs.get(within[r])) for r in ("q", "k")) or _QK_NORM.search(name):
            out.append(f"{name} sits on the query/key path, which the architecture does not describe, so the "
                       "attention logits are not bilinear in W_Q, W_K")
        elif order[name] < start:
            out.append(f"{name} sits between the attention block's input and its projections, so the reading "
                       "spaces are not those of W_Q, W_K, W_V")
        else:
            out.append(f"{name} ({type(mods[name]).__name__}) runs inside the attention block before {o} and the "
                       "architecture does not describe it")
    return out


# ---- the check and its cache ------------------------------------------------------------------
def check(fam: Architecture, config: dict) -> dict:
    """The oracle's verdict for the architecture ``fam`` (resolved for ``config``) on a tiny instance of
    ``config``: ``{"ok", "reason", "errors"}``; ``ok`` None when transformers cannot build the
    instance (nothing to check against). Uncached."""
    cut = cut_config(config, fam)
    mt = cut.get("model_type")
    try:
        model = tiny_model(cut)
    except Exception as e:  # transformers does not know the type, or the config does not build
        return dict(ok=None, errors={}, reason=f"{mt}: transformers cannot build a tiny instance offline "
                    f"({type(e).__name__}: {' '.join(str(e).split())[:300]})")
    try:
        _get(model.base_model, fam.layers)[0]
    except (AttributeError, IndexError, TypeError):  # e.g. a multimodal wrapper built without its text config
        return dict(ok=None, errors={}, reason=f"{mt}: transformers' {type(model).__name__} has no layer at "
                    f"{fam.layers!r} to check")
    sd = model.state_dict()
    absent = [m for m in fam.tensors if not any(k.endswith(f"{fam.layers}.0.{m}.weight") for k in sd)]
    if absent:
        return dict(ok=False, errors={}, reason=f"{mt}: the architecture {fam.name!r} names modules that transformers' "
                    f"{type(model).__name__} does not have ({', '.join(absent)})")
    adapter = ArchitectureAdapter(fam)
    cfg = config_view(model.config.to_dict())
    try:
        tree = undescribed(model, fam)
        f = adapter.fields(cfg, sd.keys())
        lf = adapter.layer_factors(lambda k: sd[k].double().numpy(), f, 0)
        err = oracle_errors(lf, reference(model, fam, f.n_heads, f.d_head)[0], fam)
        if not fam.qk_norm:
            err["qk"], s = qk_residual(lf, qk_reference(model, fam, f.d_model)[0])
            if not s > 0:
                err["qk"] = float("inf")
    except Exception as e:  # the description does not read the instance, or its forward fails
        return dict(ok=False, errors={}, reason=f"{mt}: the architecture {fam.name!r} does not read transformers' "
                    f"{type(model).__name__} ({type(e).__name__}: {' '.join(str(e).split())[:300]})")
    off = [k for k, v in err.items() if not v < TOL[k]]
    if not tree and not off:
        return dict(ok=True, errors=err, reason="")
    what = {"o_v": "V/O per head", "norm": "the pre-attention norm", "qk": "Q/K through the logits"}
    reason = "; ".join(tree) or (f"transformers' attention block does not reproduce the architecture {fam.name!r}: "
                                 + ", ".join(f"{what[k]} off by {err[k]:.1e} (relative)" for k in off))
    return dict(ok=False, errors=err, reason=f"{mt}: {reason}")


def cache_dir() -> Path:
    """Where verdicts are kept: ``$HEADGEOM_CACHE/oracle``, else under the user's cache directory
    (``$XDG_CACHE_HOME/headgeom/oracle``, default ``~/.cache/headgeom/oracle``)."""
    root = os.environ.get("HEADGEOM_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "headgeom"
    return Path(root) / "oracle"


def _transformers_version() -> str | None:
    """transformers' ``__version__`` without importing it (its ``__init__.py`` states it; reading the
    installed distributions' metadata costs more than the rest of a warm check)."""
    import sys
    from importlib.util import find_spec

    if "transformers" in sys.modules:
        return sys.modules["transformers"].__version__
    spec = find_spec("transformers")
    if spec is None or not spec.origin:
        return None
    try:
        m = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', Path(spec.origin).read_text(), re.M)
    except OSError:
        m = None
    if m is None:
        import importlib.metadata

        return importlib.metadata.version("transformers")
    return m.group(1)


def cache_key(config: dict, fam: Architecture | None) -> dict:
    """What a verdict depends on: the oracle's version, transformers' version, the architecture as
    resolved (None: derived) and the tiny instance's config less the keys that change no module
    (identifiers, dtype, token ids, dropout, epsilons, RoPE base)."""
    desc = None if fam is None else {k: v for k, v in asdict(fam).items() if k not in ("variant", "notes")}
    cut = cut_config(config, fam or ARCHITECTURES[DERIVED_LAYOUT])
    eps = set((fam or ARCHITECTURES[DERIVED_LAYOUT]).eps_keys)
    layout = {k: v for k, v in sorted(cut.items()) if k not in _NOT_LAYOUT and k not in eps and "dropout" not in k
              and not k.endswith(("_pdrop", "token_id", "token_ids"))}
    return dict(oracle=ORACLE_VERSION, model_type=cut.get("model_type"), transformers=_transformers_version(),
                architecture=desc, config=layout)


def _path(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:24]
    return cache_dir() / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', str(key['model_type']))[:60]}-{digest}.json"


def _cached(key: dict) -> dict | None:
    try:
        hit = json.loads(_path(key).read_text())
    except (OSError, ValueError):
        return None
    same = isinstance(hit, dict) and hit.get("key") == json.loads(json.dumps(key, default=str))
    return hit if same and "ok" in hit else None


def _store(key: dict, verdict: dict) -> None:
    from headgeom.core.atomic import atomic_path

    try:
        with atomic_path(_path(key)) as tmp:
            tmp.write_text(json.dumps({"key": key, **verdict}, sort_keys=True, default=str, indent=1))
    except OSError:
        pass  # an unwritable cache costs the check again next time, nothing else


def verdict(fam: Architecture | None, config: dict) -> dict:
    """The cached verdict of ``fam`` (None: the architecture ``derive`` reads from transformers' modules)
    for ``config``; computed and stored when absent. A derived verdict carries the architecture's fields."""
    key = cache_key(config, fam)
    hit = _cached(key)
    if hit is not None:
        return hit
    t0 = time.perf_counter()
    if fam is None:
        try:
            found = derive(cut_config(config, ARCHITECTURES[DERIVED_LAYOUT]))
        except UnknownArchitectureError as e:
            v = dict(ok=False, errors={}, reason=str(e), derived=None)
        except Exception as e:  # transformers' modules are not what derive() can read
            v = dict(ok=False, errors={}, derived=None, reason=f"architecture {config_view(config).get('model_type')!r}: "
                     f"its modules cannot be read as an architecture ({type(e).__name__}: {' '.join(str(e).split())[:300]})")
        else:
            v = {**check(found, config), "derived": {k: getattr(found, k) for k in _DERIVED}}
            v["ok"] = bool(v["ok"])  # a derived architecture that cannot be built is refused
    else:
        v = check(fam, config)
    v["seconds"] = round(time.perf_counter() - t0, 3)
    _store(key, v)
    return v


_DERIVED = ("layers", "norm_type", "norm_offset", "qk_norm", "post_norm", "notes")


def verify(fam: Architecture, config: dict) -> None:
    """Refuse (UnknownArchitectureError) a named architecture whose transformers module, for ``config``,
    computes something the architecture does not describe; nothing when it agrees or when transformers
    cannot build the config's ``model_type`` offline (nothing to check against)."""
    v = verdict(fam, config)
    if v["ok"] is False:
        raise UnknownArchitectureError(f"{v['reason']} (checked against transformers' own attention module "
                                       f"on a tiny random instance)")


def derived_architecture(config: dict) -> Architecture:
    """The architecture of a ``model_type`` that no architecture names, read from transformers' modules
    (``headgeom.architectures.derive``) and accepted only when the oracle passes."""
    v = verdict(None, config)
    mt = config_view(config).get("model_type")
    if not v["ok"]:
        raise UnknownArchitectureError(v["reason"] if v.get("derived") is None else
                                       f"{v['reason']} (checked against transformers' own attention module on a "
                                       "tiny random instance)")
    return Architecture(mt, (mt,), **v["derived"])
