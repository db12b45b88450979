"""Factorial D x K: head interaction I_h over exhaustive donor reassignment within a layer."""

from __future__ import annotations

import numpy as np

from headgeom.methods import closure as C


# ================================================================ factorial D x K


def interaction(S: np.ndarray) -> np.ndarray:
    """Head interaction from S[i, j] = P_{D_j}(K_i) over n >= 2 donors:
    I_h = S[h,h] - mean_{j!=h} S[h,j] - mean_{i!=h} S[i,h] + mean_{i!=h, j!=h} S[i,j]."""
    S = np.asarray(S, dtype=np.float64)
    n = S.shape[0]
    if n < 2:
        return np.full(n, np.nan)
    diag = np.diag(S)
    row, col, tot = S.sum(1), S.sum(0), S.sum()
    row_off = (row - diag) / (n - 1)
    col_off = (col - diag) / (n - 1)
    rest = (tot - row - col + diag) / (n - 1) ** 2
    return diag - row_off - col_off + rest


def contrasts(S: np.ndarray) -> dict[str, np.ndarray]:
    """Every per-head contrast of S[i, j] = P_{D_j}(K_i) (config ``choices.factorial_contrast``):
    interaction (the double-centred I_h above, the default); row = S[h,h] - mean_{j!=h} S[h,j]
    (own K, the D of other donors); column = S[h,h] - mean_{i!=h} S[i,h] (own D, the K of other
    donors)."""
    S = np.asarray(S, dtype=np.float64)
    n = S.shape[0]
    if n < 2:
        return {k: np.full(n, np.nan) for k in CONTRASTS}
    diag = np.diag(S)
    return {"interaction": interaction(S), "row": diag - (S.sum(1) - diag) / (n - 1),
            "column": diag - (S.sum(0) - diag) / (n - 1)}


CONTRASTS = ("interaction", "row", "column")


def factorial_S(Ks: np.ndarray, Ds: np.ndarray) -> np.ndarray:
    """S[i, j] = P_{D_j}(K_i) for donors (n, d, d), (n, d)."""
    n = Ks.shape[0]
    S = np.empty((n, n))
    for i in range(n):
        S[i] = C.P_of(np.broadcast_to(Ks[i], (n,) + Ks.shape[1:]), Ds)
    return S


def donor_sets(kv_group: np.ndarray) -> list[np.ndarray]:
    """Donors share the query slot (position within the KV group) and move by whole KV groups
    (MHA: every head is one donor set). MQA (one group): each set has one head (undefined)."""
    kv_group = np.asarray(kv_group)
    slot = np.zeros(len(kv_group), dtype=int)
    for g in np.unique(kv_group):
        idx = np.flatnonzero(kv_group == g)
        slot[idx] = np.arange(idx.size)
    return [np.flatnonzero(slot == s) for s in np.unique(slot)]


def factorial_layer(Ks, Ds, valid, kv_group, all_contrasts: bool = False):
    """Per-head interaction I_h over each head's donor set (valid heads only; NaN otherwise).
    ``all_contrasts``: a dict contrast name -> per-head array instead (one S per donor set)."""
    H = len(valid)
    out = {k: np.full(H, np.nan) for k in CONTRASTS}
    for dset in donor_sets(kv_group):
        idx = dset[valid[dset]]
        if idx.size >= 2:
            for k, v in contrasts(factorial_S(Ks[idx], Ds[idx])).items():
                out[k][idx] = v
    return out if all_contrasts else out["interaction"]
