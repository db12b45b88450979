"""The job functions of the activation stage's shard families (plain functions; workflow scripts call them).

  forward_job          one per (model, corpus): windows -> transformers forward pass -> one
                       activation shard per layer (safetensors, float32: z (N, H, d_head) and
                       x (N, d_model)), with the corpus record and every window's token-id sha256
  windows_job          the first n windows of a longer forward pass of the same corpus and window
                       length, the same bytes as a forward pass of n windows writes
  natural_return_job   one per (model, layer): paper 1 alignment / g_y / wrong-V per head
  read_paths_job       one per (model, writer layer): every later reader layer, kinds Q/K/V
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from headgeom.core.errors import DamagedFileError, ModelRunError
from headgeom.core.provenance import code_version
from headgeom.io.files import RECORD, current_umask, sha256_file, write_recorded_json
from headgeom.io.shards import write_shard
from headgeom.io.store import TensorStore
from headgeom.io.texts import load_corpus, make_windows, text_summary
from headgeom.jobs.common import shard_provenance, store_dir, with_keys

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
    problems = activation_problems(act_dir, [p.name])
    if problems:
        raise DamagedFileError(f"{problems[0]}; rebuild it: snakemake -c2 --force {act_dir} (then snakemake -c2 "
                               "for what reads it; add your usual --configfile)")
    with safe_open(str(p), "np") as fh:
        meta = json.loads((fh.metadata() or {}).get(META, "{}"))
        arrays = {k: fh.get_tensor(k) for k in fh.keys()}
    return arrays, meta


def forward_where(act_dir) -> dict | None:
    """What the forward pass in ``act_dir`` is by its place in a work directory: model, corpus,
    n_windows, window (and ``alt`` under results/sensitivity/<alt>/), from the directory's last
    ``results/activations/<model>/<corpus>/<n>x<w>`` (headgeom.layout.ACTIVATIONS); None outside it."""
    parts = Path(act_dir).parts
    at = next((i for i in range(len(parts) - 4, 0, -1) if parts[i] == "activations" and parts[i - 1] == "results"),
              None)
    if at is None or len(parts) != at + 4:
        return None
    m = re.fullmatch(r"(\d+)x(\d+)", parts[at + 3])
    if m is None:
        return None
    where = {"model": parts[at + 1], "corpus": parts[at + 2], "n_windows": int(m[1]), "window": int(m[2])}
    if at >= 4 and parts[at - 3] == "sensitivity" and parts[at - 4] == "results":
        where["alt"] = parts[at - 2]
    return where


def forward_identity(act_dir, summary: dict) -> dict:
    """What a forward pass is (its forward.json's ``identity``): its place, its checkpoint (tensor-store
    sha256) and the digest of its params."""
    from headgeom.io.shards import config_digest

    return {"where": forward_where(act_dir), "checkpoint": (summary.get("model_source") or {}).get("store_sha256"),
            "config": config_digest(summary.get("params"))}


def activation_problems(act_dir, names=None, hash_files: bool = True) -> list[str]:
    """Why the activation shards ``names`` of a forward pass's directory (default: every one its
    forward.json records) are not the sound files of this forward pass ([] = they are): forward.json
    matches its content record and its identity is this directory's (``forward_where``), and each
    shard matches the sha256 it records (``hash_files=False``: each shard exists, unhashed)."""
    from headgeom.io.files import recorded_json

    summ = Path(act_dir) / FORWARD_SUMMARY
    where = forward_where(act_dir)
    rec, problems = recorded_json(summ, None if where is None else {"where": where})
    if problems:
        return [f"{Path(act_dir) / problems[0]}"]  # e.g. <dir>/forward.json: its content does not match ...
    files = rec.get("files")
    if not isinstance(files, dict):
        return [f"{summ} records no files"]
    for name in files if names is None else names:
        p = Path(act_dir) / name
        if name not in files:
            problems.append(f"{p} is damaged: its forward.json records no sha256 for it")
        elif not p.is_file():
            problems.append(f"{p} is missing")
        elif hash_files and sha256_file(p) != files[name]:
            problems.append(f"{p} is damaged: its content does not match the sha256 its forward.json records")
    return problems


def forward_job(model: str, entry: dict, store_dir, corpus: str, corpus_entry: dict, out_dir, params: dict,
                log=print, *, step: str, text: tuple[str, dict] | None = None, loaded=None) -> dict:
    """Run the windows of ``corpus`` through ``model`` and write ``out_dir/layer{l}.safetensors``
    plus ``out_dir/forward.json``. The directory appears whole or not at all. ``step`` is the
    registry's name of the forward step (``families.FORWARD.name``), recorded in the provenance;
    the caller passes it because the registry imports this module. headgeom.api gives the text
    itself (``text``: (text, its record), instead of loading ``corpus_entry``) and a model in
    memory (``loaded``: a headgeom.io.forward.LoadedModel, instead of opening ``entry``)."""
    from contextlib import nullcontext

    from headgeom.io.forward import capture, open_model, weight_check, weight_mismatch

    t0 = time.perf_counter()
    store = TensorStore(store_dir)
    text, crec = text if text is not None else load_corpus(corpus, corpus_entry)
    out_dir = Path(out_dir)
    opened = nullcontext(loaded) if loaded is not None else open_model(model, entry, device=params.get("device", "cpu"),
                                                                        log=log)
    with opened as lm:
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
    def layer(l):
        meta = dict(base, layer=l, norm_eps=eps[l], norm_type=store.layer_factors(l).norm_type,
                    weight_check=checks[l], n_tokens=int(acts[l]["x"].shape[0]))
        arrays = {k: acts[l][k] for k in ("z", "x")}
        if post:  # the post-attention norm's per-token factor and gain (headgeom.io.forward)
            meta["write"] = {"module": post, "norm_type": write["norm_type"], "eps": write["eps"][l]}
            arrays.update(write_scale=acts[l]["write_scale"], write_gain=acts[l]["write_gain"])
        return arrays, meta

    summary = _write_pass(out_dir, L, layer, dict(base, n_layers=L, norm_eps=eps, weight_check=checks, write=write,
                                                  seconds={"load": round(t_load, 2), "forward": round(t_fwd, 2)}))
    log(f"[forward {model} / {corpus}] {ids.shape[0]} x {ids.shape[1]} tokens, {L} layers, load {t_load:.1f}s, "
        f"forward {t_fwd:.1f}s, max weight diff {max(max(c.values()) for c in checks.values()):.2e}")
    return summary


def _write_pass(out_dir, n_layers: int, layer, summary: dict) -> dict:
    """Write a forward pass's directory: layer(l) -> (arrays, meta) of each layer's shard, then
    forward.json (``summary`` plus the shards' sha256 under ``files``). The directory appears whole
    or not at all, with the user's umask."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        files = {}
        for l in range(n_layers):
            p = layer_file(tmp, l)
            _save_layer(p, *layer(l))
            files[p.name] = sha256_file(p)
        summary = {**{k: v for k, v in summary.items() if k not in (RECORD, "identity")}, "files": files}
        write_recorded_json(tmp / FORWARD_SUMMARY, summary, forward_identity(out_dir, summary))
        os.chmod(tmp, 0o777 & ~current_umask())
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return summary


#: the arrays of an activation shard with one row per token (the others, write_gain, are per model dimension)
TOKEN_ARRAYS = ("z", "x", "write_scale")


def windows_job(src_dir, out_dir, n_windows: int, log=print) -> dict:
    """The forward pass of the first ``n_windows`` windows, from the longer pass in ``src_dir``
    (same model, corpus, window length and params but the window count): windows are cut
    consecutively from the start of the corpus and each runs through the model alone, so its
    first n windows are what a pass of n windows computes, bit for bit. Each layer's shard is
    written as that pass writes it (the same arrays and metadata, so the same bytes); forward.json
    also names the pass they were taken from (``windows_of``: its directory and the sha256 of its
    forward.json)."""
    t0 = time.perf_counter()
    src = Path(src_dir)
    summ_path = src / FORWARD_SUMMARY
    if not summ_path.is_file():
        raise ModelRunError(f"forward pass {src} has no {FORWARD_SUMMARY} (rerun its forward job)")
    summ = json.loads(summ_path.read_text())
    w = summ["windows"]
    n_src, win = int(w["n_windows"]), int(w["window"])
    n_windows = int(n_windows)
    if not 1 <= n_windows <= n_src:
        raise ModelRunError(f"forward pass {src} has {n_src} windows: its first {n_windows} cannot be taken")
    N = n_windows * win
    wrec = {**w, "n_windows": n_windows, "window_sha256": w["window_sha256"][:n_windows]}
    params = {**summ["params"], "n_windows": n_windows}

    def layer(l):
        arrays, meta = read_layer(src, l)
        if meta.get("n_tokens") != n_src * win:
            raise ModelRunError(f"{layer_file(src, l)}: {meta.get('n_tokens')} tokens, its forward.json says "
                                f"{n_src} x {win}")
        unknown = sorted(set(arrays) - set(TOKEN_ARRAYS) - {"write_gain"})
        if unknown:
            raise ModelRunError(f"{layer_file(src, l)}: arrays {unknown} are neither per token nor write_gain")
        arrays = {k: (v[:N] if k in TOKEN_ARRAYS else v) for k, v in arrays.items()}
        return arrays, {**meta, "windows": wrec, "params": params, "n_tokens": N}

    summary = _write_pass(out_dir, int(summ["n_layers"]), layer, {
        **summ, "windows": wrec, "params": params,
        "windows_of": {"dir": str(src_dir), "forward_json_sha256": sha256_file(summ_path)},
        "seconds": {"windows": round(time.perf_counter() - t0, 2)}})
    log(f"[forward {summ['model']} / {summ['corpus']}] the first {n_windows} of {n_src} windows of {src_dir}, "
        f"{summ['n_layers']} layers, {time.perf_counter() - t0:.1f}s")
    return summary


def _store_eps(store: TensorStore, architecture=None) -> float | None:
    """The pre-attention norm epsilon the store's checkpoint config declares (None: none named)."""
    from headgeom.architectures import config_eps, architecture_for

    cfg = store.manifest.get("config") or {}
    return config_eps(cfg, None if "general.architecture" in cfg else architecture_for(cfg, architecture))


def _post_ln(store: TensorStore) -> bool:
    """The store's architecture is post-LN (the attention output is normed after the residual add)."""
    from headgeom.architectures import ARCHITECTURES, config_view

    fam = ARCHITECTURES.get(store.manifest.get("adapter"))
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


_READER_TERMS: dict | None = None  # what read_paths_job keeps of reader layers, inside keep_reader_terms()
READER_TERMS_MB = 512  # keep_reader_terms: what is kept at most
_REUSE: dict | None = None  # recomputed shard path -> (the run's shard, its columns to take), inside reuse_columns()


@contextmanager
def keep_reader_terms():
    """Within this block, read_paths_job keeps what it computes of a reader layer alone for the next
    jobs of the same store, up to READER_TERMS_MB: its weight-only terms (methods.read_paths.reader_terms)
    and, per forward pass, its norm statistics and per-token squared responses
    (``reader_response_sq``). A process that recomputes every writer layer of a model (the choice
    sensitivity's activation switches, headgeom.verify.audit.recompute_shards) builds them once per
    reader layer instead of once per (writer, reader) layer pair. The same arrays, so the same bits."""
    global _READER_TERMS
    outer = _READER_TERMS
    _READER_TERMS = {} if outer is None else outer
    try:
        yield
    finally:
        _READER_TERMS = outer


@contextmanager
def reuse_columns(shards: dict):
    """Within this block, read_paths_job writing shard ``out`` (a key of ``shards``, resolved) takes
    the columns ``shards[out] = (path of the run's shard, columns)`` from that shard instead of
    computing them: what a recomputation under a switch that cannot change them (methods.read_paths.
    COLUMN_READS) would compute again bit for bit. Rows whose keys do not match the run's shard
    are computed. The shard's provenance records which columns came from where."""
    global _REUSE
    outer = _REUSE
    _REUSE = {str(Path(k).resolve()): v for k, v in shards.items()}
    try:
        yield
    finally:
        _REUSE = outer


def _nbytes(v) -> int:
    """Bytes of the arrays in v: an array, a tuple of them or an object holding them."""
    if isinstance(v, np.ndarray):
        return v.nbytes
    parts = v if isinstance(v, tuple) else vars(v).values()
    return sum(a.nbytes for a in parts if isinstance(a, np.ndarray))


def _kept(key, make):
    """make() kept under ``key`` inside keep_reader_terms() (while the budget allows); made afresh outside it."""
    if _READER_TERMS is None:
        return make()
    hit = _READER_TERMS.get(key)
    if hit is None:
        hit = make()
        if sum(map(_nbytes, _READER_TERMS.values())) + _nbytes(hit) <= READER_TERMS_MB * 2**20:
            _READER_TERMS[key] = hit
    return hit


def _given_blocks(out, names: list, fields, layer: int, kinds) -> tuple[dict, dict | None]:
    """({(reader layer, kind): {column: values}} from the run's shard that reuse_columns names for
    ``out`` (empty when none), provenance note). The run's shard must hold a block's rows where
    this job makes them: reader layers after ``layer``, each of ``kinds``, every (writer, reader)
    head pair in reader_rows' order."""
    import pyarrow.parquet as pq

    from headgeom.io.shards import verify_shard
    from headgeom.jobs.pk_paper import heads_of_kind

    hit = (_REUSE or {}).get(str(Path(out).resolve()))
    if hit is None:
        return {}, None
    base, columns = Path(hit[0]), [c for c in hit[1] if c in names]
    if not columns or not base.is_file():
        return {}, None
    sha = verify_shard(base)  # reused columns come only from a shard that matches its record
    t = pq.read_table(base, columns=["reader_layer", "kind", "writer", "reader", *columns]).to_pydict()
    rl, kd = np.asarray(t["reader_layer"]), np.asarray(t["kind"], dtype=object)
    out_blocks, i, n_blocks = {}, 0, 0
    for lr in range(layer + 1, fields.n_layers):
        for kind in kinds:
            jj, hh = (a.ravel() for a in np.meshgrid(np.arange(fields.n_heads), np.arange(heads_of_kind(fields, kind)),
                                                     indexing="ij"))
            sl = slice(i, i + jj.size)
            if (i + jj.size <= len(rl) and (rl[sl] == lr).all() and (kd[sl] == kind).all()
                    and np.array_equal(t["writer"][sl], jj) and np.array_equal(t["reader"][sl], hh)):
                out_blocks[(lr, kind)] = {c: np.asarray(t[c][sl], np.float64) for c in columns}
            i, n_blocks = i + jj.size, n_blocks + 1
    return out_blocks, {"columns": columns, "shard_sha256": sha, "blocks": len(out_blocks),
                        "of_blocks": n_blocks}


def read_paths_job(store_dir, act_dir, layer: int, out, params: dict, log=print) -> None:
    """Writer layer ``layer`` against every reader layer l' > layer, kinds params['kinds']."""
    from headgeom.methods.read_paths import (layer_pair_terms, norm_stats, reader_response_sq, reader_rows,
                                             reader_terms, write_factors, writer_terms)

    t0 = time.perf_counter()
    store = TensorStore(store_dir)
    L = store.fields.n_layers
    fw = store.layer_factors(layer)
    warrays, wmeta = read_layer(act_dir, layer)
    Ow, zw = write_factors(fw.W_O, warrays["z"], warrays, wmeta, params.get("write_point", "residual"))
    flag = "post_ln_read_path" if _post_ln(store) else "no_pre_norm_read_path"
    rtol = params.get("rank_rtol", 1e-6)
    eps_exact = params.get("eps_exact", True)
    kinds = params.get("kinds", ["Q", "K", "V"])
    wt = writer_terms(fw, zw, Ow, rank_rtol=rtol)  # once: the writer's own terms
    names = ["reader_layer", "kind", "writer", "reader", "rho", "share", "e_lin", "e_norm", "e_cross", "e_tot",
             "ratio_lin_tot", "rel_rms", "cross_sign", "composition", "rank_writer", "rank_reader", "flags"]
    given, reused = _given_blocks(out, names, store.fields, layer, kinds)
    store_key = (str(store.path.resolve()), store.manifest.get("store_sha256"))
    act_key = (*store_key, str(Path(act_dir).resolve()))
    parts = []
    for lr in range(layer + 1, L):
        fr = store.layer_factors(lr)
        arrays, meta = read_layer(act_dir, lr)
        eps = meta.get("norm_eps")
        # what the reader layer's kinds share with every writer: its norm statistics
        norms = _kept(("norms", *act_key, lr, eps, eps_exact),
                      lambda: norm_stats(arrays["x"], fr.norm_type, eps, eps_exact))
        # once per reader layer: what its kinds share (S_j, c_tj, X_j)
        pt = layer_pair_terms(wt, fr, arrays["x"], eps, eps_exact=eps_exact, norms=norms)
        for kind in kinds:
            rt = _kept(("reader", *store_key, lr, kind, rtol), lambda: reader_terms(fr, kind, rtol))
            a2 = _kept(("a2", *act_key, lr, kind, rtol, eps), lambda: reader_response_sq(norms[1], rt))
            cols = reader_rows(pt, kind, no_norm_flag=flag, rt=rt, a2=a2, given=given.get((lr, kind)))
            n = len(cols["writer"])
            cols = {"reader_layer": np.full(n, lr, np.int64), "kind": np.array([kind] * n, dtype=object), **cols}
            parts.append(cols)
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
    prov = _prov("activation_read_paths", store, act_dir, layer, params)
    if reused:
        prov["columns_from_run"] = reused
    write_shard(out, cols, prov)
    log(f"[read paths {model} L{layer}] {len(cols['writer'])} rows, {time.perf_counter() - t0:.2f}s")


__all__ = ["forward_job", "windows_job", "natural_return_job", "read_paths_job", "read_layer", "layer_file", "keep_reader_terms",
           "reuse_columns"]


# ------------------------------------------------------------------ entry points (the registry's ``run``)


def run_activation_natural_return(inputs, outputs, wildcards, params, log):
    natural_return_job(store_dir(inputs), inputs["acts"], int(wildcards["layer"]), outputs["shard"], params, log=log)


def run_activation_read_paths(inputs, outputs, wildcards, params, log):
    read_paths_job(store_dir(inputs), inputs["acts"], int(wildcards["layer"]), outputs["shard"], params, log=log)
