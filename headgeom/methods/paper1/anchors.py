"""Value anchors: squared cosine of T_h with every value anchor of the layer, the oblique share,
and same-layer retrieval rank."""

from __future__ import annotations

import numpy as np

from headgeom.methods.grams import LayerGrams
from headgeom.methods.linalg import mT, trace


# ================================================================ anchors


def anchor_scores(geo: LayerGrams, h: int, nT2: float, cache: dict | None = None) -> np.ndarray:
    """Squared cosine of T_h (equivalently P_h = T_h/alpha_h) with every value anchor
    P_{V_g} = V_g B_g^{-1} V_g^T of the layer: <T_h, P_{V_g}> = tr(M_hg^T B_g^{-1} C[g, g(h)]),
    ||P_{V_g}||^2 = d (full-rank V_g). NaN for rank-deficient candidates. ``cache`` keeps
    B_g^{-1} C[g, g'] across the heads of a layer."""
    g0 = int(geo.kv_group[h])
    cache = {} if cache is None else cache
    out = np.full(geo.G, np.nan)
    for g in range(geo.G):
        if geo.rank_V[g] != geo.d:
            continue
        if (g, g0) not in cache:
            cache[(g, g0)] = np.linalg.solve(geo.B[g], geo.C[g, g0])
        ip = np.sum(geo.M_full[h, g] * cache[(g, g0)])  # tr(M^T X) = <M, X>_F
        out[g] = ip**2 / (geo.d * nT2)
    return out


def oblique_share(A, B, M):
    """||(I - P_V) O V^T||^2 / ||O V^T||^2 = 1 - tr(M^T B^{-1} M B) / tr(A B)."""
    return 1.0 - trace(mT(M) @ np.linalg.solve(B, M) @ B) / trace(A @ B)


def retrieval_rank(scores: np.ndarray, own: int) -> int:
    """1 + number of candidates scoring strictly higher than the trained V."""
    s = scores[np.isfinite(scores)]
    return int(1 + np.sum(s > scores[own])) if np.isfinite(scores[own]) else -1
