"""Entry points of paper 1's per-layer jobs (workflow scripts call these; the math is in
headgeom.methods.paper1). Each job reads one layer of one model and writes its Parquet shard(s)
atomically with provenance (headgeom.io.shards.write_shard)."""

from __future__ import annotations

import time

import numpy as np

from headgeom.jobs.common import shard_provenance, store_dir, with_keys
from headgeom.core.logs import progress_of
from headgeom.io.shards import write_shard
from headgeom.io.store import TensorStore


def heads_rows(f, model: str, layer: int, params: dict) -> tuple[dict, dict]:
    """The rows of one layer's paper1_heads and paper1_pairs shards, key columns first (what
    heads_job writes and headgeom.api returns)."""
    from headgeom.methods.paper1 import heads_layer

    heads, pairs = heads_layer(f, model, layer, params)
    return with_keys(heads, model, layer), with_keys(pairs, model, layer)


def heads_job(store_dir, layer: int, out_heads, out_pairs, params: dict, log=print) -> None:
    """Per-head suite (split, scrambles, Haar, factorial, anchors) + sibling pairs of one layer."""
    t0 = time.perf_counter()
    store = TensorStore(store_dir)
    model = store.manifest["model"]
    f = store.layer_factors(layer)
    heads, pairs = heads_rows(f, model, layer, params)
    prov = shard_provenance("paper1_heads", store, layer, params)
    write_shard(out_heads, heads, prov)
    write_shard(out_pairs, pairs, {**prov, "job": "paper1_pairs"})
    valid = heads["valid"]
    log(f"[paper1_heads {model} L{layer}] {f.n_heads} heads ({int(valid.sum())} with principal coordinates), "
        f"{len(pairs['F'])} sibling pairs, max split rel.err {np.nanmax(heads['split_relerr']) if valid.any() else float('nan'):.2e}, "
        f"max sv rel.err {np.nanmax(heads['sv_relerr']) if valid.any() else float('nan'):.2e}, {time.perf_counter() - t0:.2f}s")


def capacity_job(store_dir, final_store_dir, layer: int, out, params: dict, log=print) -> None:
    """Feasible capacity of the heads the lineage's final checkpoint selects (itself when the
    model is not in a lineage)."""
    from headgeom.methods.paper1 import capacity_layer

    t0 = time.perf_counter()
    store = TensorStore(store_dir)
    model = store.manifest["model"]
    f = store.layer_factors(layer)
    final_store = TensorStore(final_store_dir)
    final_model = final_store.manifest["model"]
    f_final = f if final_model == model else final_store.layer_factors(layer)
    say = progress_of(log)

    def progress(t, iters, climbing, starts):
        say(f"[paper1_capacity {model} L{layer}] step {t}/{iters}: {climbing} of {starts} starts still climbing, "
            f"{time.perf_counter() - t0:.0f}s")

    cols = capacity_layer(f, f_final, model, final_model, layer, params, {"progress": progress})
    prov = shard_provenance("paper1_capacity", store, layer, params)
    if final_model != model:
        prov["final_model_source"] = final_store.provenance()
        prov["final_tensors"] = final_store.layer_tensors(layer)
    write_shard(out, with_keys(cols, model, layer), prov)
    log(f"[paper1_capacity {model} L{layer}] groups from {final_model}: {int(cols['is_strong'].sum())} strong, "
        f"{int(cols['is_matched'].sum())} matched, {int(cols['is_sample'].sum())} sample; "
        f"{params['restarts']} restarts x {params['iters']} iters, {time.perf_counter() - t0:.2f}s")


# ------------------------------------------------------------------ entry points (the registry's ``run``)


def run_paper1_heads(inputs, outputs, wildcards, params, log):
    heads_job(store_dir(inputs), int(wildcards["layer"]), outputs["heads"], outputs["pairs"], params, log=log)


def run_paper1_capacity(inputs, outputs, wildcards, params, log):
    capacity_job(store_dir(inputs), store_dir(inputs, "final_manifest"), int(wildcards["layer"]), outputs["shard"],
                 params, log=log)
