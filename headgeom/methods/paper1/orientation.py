"""Orientation over the per-head shard columns: trained closure against its signed-permutation
scrambles and Haar draws (paired comparisons, per head and per layer), the layer endpoints of the
factorial D x K, and the tolerance of the O/V rank audit."""

from __future__ import annotations

import numpy as np

from headgeom.core.groupby import row_groups
from headgeom.core.stats import finite_mean, finite_median
from headgeom.methods.paper1.common import layer_rows


def scramble_comparison(P, R, RH, strong) -> dict:
    """Trained closure P against the median of the head's scrambles R and of its Haar draws RH:
    heads compared (n), heads with P > R (beat) and the median P − R, over all heads, over the
    non-strong ones (_ex) and against Haar (_h)."""
    ok = np.isfinite(P) & np.isfinite(R)
    okh = np.isfinite(P) & np.isfinite(RH)
    ex = ok & ~strong
    return {
        "n": int(ok.sum()),
        "beat": int(np.sum(ok & (P > R))),
        "diff": finite_median((P - R)[ok]),
        "n_ex": int(ex.sum()), "beat_ex": int(np.sum(ex & (P > R))), "diff_ex": finite_median((P - R)[ex]),
        "n_h": int(okh.sum()), "beat_h": int(np.sum(okh & (P > RH))), "diff_h": finite_median((P - RH)[okh]),
    }


def layers_favoring_trained(model, layer, P, R, RH, strong) -> tuple[int, int, int]:
    """(layers with a compared head, of which those whose median P − R > 0, those whose median
    P − R_Haar > 0), each (model, layer) its own layer."""
    n_layers, positive, positive_haar = 0, 0, 0
    for rows in row_groups({"model": model, "layer": layer}, ("model", "layer")).values():
        st = scramble_comparison(P[rows], R[rows], RH[rows], strong[rows])
        if st["n"]:
            n_layers += 1
            positive += int(st["diff"] > 0)
            positive_haar += int(st["diff_h"] > 0)
    return n_layers, positive, positive_haar


def factorial_endpoints(I, I_ctrl, layer) -> tuple[np.ndarray, np.ndarray]:
    """The factorial endpoint per layer (layers ascending): the layer mean of the head
    interactions I_h, and the same of the wrong-V control."""
    groups = layer_rows(layer)
    return (np.array([finite_mean(I[rows]) for _, rows in groups], dtype=float),
            np.array([finite_mean(I_ctrl[rows]) for _, rows in groups], dtype=float))


def rank_tolerance(kind: str, d_model: int, d_head: int, rank_rtol: float) -> float:
    """Relative tolerance on s/s_max: rank_rtol, or the paper's max(m, n) * eps_float64."""
    if kind == "eps":
        return max(d_model, d_head) * float(np.finfo(np.float64).eps)
    if kind == "rank_rtol":
        return float(rank_rtol)
    raise ValueError(f"rank tolerance must be 'rank_rtol' or 'eps', not {kind!r}")
