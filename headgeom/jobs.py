"""Entry points for the pipeline's jobs. Workflow scripts call these; they hold no math."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from .provenance import code_version
from .shards import read_shards, write_shard
from .store import TensorStore


def _shard_provenance(kind: str, store: TensorStore, layer: int, params: dict) -> dict:
    return {
        "job": kind,
        "model": store.manifest["model"],
        "layer": layer,
        "params": params,
        "code": code_version(),
        "model_source": store.provenance(),
        "tensors": store.layer_tensors(layer),
        "fields": store.manifest["fields"],
    }


def _with_keys(cols: dict, model: str, layer: int) -> dict:
    n = len(next(iter(cols.values())))
    return {"model": np.array([model] * n, dtype=object), "layer": np.full(n, layer, dtype=np.int64), **cols}


def closure_job(store_dir, layer: int, out, params: dict, log=print) -> None:
    from .closure import closure_layer

    t0 = time.perf_counter()
    store = TensorStore(store_dir)
    f = store.layer_factors(layer)
    cols = closure_layer(f, identity_rtol=params.get("identity_rtol", 1e-10), rank_rtol=params.get("rank_rtol", 1e-6))
    model = store.manifest["model"]
    write_shard(out, _with_keys(cols, model, layer), _shard_provenance("closure", store, layer, params))
    flagged = int(sum(1 for x in cols["flags"] if x))
    log(f"[closure {model} L{layer}] {f.n_heads} heads, max P {np.nanmax(cols['P']) if np.isfinite(cols['P']).any() else float('nan'):.4f}, "
        f"{flagged} flagged, {time.perf_counter() - t0:.2f}s")


def pk_job(store_dir, layer: int, out, params: dict, log=print) -> None:
    from .pk import pk_layer

    t0 = time.perf_counter()
    store = TensorStore(store_dir)
    f = store.layer_factors(layer)
    cols, facts = pk_layer(f, kinds=tuple(params.get("kinds", ("O", "Q", "K", "V"))), rank_rtol=params.get("rank_rtol", 1e-6))
    model = store.manifest["model"]
    prov = _shard_provenance("pk", store, layer, params)
    prov["layer_facts"] = facts
    prov["folded"] = f.notes.get("folded", "")
    write_shard(out, _with_keys(cols, model, layer), prov)
    log(f"[pk {model} L{layer}] {len(cols['pk'])} pairs, {time.perf_counter() - t0:.2f}s")


def manifest_fields(manifests: dict[str, str]) -> dict[str, dict]:
    return {m: json.loads(Path(p).read_text())["fields"] for m, p in manifests.items()}


def table_job(name: str, shards: list[str], models: list[str], outputs: dict, params: dict, manifests: dict | None = None) -> None:
    from . import tables

    cols, provs = read_shards(shards)
    if name == "closure_tail":
        t = tables.closure_tail(cols, models, strong_threshold=params["strong_threshold"])
    elif name == "pk_writing":
        t = tables.pk_writing(cols, models, manifest_fields(manifests), small_angle_deg=params["small_angle_deg"])
    else:
        raise ValueError(f"unknown table {name!r}")
    t.write(outputs, provs, params)


def figure_job(name: str, shards: list[str], models: list[str], outputs: dict, params: dict, manifests: dict | None = None) -> None:
    from . import figures

    cols, provs = read_shards(shards)
    prov = {"figure": name, "params": params, "inputs": provs}
    if name == "closure_ccdf":
        fig = figures.closure_ccdf(cols, models, threshold=params["strong_threshold"])
    elif name == "pk_rho_ccdf":
        fields = manifest_fields(manifests)
        picks = {m: pick_layer(params["layer"], fields[m]["n_layers"]) for m in models}
        prov["layers"] = picks
        fig = figures.pk_rho_ccdf(cols, picks, fields, kind=params.get("kind", "O"))
    else:
        raise ValueError(f"unknown figure {name!r}")
    figures.save(fig, outputs, prov)


def pick_layer(spec, n_layers: int) -> int:
    """'middle' -> n_layers // 2; an int selects that layer (negative counts from the end)."""
    if spec == "middle":
        return n_layers // 2
    layer = int(spec)
    return layer % n_layers if layer < 0 else min(layer, n_layers - 1)
