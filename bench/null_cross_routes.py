"""The cross-layer null pairs' two routes (headgeom.methods.overlap) measured against the same process's
GEMM rate: stacked-basis blocks (cross_pairs, rho only), and projector Grams (projector_gram: the
slab packing and the slab products, timed apart), in float64 and float32, on random orthonormal
bases at a model's shape; with the rates, each route's seconds for one writer->reader layer pair of
one null sample at the job's budgets (methods.projectors.null_cross_route_seconds). Used by `make bench`
(bench/run.py null_cross) and bench/gpu_check.py (the rates of a device)."""

from __future__ import annotations

import time

import numpy as np

from headgeom.methods import overlap, projectors
from baselines import random_bases


def best(fn, reps: int, clock=time.perf_counter):
    out, dt = None, float("inf")
    for _ in range(reps):
        t0 = clock()
        out = fn()
        dt = min(dt, clock() - t0)
    return dt, out


def gemm_rate(dtype, reps: int, clock=time.perf_counter, n: int = 2048) -> float:
    A = np.random.default_rng(0).standard_normal((n, n)).astype(dtype)
    dt, _ = best(lambda: A @ A, reps, clock)
    return 2 * n**3 / dt


def slab_times(W, R, clock=time.perf_counter) -> tuple[float, float, np.ndarray]:
    """projector_gram's work, its packing and its products timed apart: (pack s, product s, PK)."""
    D = W.shape[1]
    width = projectors.slab_width(D)
    Wb, Rb = np.empty((W.shape[0], width), W.dtype), np.empty((R.shape[0], width), R.dtype)
    PK = np.zeros((W.shape[0], R.shape[0]))
    t_pack = t_prod = 0.0
    for slab in projectors.projector_slabs(D):
        m = slab.size
        t0 = clock()
        projectors.pack_sides([W], [R], slab, Wb[:, :m], Rb[:, :m])
        t1 = clock()
        PK += Wb[:, :m] @ Rb[:, :m].T
        t_prod += clock() - t1
        t_pack += t1 - t0
    return t_pack, t_prod, PK


def gather_packing_seconds(B, clock=time.perf_counter) -> float:
    """Seconds per head of the packing this replaces (a D x D GEMM per head, then a gather of its
    upper triangle by flat indices)."""
    D = B.shape[1]
    i, j = np.triu_indices(D, 1)
    flat = i * D + j
    out = np.empty(D * (D - 1) // 2)
    t0 = clock()
    for h in range(B.shape[0]):
        P = B[h] @ B[h].T
        np.take(P.reshape(-1), flat, out=out, mode="clip")
    return (clock() - t0) / B.shape[0]


def gram_share(D: int, hw: int, hr: int, dtype, reps: int, g: float, clock=time.perf_counter) -> float:
    """The slab products' FLOP rate over the GEMM rate with the operands of a job's call (hw writer
    and hr reader heads: the product of 32 x 32 heads is thin and memory-bound, the job's is not)."""
    width = projectors.slab_width(D)
    rng = np.random.default_rng(3)
    Wb, Rb = rng.standard_normal((hw, width)).astype(dtype), rng.standard_normal((hr, width)).astype(dtype)
    dt, _ = best(lambda: Wb @ Rb.T, reps, clock)
    return 2 * hw * hr * width / dt / g


def measure(shape: dict, heads: int = 32, reps: int = 2, clock=time.perf_counter, max_heads: int = 640) -> dict:
    """Rates of both routes at ``shape`` (d_model, d_head, n_heads, n_kv) with ``heads`` writer and
    reader heads (the slab products also with the heads of the job's calls), as fractions of this
    process's GEMM rate of the same dtype, the float32 error, and the seconds of one layer pair
    (n_heads writers; n_heads + 2 n_kv readers) at those rates. The slab product is timed at a
    pk_null_cross part's call (its whole tile a side, methods.projectors.tile_side), at most
    ``max_heads`` a side (past a few hundred heads a side the GEMM's rate no longer grows)."""
    D, d, H, G, L = shape["d_model"], shape["d_head"], shape["n_heads"], shape["n_kv"], shape["n_layers"]
    Lp = projectors.packed_length(D)
    W64, R64 = random_bases(heads, D, d, 1), random_bases(heads, D, d, 2)
    rw = rr = np.full(heads, d)
    out = {"shape": shape, "heads": heads, "packed_length": Lp, "slabs": len(projectors.projector_slabs(D))}
    ref = None
    for dtype in (np.float64, np.float32):
        name = np.dtype(dtype).name
        W, R = W64.astype(dtype), R64.astype(dtype)
        g = gemm_rate(dtype, reps, clock)
        t_blocks, res = best(lambda: overlap.cross_pairs(W, rw, R, rr, angles=False), reps, clock)
        runs = [slab_times(W, R, clock) for _ in range(reps)]
        t_pack, t_prod = min(r[0] for r in runs), min(r[1] for r in runs)
        rho = runs[0][2] / d
        row = {"gemm_gflops": g / 1e9,
               "blocks_share": 2 * D * d * d * heads**2 / t_blocks / g,
               "pack_share": 2 * d * Lp * 2 * heads / t_pack / g,
               "gram_share_small": 2 * Lp * heads**2 / t_prod / g,
               "seconds": {"blocks": t_blocks, "pack": t_pack, "gram": t_prod}}
        itemsize = np.dtype(dtype).itemsize
        side = projectors.tile_side(D, d, H, H + 2 * G, L, itemsize)  # a pk_null_cross part: one call of its whole tile
        hw, hr = side * H, side * (H + 2 * G)
        row["call_heads"] = [hw, hr]
        row["gram_heads"] = [min(hw, max_heads), min(hr, max_heads)]  # the product timed (memory: its two operands)
        row["gram_share"] = gram_share(D, *row["gram_heads"], dtype, reps, g, clock)
        if ref is None:
            ref = rho
            row["rho_vs_blocks_max_rel"] = float(np.max(np.abs(rho.ravel() - res["rho"]) / np.abs(res["rho"])))
        else:
            row["rho_vs_float64_max_abs"] = float(np.max(np.abs(rho - ref)))
            row["bound"] = projectors.FLOAT32_RHO_BOUND
        saved = projectors.GEMM_FLOPS, dict(projectors.ROUTE_RATES)
        try:  # the layer pair at the measured rates (float32 prices at twice the float64 GEMM rate)
            projectors.GEMM_FLOPS = g * itemsize / 8
            projectors.ROUTE_RATES.update(blocks=row["blocks_share"], pack=row["pack_share"], gram=row["gram_share"])
            row["layer_pair_s"] = projectors.null_cross_route_seconds(D, d, H, H + 2 * G, L, itemsize)
        finally:
            projectors.GEMM_FLOPS, _ = saved
            projectors.ROUTE_RATES.clear()
            projectors.ROUTE_RATES.update(saved[1])
        out[name] = row
    out["gather_packing_s_per_head"] = gather_packing_seconds(W64[:2], clock)
    out["slab_packing_s_per_head"] = out["float64"]["seconds"]["pack"] / (2 * heads)
    return out
