"""Family job functions of the activation stage (plain functions; workflow scripts call them).

  forward_job          one per (model, corpus): windows -> transformers forward pass -> one
                       activation shard per layer (safetensors, float32: z (N, H, d_head) and
                       x (N, d_model)), with the corpus record and every window's token-id sha256
  natural_return_job   one per (model, layer): paper 1 alignment / g_y / wrong-V per head
  read_paths_job       one per (model, writer layer): every later reader layer, kinds Q/K/V
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from headgeom.core.errors import ModelRunError
from headgeom.core.provenance import code_version
from headgeom.io.files import current_umask, sha256_file, write_json
from headgeom.io.shards import write_shard
from headgeom.io.store import TensorStore
from headgeom.io.texts import load_corpus, make_windows, text_summary
from headgeom.jobs.common import shard_provenance, with_keys

META = "headgeom"
FORWARD_SUMMARY = "forward.json"


def layer_file(act_dir, layer: int) -> Path:
    return Path(act_dir) / f"layer{layer}.safetensors"


def _save_layer(path: Path, arrays: dict, meta: dict) -> None:
    from safetensors.numpy import save_file

    arrays = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in arrays.items()}
    save_file(arrays, str(path), metadata={META: json.dumps(meta, sort_keys=True, default=str)})


def read_layer(act_dir, layer: int) -> tuple[dict, dict]:
    """(arrays, provenance) of one activation shard."""
    from safetensors import safe_open

    p = layer_file(act_dir, layer)
    if not p.exists():
        raise ModelRunError(f"activation shard {p} is missing (rerun its forward job)")
    with safe_open(str(p), "np") as fh:
        meta = json.loads((fh.metadata() or {}).get(META, "{}"))
        arrays = {k: fh.get_tensor(k) for k in fh.keys()}
    return arrays, meta


def forward_job(model: str, entry: dict, store_dir, corpus: str, corpus_entry: dict, out_dir, params: dict,
                log=print, *, step: str) -> dict:
    """Run the windows of ``corpus`` through ``model`` and write ``out_dir/layer{l}.safetensors``
    plus ``out_dir/forward.json``. The directory appears whole or not at all. ``step`` is the
    registry's name of the forward step (``families.FORWARD.name``), recorded in the provenance;
    the caller passes it because the registry imports this module."""
    from headgeom.io.forward import capture, open_model, weight_check, weight_mismatch

    t0 = time.perf_counter()
    store = TensorStore(store_dir)
    text, crec = load_corpus(corpus, corpus_entry)
    out_dir = Path(out_dir)
    with open_model(model, entry, device=params.get("device", "cpu"), log=log) as lm:
        t_load = time.perf_counter() - t0
        ids, wrec = make_windows(lm.tokenizer, text, corpus, int(params["n_windows"]), int(params["window"]),
                                 bos=bool(params.get("bos", True)))
        L = lm.n_layers()
        if L != store.fields.n_layers or lm.n_heads != store.fields.n_heads or lm.d_head != store.fields.d_head:
            raise ModelRunError(
                f"model {model!r}: transformers runs {L} layers x {lm.n_heads} heads x d_head {lm.d_head}, the tensor "
                f"store has {store.fields.n_layers} x {store.fields.n_heads} x {store.fields.d_head}")
        # the weight-space factors and the forward pass must come from the same weights
        # (the norm's gain and epsilon included: the read paths use the store's gain and this eps)
        checks, tol = {}, float(params.get("weight_rtol", 1e-5))
        store_eps = _store_eps(store, entry.get("architecture"))
        for l in range(L):
            checks[l] = weight_check(lm, store.layer_factors(l), l, store_eps)
            bad = weight_mismatch(model, l, checks[l], tol)
            if bad:
                raise ModelRunError(bad)
        eps = {l: lm.norm_eps(l) for l in range(L)}
        post = lm.hooks.get("post_norm")
        write = ({"write_point": "post_norm", "module": post, "norm_type": lm.hooks.get("post_norm_type"),
                  "eps": {l: lm.post_norm_eps(l) for l in range(L)}} if post else {"write_point": "o_proj"})
        t1 = time.perf_counter()
        acts = capture(lm, ids)
        t_fwd = time.perf_counter() - t1
        model_class = type(lm.model).__name__
        tok_name = type(lm.tokenizer).__name__
        vocab = int(getattr(lm.tokenizer, "vocab_size", 0) or 0)
        tok_files = dict(lm.tokenizer_files)
    base = {
        "job": step, "model": model, "corpus": corpus, "corpus_record": crec,
        "text": text_summary(text), "windows": wrec,
        "tokenizer": {"class": tok_name, "vocab_size": vocab, "files_sha256": tok_files},
        "transformers_class": model_class, "params": params, "code": code_version(),
        "model_source": store.provenance(),
    }
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        files = {}
        for l in range(L):
            meta = dict(base, layer=l, norm_eps=eps[l], norm_type=store.layer_factors(l).norm_type,
                        weight_check=checks[l], n_tokens=int(acts[l]["x"].shape[0]))
            arrays = {k: acts[l][k] for k in ("z", "x")}
            if post:  # the post-attention norm's per-token factor and gain (headgeom.io.forward)
                meta["write"] = {"module": post, "norm_type": write["norm_type"], "eps": write["eps"][l]}
                arrays.update(write_scale=acts[l]["write_scale"], write_gain=acts[l]["write_gain"])
            p = layer_file(tmp, l)
            _save_layer(p, arrays, meta)
            files[p.name] = sha256_file(p)
        summary = dict(base, n_layers=L, files=files, norm_eps=eps, weight_check=checks, write=write,
                       seconds={"load": round(t_load, 2), "forward": round(t_fwd, 2)})
        write_json(tmp / FORWARD_SUMMARY, summary)
        os.chmod(tmp, 0o777 & ~current_umask())
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(f"[forward {model} / {corpus}] {ids.shape[0]} x {ids.shape[1]} tokens, {L} layers, load {t_load:.1f}s, "
        f"forward {t_fwd:.1f}s, max weight diff {max(max(c.values()) for c in checks.values()):.2e}")
    return summary


def _store_eps(store: TensorStore, architecture=None) -> float | None:
    """The pre-attention norm epsilon the store's checkpoint config declares (None: none named)."""
    from headgeom.architectures import config_eps, family_for

    cfg = store.manifest.get("config") or {}
    return config_eps(cfg, None if "general.architecture" in cfg else family_for(cfg, architecture))


def _post_ln(store: TensorStore) -> bool:
    """The store's family is post-LN (the attention output is normed after the residual add)."""
    from headgeom.architectures import FAMILIES, config_view

    fam = FAMILIES.get(store.manifest.get("adapter"))
    if fam is None:
        return False
    return fam.resolve(config_view(store.manifest.get("config") or {})).post_ln


def _prov(job: str, store: TensorStore, act_dir, layer: int, params: dict) -> dict:
    """The weight stages' shard provenance plus the forward pass the activations came from."""
    summ = json.loads((Path(act_dir) / FORWARD_SUMMARY).read_text())
    return {
        **shard_provenance(job, store, layer, params),
        "activations": {"corpus": summ["corpus"], "corpus_record": summ["corpus_record"], "windows": summ["windows"],
                        "files": summ["files"]},
    }


def natural_return_job(store_dir, act_dir, layer: int, out, params: dict, log=print) -> None:
    from headgeom.methods.natural_return import layer_return

    t0 = time.perf_counter()
    store = TensorStore(store_dir)
    f = store.layer_factors(layer)
    arrays, _ = read_layer(act_dir, layer)
    cols = layer_return(f, arrays["z"], endpoint=params.get("endpoint", "pooled"))
    model = store.manifest["model"]
    write_shard(out, with_keys(cols, model, layer), _prov("activation_natural_return", store, act_dir, layer, params))
    log(f"[natural return {model} L{layer}] {f.n_heads} heads, median alignment {np.nanmedian(cols['align']):.3f}, "
        f"{time.perf_counter() - t0:.2f}s")


_READER_TERMS: dict | None = None  # (store, layer, kind, rank_rtol) -> ReaderTerms, inside keep_reader_terms()
READER_TERMS_MB = 512  # keep_reader_terms: what is kept at most


@contextmanager
def keep_reader_terms():
    """Within this block, read_paths_job keeps each reader layer's weight-only terms
    (methods.read_paths.reader_terms) for the next jobs of the same store, up to READER_TERMS_MB: a
    process that recomputes every writer layer of a model (the choice sensitivity's activation
    switches, headgeom.verify.audit.recompute_shards) builds a reader's bases once instead of once
    per writer layer. The same arrays, so the same bits."""
    global _READER_TERMS
    outer = _READER_TERMS
    _READER_TERMS = {} if outer is None else outer
    try:
        yield
    finally:
        _READER_TERMS = outer


def _reader_terms(store, layer: int, kind: str, fr, rank_rtol: float):
    from headgeom.methods.read_paths import reader_terms

    if _READER_TERMS is None:
        return reader_terms(fr, kind, rank_rtol)
    key = (str(store.path.resolve()), store.manifest.get("store_sha256"), layer, kind, rank_rtol)
    rt = _READER_TERMS.get(key)
    if rt is None:
        rt = reader_terms(fr, kind, rank_rtol)
        used = sum(t.SR.nbytes + t.B.nbytes for t in _READER_TERMS.values())
        if used + rt.SR.nbytes + rt.B.nbytes <= READER_TERMS_MB * 2**20:
            _READER_TERMS[key] = rt
    return rt


def read_paths_job(store_dir, act_dir, layer: int, out, params: dict, log=print) -> None:
    """Writer layer ``layer`` against every reader layer l' > layer, kinds params['kinds']."""
    from headgeom.methods.read_paths import layer_pair_terms, reader_rows, write_factors, writer_terms

    t0 = time.perf_counter()
    store = TensorStore(store_dir)
    L = store.fields.n_layers
    fw = store.layer_factors(layer)
    warrays, wmeta = read_layer(act_dir, layer)
    Ow, zw = write_factors(fw.W_O, warrays["z"], warrays, wmeta, params.get("write_point", "residual"))
    flag = "post_ln_read_path" if _post_ln(store) else "no_pre_norm_read_path"
    wt = writer_terms(fw, zw, Ow, rank_rtol=params.get("rank_rtol", 1e-6))  # once: the writer's own terms
    parts = []
    for lr in range(layer + 1, L):
        fr = store.layer_factors(lr)
        arrays, meta = read_layer(act_dir, lr)
        # once per reader layer: what its kinds share (norm statistics, S_j, c_tj)
        pt = layer_pair_terms(wt, fr, arrays["x"], meta.get("norm_eps"), eps_exact=params.get("eps_exact", True))
        for kind in params.get("kinds", ["Q", "K", "V"]):
            cols = reader_rows(pt, kind, no_norm_flag=flag,
                               rt=_reader_terms(store, lr, kind, fr, params.get("rank_rtol", 1e-6)))
            n = len(cols["writer"])
            cols = {"reader_layer": np.full(n, lr, np.int64), "kind": np.array([kind] * n, dtype=object), **cols}
            parts.append(cols)
    names = ["reader_layer", "kind", "writer", "reader", "rho", "share", "e_lin", "e_norm", "e_cross", "e_tot",
             "ratio_lin_tot", "rel_rms", "cross_sign", "composition", "rank_writer", "rank_reader", "flags"]
    if parts:
        cols = {k: np.concatenate([p[k] for p in parts]) for k in names}
    else:  # the last layer writes to no later reader: an empty shard with the same columns
        ints = ("reader_layer", "writer", "reader", "rank_writer", "rank_reader")
        cols = {k: np.array([], dtype=object if k in ("kind", "flags") else np.int64 if k in ints
                            else np.float64) for k in names}
        cols["model"] = np.array([], dtype=object)
        cols["writer_layer"] = np.array([], dtype=np.int64)
    model = store.manifest["model"]
    if parts:
        cols = with_keys(cols, model, layer, key="writer_layer")
    write_shard(out, cols, _prov("activation_read_paths", store, act_dir, layer, params))
    log(f"[read paths {model} L{layer}] {len(cols['writer'])} rows, {time.perf_counter() - t0:.2f}s")


__all__ = ["forward_job", "natural_return_job", "read_paths_job", "read_layer", "layer_file"]
