"""Entry points of paper 1's per-layer jobs (workflow scripts call these; the math is in
headgeom.paper1). Each job reads one layer of one model and writes its Parquet shard(s)
atomically with provenance (headgeom.shards.write_shard)."""

from __future__ import annotations

import json
import math
import time

import numpy as np

from headgeom.jobs.pk import _shard_provenance
from headgeom.io.shards import write_shard
from headgeom.io.store import TensorStore


def _keys(cols: dict, model: str, layer: int) -> dict:
    n = len(next(iter(cols.values()))) if cols else 0
    return {"model": np.array([model] * n, dtype=object), "layer": np.full(n, layer, dtype=np.int64), **cols}


def heads_job(store_dir, layer: int, out_heads, out_pairs, params: dict, log=print) -> None:
    """Per-head suite (split, scrambles, Haar, factorial, anchors) + sibling pairs of one layer."""
    from headgeom.methods.paper1 import heads_layer

    t0 = time.perf_counter()
    store = TensorStore(store_dir)
    model = store.manifest["model"]
    f = store.layer_factors(layer)
    heads, pairs = heads_layer(f, model, layer, params)
    prov = _shard_provenance("paper1_heads", store, layer, params)
    write_shard(out_heads, _keys(heads, model, layer), prov)
    write_shard(out_pairs, _keys(pairs, model, layer), {**prov, "job": "paper1_pairs"})
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
    cols = capacity_layer(f, f_final, model, final_model, layer, params)
    prov = _shard_provenance("paper1_capacity", store, layer, params)
    if final_model != model:
        prov["final_model_source"] = final_store.provenance()
        prov["final_tensors"] = final_store.layer_tensors(layer)
    write_shard(out, _keys(cols, model, layer), prov)
    log(f"[paper1_capacity {model} L{layer}] groups from {final_model}: {int(cols['is_strong'].sum())} strong, "
        f"{int(cols['is_matched'].sum())} matched, {int(cols['is_sample'].sum())} sample; "
        f"{params['restarts']} restarts x {params['iters']} iters, {time.perf_counter() - t0:.2f}s")


# ---------------------------------------------------------------- resources (SLURM)
#
# Measured with `python bench/paper1_costs.py` (one BLAS thread, synthetic tensors, 8 planted
# closed heads); F = float64 bytes of one layer's Q, K, V, O factors:
#   d_model 2048, d_head  64, 32 heads, 8 KV (F =   80 MiB): heads  1.8 s,  381 MiB; capacity 0.16 s/head
#   d_model 4096, d_head 128, 64 heads, 4 KV (F =  544 MiB): heads  9.7 s, 1414 MiB; capacity 0.48 s/head  (Qwen3-235B)
#   d_model 8192, d_head 128, 64 heads, 8 KV (F = 1152 MiB): heads 27.9 s, 2838 MiB; capacity 0.81 s/head  (Qwen2.5-72B)
# (capacity per head at 2 restarts x 30 iterations, fixed load/closure cost included); with
# config/paper.yaml (8 restarts x 300) at Qwen3-235B shape: 5.5 s/head, 99 s for 18 heads, 1414 MiB.
# Peak RSS ~ 150 MiB + 2.3 F; the model below adds margin. Capacity runtime: 8 ms per head x restart
# x iteration at d_head 128 (the unbatched rate; batched restarts run ~2.3 ms), bounded with every
# head of the layer selected (the strong/matched/sample count is only known inside the job).


def layer_factor_mib(fields: dict) -> float:
    D, d, H, G = fields["d_model"], fields["d_head"], fields["n_heads"], fields["n_kv_heads"]
    return 8 * D * (2 * H * d + 2 * G * d) / 2**20


def job_resources(kind: str, manifest, restarts: int = 1, iters: int = 0) -> dict:
    """mem_mb and runtime (minutes) of one paper1_heads / paper1_capacity job of this model."""
    fields = json.loads(open(manifest).read())["fields"]
    f = layer_factor_mib(fields)
    mem_mb = int(300 + 2.5 * f)
    runtime = 5 + math.ceil(0.05 * f / 60)
    if kind == "capacity":
        per_iter_s = 0.008 * (fields["d_head"] / 128) ** 2.5
        runtime += math.ceil(fields["n_heads"] * restarts * iters * per_iter_s / 60)
    return {"mem_mb": mem_mb, "runtime": runtime}
