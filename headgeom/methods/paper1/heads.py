"""One layer of paper 1's per-head suite: closure + split + scrambles + factorial + anchors, and
the sibling pairs."""

from __future__ import annotations

import numpy as np

from headgeom.methods import closure as C
from headgeom.methods.paper1.anchors import anchor_scores, oblique_share, retrieval_rank
from headgeom.methods.grams import LayerGrams
from headgeom.methods.linalg import trace
from headgeom.methods.paper1.common import coords, valid_heads
from headgeom.methods.paper1.factorial import factorial_layer
from headgeom.methods.paper1.scramble import scramble_draws
from headgeom.methods.paper1.siblings import pair_rows
from headgeom.methods.paper1.split import perturbation_split, split_relerr


def sv_ratio(X: np.ndarray) -> np.ndarray:
    """s_min / s_max of each factor in a stack (n, d_model, d_head), from its singular values
    (SVD of the factor itself, float64, so ratios down to ~eps are resolved; a Gram's
    eigenvalues would stop near sqrt(eps)). NaN for a non-finite or zero factor (the rank audit)."""
    X = np.asarray(X, dtype=np.float64)
    out = np.full(X.shape[0], np.nan)
    fin = np.isfinite(X).all(axis=(-1, -2))
    if fin.any():
        s = np.linalg.svd(X[fin], compute_uv=False)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[fin] = np.where(s[:, 0] > 0, s[:, -1] / s[:, 0], np.nan)
    return out


def heads_layer(f, model: str, layer: int, params: dict, log=None):
    """Per-head columns (closure + split + scrambles + factorial + anchors) and sibling pairs."""
    identity_rtol = params.get("identity_rtol", 1e-10)
    rank_rtol = params.get("rank_rtol", 1e-6)
    n_perm = int(params.get("scramble_draws", 8))
    n_haar = int(params.get("haar_draws", 2))
    split_rtol = float(params.get("split_rtol", 1e-8))
    sv_rtol = float(params.get("sv_rtol", 1e-12))

    geo = LayerGrams(f, rank_rtol)
    geo.M_full  # noqa: B018 -- the suite needs every (head, group) block: computed first, the closure reads its blocks from it
    base = C.closure_layer(f, identity_rtol=identity_rtol, rank_rtol=rank_rtol, grams=geo)
    H, d = geo.H, geo.d
    kv = geo.kv_group
    valid = valid_heads(base, geo)
    idx = np.flatnonzero(valid)
    nan = lambda: np.full(H, np.nan)  # noqa: E731

    Ds, Ks = np.full((H, d), np.nan), np.full((H, d, d), np.nan)
    if idx.size:
        Ds[idx], Ks[idx] = coords(geo, idx, kv[idx])
    P_D = nan()
    if idx.size:
        P_D[idx] = C.P_of(Ks[idx], Ds[idx])

    # perturbation split, identity asserted
    sp = {k: nan() for k in ("c", "s", "a", "b", "w2")}
    sp_err = nan()
    if idx.size:
        split = perturbation_split(Ks[idx], Ds[idx])
        for k in sp:
            sp[k][idx] = split[k]
        sp_err[idx] = split_relerr(split, P_D[idx])
        bad = np.isfinite(P_D[idx]) & ~(sp_err[idx] <= split_rtol)
        if bad.any():
            h = int(idx[np.flatnonzero(bad)[0]])
            raise AssertionError(f"perturbation-split identity failed for head {h}: rel. err {sp_err[h]:.3e} > {split_rtol:g}")

    # orientation scrambles and the Haar audit, singular values asserted
    P_scr = np.empty(H, dtype=object)
    P_haar = np.empty(H, dtype=object)
    R_scr, R_haar, svr = nan(), nan(), nan()
    for h in range(H):
        if not valid[h]:
            P_scr[h], P_haar[h] = [float("nan")] * n_perm, [float("nan")] * n_haar
            continue
        pp, ph, err = scramble_draws(Ks[h], Ds[h], model, layer, h, n_perm, n_haar)
        if not err < sv_rtol:
            raise AssertionError(f"scramble changed the singular values of K for head {h}: rel. err {err:.3e} >= {sv_rtol:g}")
        P_scr[h], P_haar[h] = pp.tolist(), ph.tolist()
        R_scr[h] = np.median(pp) if pp.size else np.nan
        R_haar[h] = np.median(ph) if ph.size else np.nan
        svr[h] = err

    # factorial D x K, real and after the wrong-V pairing
    # (all contrasts from one S: config choices.factorial_contrast picks one at the tables)
    I_all = factorial_layer(Ks, Ds, valid, kv, all_contrasts=True)
    I_real = I_all["interaction"]
    wv = geo.wrong_group
    I_ctrl = nan()
    I_ctrl_all = {k: nan() for k in I_all}
    if wv is not None:
        valid_w = valid & (geo.rank_V[wv] == d)
        iw = np.flatnonzero(valid_w)
        Dw, Kw = np.full((H, d), np.nan), np.full((H, d, d), np.nan)
        if iw.size:
            Dw[iw], Kw[iw] = coords(geo, iw, wv[iw])
        I_ctrl_all = factorial_layer(Kw, Dw, valid_w, kv, all_contrasts=True)
        I_ctrl = I_ctrl_all["interaction"]

    # value anchors and same-layer retrieval
    nT2 = trace(geo.A @ geo.B[kv])
    anchor, anchor_w, oblique = nan(), nan(), nan()
    rank = np.full(H, -1)
    if idx.size:
        oblique[idx] = oblique_share(geo.A[idx], geo.B[kv[idx]], geo.M_own[idx])
    cache = {}
    for h in idx:
        sc = anchor_scores(geo, h, nT2[h], cache)
        anchor[h] = sc[kv[h]]
        if wv is not None:
            anchor_w[h] = sc[wv[h]]
        rank[h] = retrieval_rank(sc, kv[h])

    pairs = pair_rows(geo, base["P"], base["alpha"], valid)
    ratio_O, ratio_V = sv_ratio(geo.O), sv_ratio(geo.Vg)[kv]

    cols = dict(base)
    cols.update({
        "valid": valid,
        "P_D": P_D,
        "split_c": sp["c"], "split_s": sp["s"], "split_a": sp["a"], "split_b": sp["b"], "split_w2": sp["w2"],
        "split_relerr": sp_err,
        "P_scramble": P_scr, "R_scramble": R_scr, "P_haar": P_haar, "R_haar": R_haar, "sv_relerr": svr,
        "I_factorial": I_real, "I_factorial_ctrl": I_ctrl,
        **{f"I_factorial_{k}": I_all[k] for k in ("row", "column")},
        **{f"I_factorial_ctrl_{k}": I_ctrl_all[k] for k in ("row", "column")},
        "anchor_cos2": anchor, "anchor_cos2_wrong_v": anchor_w, "oblique_share": oblique,
        "retrieval_rank": rank, "n_value_candidates": np.full(H, int(np.sum(geo.rank_V == d))),
        "sv_ratio_O": ratio_O, "sv_ratio_V": ratio_V,
    })
    return cols, pairs
