"""Paper 1's natural return (docs/methods.md §3.2), float64, from d_head x d_head matrices.

Head h writes y_t = O_h z_t; its diagnostic return is T y_t = O_h V_g^T y_t = O_h M z_t with
M = V_g^T O_h = W_V^g O_h. With A = O^T O and the token sums S = sum_t z_t z_t^T:
  sum <y, T y>  = tr(A M S)        sum ||y||^2 = tr(A S)        sum ||T y||^2 = tr(M^T A M S)
Endpoint *(choice)* ``pooled`` (default): A_h = tr(A M S)^2 / (tr(A S) tr(M^T A M S)), the
squared directional alignment pooled over tokens. Switch ``median_cos2``: the median over tokens
of cos^2(y_t, T y_t). RMS return magnitude g_y = sqrt(tr(M^T A M S) / tr(A S)).
Wrong-V: the same y and O with V of the cyclically next KV group (closure.wrong_v_groups).
"""

from __future__ import annotations

import numpy as np

from .closure import wrong_v_groups

ENDPOINTS = ("pooled", "median_cos2")


def head_return(O: np.ndarray, V: np.ndarray, Z: np.ndarray, endpoint: str = "pooled") -> tuple[float, float]:
    """(alignment, g_y) for one head: O (d_model, d), V (d_model, d) = W_V^T, Z (N, d)."""
    O = np.asarray(O, np.float64)
    V = np.asarray(V, np.float64)
    Z = np.asarray(Z, np.float64)
    A = O.T @ O
    M = V.T @ O
    if endpoint == "pooled":
        S = Z.T @ Z
        yty = np.trace(A @ M @ S)
        yy = np.trace(A @ S)
        tt = np.trace(M.T @ A @ M @ S)
        align = yty**2 / (yy * tt) if yy > 0 and tt > 0 else np.nan
    elif endpoint == "median_cos2":
        MZ = Z @ M.T  # (N, d): M z_t
        yty_t = np.einsum("ti,ij,tj->t", Z, A, MZ)
        yy_t = np.einsum("ti,ij,tj->t", Z, A, Z)
        tt_t = np.einsum("ti,ij,tj->t", MZ, A, MZ)
        ok = (yy_t > 0) & (tt_t > 0)
        align = float(np.median(yty_t[ok] ** 2 / (yy_t[ok] * tt_t[ok]))) if ok.any() else np.nan
        yy, tt = yy_t.sum(), tt_t.sum()
    else:
        raise ValueError(f"natural return endpoint must be one of {ENDPOINTS}, not {endpoint!r}")
    g = float(np.sqrt(tt / yy)) if yy > 0 else np.nan
    return float(align), g


def layer_return(f, z: np.ndarray, endpoint: str = "pooled") -> dict[str, np.ndarray]:
    """Per head of one layer: alignment, g_y, and the cyclic wrong-V alignment / g_y.
    f: LayerFactors (store), z: (N, H, d_head) captured value mixes."""
    H = f.n_heads
    if z.shape[1] != H or z.shape[2] != f.d_head:
        raise ValueError(f"activations have {z.shape[1:]} heads x d_head, factors {H} x {f.d_head}")
    wrong = wrong_v_groups(f.kv_group, f.n_kv)
    cols = {k: np.full(H, np.nan) for k in ("align", "g_y", "align_wrong_v", "g_y_wrong_v")}
    cols["wrong_v_defined"] = np.zeros(H, bool)
    for h in range(H):
        O = f.W_O[h]
        Z = z[:, h, :]
        cols["align"][h], cols["g_y"][h] = head_return(O, f.W_V[f.kv_group[h]].T, Z, endpoint)
        if wrong is not None:
            cols["align_wrong_v"][h], cols["g_y_wrong_v"][h] = head_return(O, f.W_V[wrong[h]].T, Z, endpoint)
            cols["wrong_v_defined"][h] = True
    cols["head"] = np.arange(H)
    return cols


def population(P: np.ndarray, layer: np.ndarray, high_q: float = 0.9, low_q: float = 0.5):
    """Paper 1's paired population *(choice)*: high = the model's top decile of closure P
    (P >= quantile high_q over finite heads); low pool = P <= quantile low_q. A layer is
    eligible when it has both; in it the high heads (descending P) are paired with as many low
    heads (ascending P). Returns (high_idx, low_idx, eligible_layers) as index arrays."""
    P = np.asarray(P, float)
    ok = np.isfinite(P)
    if not ok.any():
        return np.array([], int), np.array([], int), np.array([], int)
    hi_t = np.quantile(P[ok], high_q)
    lo_t = np.quantile(P[ok], low_q)
    hi_idx, lo_idx, elig = [], [], []
    for l in np.unique(layer[ok]):
        hs = np.where(ok & (layer == l) & (P >= hi_t))[0]
        ls = np.where(ok & (layer == l) & (P <= lo_t))[0]
        if len(hs) == 0 or len(ls) == 0:
            continue
        hs = hs[np.argsort(-P[hs], kind="stable")]
        ls = ls[np.argsort(P[ls], kind="stable")]
        n = min(len(hs), len(ls))
        hi_idx.extend(hs[:n])
        lo_idx.extend(ls[:n])
        elig.append(int(l))
    return np.array(hi_idx, int), np.array(lo_idx, int), np.array(elig, int)
