"""§1 Closure of the OV operator T = O V^T (paper 1), from d_head x d_head Grams only.

A = O^T O, B = V^T V, M = V^T O (the return core; T^2 = O M V^T):
  ||T||^2 = tr(AB),  <T^2,T> = tr(M^T A B),  ||T^2||^2 = tr(M^T A M B).
All functions broadcast over leading batch axes (heads)."""

from __future__ import annotations

import numpy as np

from headgeom.methods.grams import LayerGrams, wrong_v_groups  # noqa: F401 (wrong_v_groups: part of this module's API)
from headgeom.methods.linalg import fro2, inner, mT, tr_prod, trace

# Relative size below which T (or T^2) counts as zero: P and alpha are then undefined.
ZERO_RTOL = 1e-24


def closure_terms(A, B, M):
    """(||T||^2, <T^2,T>, ||T^2||^2)."""
    AB = A @ B
    nT2 = trace(AB)
    ip = tr_prod(mT(M), AB)
    nT4 = tr_prod(mT(M) @ A, M @ B)
    return nT2, ip, nT4


def closure_from_terms(nT2, ip, nT4):
    """Closure P, fitted alpha*, return gain g_T and the 'undefined' flag.

    P = <T^2,T>^2 / (||T^2||^2 ||T||^2); alpha* = <T^2,T>/||T||^2 (sign kept);
    g_T = ||T^2||_F/||T||_F (a reconstructed *(choice)*, docs/methods.md §1.1). NaN + flag when T or T^2 is zero."""
    nT2, ip, nT4 = (np.asarray(x, dtype=np.float64) for x in (nT2, ip, nT4))
    scale = np.where(np.isfinite(nT2), np.abs(nT2), 0.0)
    undefined = ~np.isfinite(nT2) | ~np.isfinite(nT4) | (nT2 <= 0) | (nT4 <= ZERO_RTOL * scale**2)
    with np.errstate(divide="ignore", invalid="ignore"):
        P = np.where(undefined, np.nan, ip**2 / (nT4 * nT2))
        alpha = np.where(undefined, np.nan, ip / nT2)
        g = np.where(undefined | (nT2 <= 0), np.nan, np.sqrt(nT4 / nT2))
    return P, alpha, g, undefined


# ---------------------------------------------------------------- principal coordinates


def P_of(K, D=None):
    """P_D(K) = <KDK,K>^2/(||KDK||^2 ||K||^2); D=None gives latent closure P_I(K)."""
    KK = K @ (D[..., :, None] * K) if D is not None else K @ K
    ip = inner(KK, K)
    with np.errstate(divide="ignore", invalid="ignore"):
        return ip**2 / (fro2(KK) * fro2(K))


def principal_coordinates(A, B, M):
    """From Grams: Cholesky factors stand in for the reduced-QR R factors
    (O = Q_O R_O with R_O^T R_O = A), so Q_V^T Q_O = R_V^{-T} M R_O^{-1}.

    Returns D (cosines of principal angles, descending) and the transport core
    K = W_c^T R_O R_V^T U_c, with T = Qt_O K Qt_V^T and T^2 = Qt_O (K D K) Qt_V^T.
    Requires full-rank O and V (callers flag rank-deficient heads first)."""
    R_O = mT(np.linalg.cholesky(A))  # upper: A = R_O^T R_O
    R_V = mT(np.linalg.cholesky(B))
    # C = R_V^{-T} M R_O^{-1}, via triangular solves
    X = np.linalg.solve(mT(R_V), M)  # R_V^{-T} M
    C = mT(np.linalg.solve(mT(R_O), mT(X)))  # (R_O^{-T} X^T)^T = X R_O^{-1}
    U_c, D, W_cT = np.linalg.svd(C)
    K = W_cT @ R_O @ mT(R_V) @ U_c
    return D, K


def principal_summary(D, K):
    """Total overlap G, isotropy I_D, latent closure P_I(K), beta*; also the alternative
    isotropy I_D_minmax = min_i D_i / max_i D_i (config ``choices.isotropy: min_max``)."""
    d = D.shape[-1]
    trD, trD2 = D.sum(-1), (D**2).sum(-1)
    KK = K @ K
    ipK = inner(KK, K)
    with np.errstate(divide="ignore", invalid="ignore"):
        return {
            "G_overlap": trD2 / d,
            "I_D": trD**2 / (d * trD2),
            "I_D_minmax": D.min(-1) / D.max(-1),
            "P_latent": ipK**2 / (fro2(KK) * fro2(K)),
            "beta": ipK / fro2(K),
        }


# ---------------------------------------------------------------- one layer


def closure_layer(f, identity_rtol: float = 1e-10, rank_rtol: float = 1e-6, grams=None) -> dict[str, np.ndarray]:
    """Per-head closure columns for one layer's LayerFactors (``grams``: the layer's
    headgeom.methods.grams.LayerGrams when the caller shares one, e.g. paper1_heads).

    Flags (strings, '' = ok): nonfinite, zero_T, rank_deficient, ill_conditioned.
    The principal-coordinate identity P_D(K) = P(T) is asserted for every well-conditioned
    full-rank head (AssertionError: a bug, never a property of the weights)."""
    gr = LayerGrams(f, rank_rtol) if grams is None else grams
    H = f.n_heads
    A, Bg = gr.A, gr.B  # one value Gram per KV group, shared by its heads
    B, M = Bg[f.kv_group], gr.M_own
    nT2, ip, nT4 = closure_terms(A, B, M)
    P, alpha, g_T, undefined = closure_from_terms(nT2, ip, nT4)

    wv = gr.wrong_group
    if wv is None:
        P_wrong = np.full(H, np.nan)
    else:  # O_h with the next group's V: A is unchanged, only M and B move
        P_wrong = closure_from_terms(*closure_terms(A, Bg[wv], gr.M_wrong))[0]

    d = f.d_head
    finite = np.isfinite(A).all((-1, -2)) & np.isfinite(B).all((-1, -2)) & np.isfinite(M).all((-1, -2))
    # -1: not computable (non-finite weights); the spectra are LayerGrams' cached ones
    rank_O, rank_V = np.where(finite, gr.rank_O, -1), np.where(finite, gr.rank_V[f.kv_group], -1)
    full = (rank_O == d) & (rank_V == d) & ~undefined & finite
    cond = np.full(H, np.inf)
    D = np.full((H, d), np.nan)
    P_D = np.full(H, np.nan)
    summ = {k: np.full(H, np.nan) for k in ("G_overlap", "I_D", "I_D_minmax", "P_latent", "beta")}
    if full.any():
        idx = np.flatnonzero(full)
        cond[idx] = gr.cond(idx, f.kv_group[idx])
        Dh, Kh = principal_coordinates(A[idx], B[idx], M[idx])
        D[idx], P_D[idx] = Dh, P_of(Kh, Dh)
        for k, v in principal_summary(Dh, Kh).items():
            summ[k][idx] = v
    well = full & (cond < 1e6)
    relerr = np.abs(P_D - P) / np.maximum(np.abs(P), np.finfo(float).tiny)
    # asserted on the scale of sqrt(P): P is the square of a cosine c = <T^2,T>/(|T^2||T|), whose
    # rounding error is absolute (|dP| = 2|c||dc|), so near P = 0 (T^2 nearly orthogonal to T, as
    # in random heads of small d_head) the error relative to P itself grows like 1/sqrt(P)
    err = np.abs(P_D - P) / np.maximum(np.sqrt(np.abs(P)), np.finfo(float).tiny)
    bad = well & ~(err < identity_rtol)
    if bad.any():
        h = int(np.flatnonzero(bad)[0])
        raise AssertionError(
            f"principal-coordinate identity P_D(K)=P(T) failed for head {h}: |P_D - P| / sqrt(P) "
            f"= {err[h]:.3e} > {identity_rtol:g} (P = {P[h]:.6g})"
        )
    flags = []
    for h in range(H):
        fl = []
        if not finite[h]:
            fl.append("nonfinite")
        elif undefined[h]:
            fl.append("zero_T")
        if finite[h] and not full[h] and not undefined[h]:
            fl.append("rank_deficient")
        if full[h] and not well[h]:
            fl.append("ill_conditioned")
        if wv is None:
            fl.append("wrong_v_undefined_G1")
        flags.append(",".join(fl))
    return {
        "head": np.arange(H),
        "kv_group": f.kv_group.copy(),
        "P": P,
        "alpha": alpha,
        "g_T": g_T,
        "norm_T": np.sqrt(np.clip(nT2, 0, None)),
        "P_wrong_v": P_wrong,
        "wrong_v_group": (wv if wv is not None else np.full(H, -1)),
        "rank_O": rank_O,
        "rank_V": rank_V,
        "G_overlap": summ["G_overlap"],
        "I_D": summ["I_D"],
        "I_D_minmax": summ["I_D_minmax"],
        "P_latent": summ["P_latent"],
        "beta": summ["beta"],
        "identity_relerr": np.where(full, relerr, np.nan),
        "flags": np.array(flags, dtype=object),
    }


# ---------------------------------------------------------------- shared-value siblings


def product_law_general(A_a, B_a, B_b, C_ab, N, alpha):
    """For T_a = O_a V_a^T and T_b = O_b V_b^T with N = V_a^T O_b, C_ab = V_a^T V_b:
      ||T_a T_b||^2 = tr(N^T A_a N B_b),  <T_a T_b, T_a> = tr(N^T A_a C_ab),  ||T_a||^2 = tr(A_a B_a).
    Returns F = 1 - ||T_aT_b - alpha T_a||^2/||T_aT_b||^2, beta = <T_aT_b,T_a>/||T_a||^2, rho = beta/alpha."""
    nP2 = trace(mT(N) @ A_a @ N @ B_b)
    ip = trace(mT(N) @ A_a @ C_ab)
    nTa2 = trace(A_a @ B_a)
    with np.errstate(divide="ignore", invalid="ignore"):
        resid = nP2 - 2 * alpha * ip + alpha**2 * nTa2
        beta = ip / nTa2
        return 1.0 - resid / nP2, beta, beta / alpha

