"""Shared-value algebra: sibling pairs' product law (F, beta, rho) and the gamma_ij bound; over
the pair shard columns (``paper1_pairs``), the layers favoring the law and the left-zero band."""

from __future__ import annotations

import numpy as np

from headgeom.core.errors import ConfigError
from headgeom.core.stats import finite_median
from headgeom.methods import closure as C
from headgeom.methods.grams import LayerGrams
from headgeom.methods.linalg import mT
from headgeom.methods.paper1.common import layer_rows


# ================================================================ shared-value algebra


def gamma_bound(A_i, A_j):
    """gamma_ij = lambda_max(A_j^{-1/2} A_i A_j^{-1/2}) (generalized eigenvalue, via Cholesky
    A_j = L L^T: the largest eigenvalue of L^{-1} A_i L^{-T}). Broadcasts: a stack of A_i
    against one A_j factors A_j once."""
    Linv = np.linalg.inv(np.linalg.cholesky(A_j))
    W = Linv @ A_i @ mT(Linv)
    return np.linalg.eigvalsh((W + mT(W)) / 2)[..., -1]


product_law_general = C.product_law_general  # shared-V and cross-group sibling products


def _fro_rows(X, Y):
    """<X_a, Y_b>_F for stacks X (n, d, d), Y (m, d, d) -> (n, m)."""
    return X.reshape(X.shape[0], -1) @ Y.reshape(Y.shape[0], -1).T


def pair_rows(geo: LayerGrams, P, alpha, valid, bound_rtol: float = 1e-9):
    """Ordered sibling pairs (i != j, one KV group): fixed-gain explanation F_ij, free gain
    beta_ij, gain ratio rho_ij (alpha_j fitted on j alone), the next-group control i' (same query
    slot in KV group g+1; NaN when G = 1), gamma_ij and the bound
    ||T_iT_j - a T_i||^2 <= gamma_ij ||T_j^2 - a T_j||^2 checked at a in {alpha_j, beta_ij, 0}
    (asserted), and the operator squared cosine <T_i,T_j>^2/(||T_i||^2 ||T_j||^2).

    With shared V (B = V^T V, M_j = V^T O_j) every trace is a Frobenius product with A_i:
      ||T_iT_j||^2 = <A_i, M_j B M_j^T>,  <T_iT_j, T_i> = <A_i, B M_j^T>,  ||T_i||^2 = <A_i, B>,
      ||T_iT_j - a T_i||^2 = ||T_iT_j||^2 - 2a <T_iT_j, T_i> + a^2 ||T_i||^2;
    the control (T_i' = O_i' V'^T, N = V'^T O_j, C = V'^T V) likewise:
      ||T_i'T_j||^2 = <A_i', N B N^T>,  <T_i'T_j, T_i'> = <A_i', N C^T>,  ||T_i'||^2 = <A_i', B'>."""
    G, kv, d = geo.G, geo.kv_group, geo.d
    keys = ("kv_group", "head_i", "head_j", "P_i", "P_j", "alpha_j", "F", "beta", "rho", "ctrl_head",
            "F_ctrl", "beta_ctrl", "rho_ctrl", "gamma", "bound_lhs", "bound_rhs", "cos2")
    ints = ("kv_group", "head_i", "head_j", "ctrl_head")
    cols = {k: [] for k in keys}
    groups = [np.flatnonzero(kv == g) for g in range(G)]
    P, alpha = np.asarray(P, float), np.asarray(alpha, float)
    for g, mem in enumerate(groups):
        n = mem.size
        if n < 2:
            continue
        B = geo.B[g]
        A = geo.A[mem]
        M = geo.M_full[mem, g]  # M_j = V^T O_j
        ok = valid[mem]
        S = M @ B @ mT(M)  # M_j B M_j^T
        Zt = B @ mT(M)  # B M_j^T
        t1 = _fro_rows(A, S)  # [i, j] = ||T_iT_j||^2
        t3 = _fro_rows(A, Zt)  # [i, j] = <T_iT_j, T_i>
        t4 = _fro_rows(A, B[None])[:, 0]  # ||T_i||^2
        # <T_i, T_j> = <O_i B, O_j>_F
        Og = geo.O[mem].reshape(n, -1)
        Gij = (geo.O[mem] @ B).reshape(n, -1) @ Og.T
        # gamma_ij = lambda_max(A_j^{-1/2} A_i A_j^{-1/2})
        gam = np.full((n, n), np.nan)
        if ok.sum() >= 2:
            for b in np.flatnonzero(ok):
                gam[ok, b] = gamma_bound(A[ok], A[b])
        # control: same slot in the next KV group
        ctrl = None
        if G > 1:
            gc = (g + 1) % G
            nxt = groups[gc]
            N = geo.M_full[mem, gc]  # V'^T O_j
            Sc = N @ B @ mT(N)
            Zc = N @ mT(geo.C[gc, g])
            ctrl = (gc, nxt, Sc, Zc)
        for si in range(n):
            for sj in range(n):
                if si == sj:
                    continue
                i, j = int(mem[si]), int(mem[sj])
                aj = alpha[j]
                row = dict.fromkeys(keys, np.nan)
                row.update(kv_group=g, head_i=i, head_j=j, P_i=P[i], P_j=P[j], alpha_j=aj, ctrl_head=-1)
                if ok[si] and ok[sj]:
                    row["F"] = 1 - (t1[si, sj] - 2 * aj * t3[si, sj] + aj**2 * t4[si]) / t1[si, sj]
                    row["beta"] = t3[si, sj] / t4[si]
                    row["rho"] = row["beta"] / aj
                    row["cos2"] = Gij[si, sj] ** 2 / (Gij[si, si] * Gij[sj, sj])
                    gm = gam[si, sj]
                    row["gamma"] = gm
                    for k, a in enumerate((aj, row["beta"], 0.0)):
                        lhs = t1[si, sj] - 2 * a * t3[si, sj] + a**2 * t4[si]
                        rhs = t1[sj, sj] - 2 * a * t3[sj, sj] + a**2 * t4[sj]
                        scale = (abs(t1[si, sj]) + 2 * abs(a * t3[si, sj]) + a**2 * t4[si]
                                 + gm * (abs(t1[sj, sj]) + 2 * abs(a * t3[sj, sj]) + a**2 * t4[sj]))
                        if not lhs <= gm * rhs + bound_rtol * scale:
                            raise AssertionError(
                                f"gamma bound violated for heads i={i}, j={j}, a={a:.4g}: {lhs:.6e} > {gm:.6e} * {rhs:.6e}")
                        if k == 0:
                            row["bound_lhs"], row["bound_rhs"] = lhs, rhs
                    if ctrl is not None and si < ctrl[1].size:
                        gc, nxt, Sc, Zc = ctrl
                        ic = int(nxt[si])
                        row["ctrl_head"] = ic
                        if np.isfinite(geo.A[ic]).all() and geo.rank_O[ic] == d:
                            Ac = geo.A[ic]
                            c1, c3, c4 = np.sum(Ac * Sc[sj]), np.sum(Ac * Zc[sj]), np.sum(Ac * geo.B[gc])
                            row["F_ctrl"] = 1 - (c1 - 2 * aj * c3 + aj**2 * c4) / c1
                            row["beta_ctrl"] = c3 / c4
                            row["rho_ctrl"] = row["beta_ctrl"] / aj
                elif ctrl is not None and si < ctrl[1].size:
                    row["ctrl_head"] = int(ctrl[1][si])
                for k, v in row.items():
                    cols[k].append(v)
    return {k: np.asarray(v, dtype=np.int64 if k in ints else np.float64) for k, v in cols.items()}


# ================================================================ over the pair shards


def layers_favoring_law(layer, right, F, F_ctrl) -> tuple[int, int]:
    """(layers of the right heads' compositions with a defined control, of which those whose
    median F_ij exceeds the control's median)."""
    informative, favoring = 0, 0
    for _, rows in layer_rows(layer[right]):
        f, fc = F[right][rows], F_ctrl[right][rows]
        if np.isfinite(fc).any():
            informative += 1
            favoring += int(finite_median(f) > finite_median(fc))
    return informative, favoring


BAND_MEMBERSHIP = ("explanation", "strong")


def band_pairs(pairs: dict, sel, threshold: float, explanation: float, membership: str = "explanation") -> np.ndarray:
    """Left-zero band: directed rows (i, j) of the selection in the band. Both rows of a band pair
    are marked. ``membership`` (config paper1.band.membership):
      explanation  the paper's criterion: both heads strong (P ≥ t) and the unordered pair satisfies
                   P_iP_j ≈ P_i and P_jP_i ≈ P_j, i.e. F_ij ≥ explanation and F_ji ≥ explanation
                   (F_ij = 1 − ||P_iP_j − P_i||²/||P_iP_j||² with P_h = T_h/α_h, the fixed-scale
                   product explanation);
      strong       both heads strong and F defined both ways (the earlier reading; ``explanation``
                   unused)."""
    if membership not in BAND_MEMBERSHIP:
        raise ConfigError(f"config: paper1.band.membership: {membership!r} is not one of {', '.join(BAND_MEMBERSHIP)}")
    idx = np.flatnonzero(sel)
    mod = np.asarray(pairs["model"])[idx]
    lay = np.asarray(pairs["layer"]).astype(np.int64)[idx]
    hi, hj = (np.asarray(pairs[k]).astype(np.int64)[idx] for k in ("head_i", "head_j"))
    Pi, Pj, F = (np.asarray(pairs[k]).astype(float)[idx] for k in ("P_i", "P_j", "F"))
    lookup = {(a, b, c, d): f for a, b, c, d, f in zip(mod.tolist(), lay.tolist(), hi.tolist(), hj.tolist(), F.tolist())}
    rev = np.array([lookup.get((a, b, d, c), np.nan) for a, b, c, d in zip(mod.tolist(), lay.tolist(), hi.tolist(), hj.tolist())])
    strong = np.isfinite(Pi) & np.isfinite(Pj) & (Pi >= threshold) & (Pj >= threshold) & np.isfinite(F) & np.isfinite(rev)
    if membership == "strong":
        return strong
    with np.errstate(invalid="ignore"):
        return strong & (F >= explanation) & (rev >= explanation)
