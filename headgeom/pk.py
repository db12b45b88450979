"""§2 Reading and writing spaces and projection-kernel (PK) overlap (the PK paper).

Writing space U^h = Im W_O^h. Reading space R_X^h = Im(P_c diag(gamma) W_X^{hT}), X in
{Q,K,V}; P_c = I - 11^T/D for LayerNorm, I for RMSNorm; nothing folded for post-norm models.
PK(U,V) = ||U^T V||_F^2 over orthonormal bases; rho = PK/min(dim U, dim V);
theta_1 = arccos(sigma_max(U^T V)) (sine form below ~1 degree).

All pairs of a set of heads come from one GEMM over stacked orthonormal bases."""

from __future__ import annotations

import numpy as np

KINDS = ("O", "Q", "K", "V")
SINE_FORM_BELOW_DEG = 1.0


def reading_matrix(W_X: np.ndarray, norm_gain, norm_type: str) -> np.ndarray:
    """Folded reading factors (n, D, d): P_c diag(gamma) W_X^{hT} per head."""
    R = np.swapaxes(W_X, -1, -2).copy()  # (n, D, d)
    if norm_type != "none" and norm_gain is not None:
        R *= np.asarray(norm_gain)[:, None]
    if norm_type == "layernorm":
        R -= R.mean(axis=-2, keepdims=True)  # P_c: remove the mean over d_model
    return R


def factor_stack(f, kind: str) -> np.ndarray:
    """(n, D, d) factors whose column spaces are the head spaces of one kind."""
    if kind == "O":
        return f.W_O
    W = {"Q": f.W_Q, "K": f.W_K, "V": f.W_V}[kind]
    return reading_matrix(W, f.norm_gain, f.norm_type)


def orthonormal_bases(X: np.ndarray, rank_rtol: float = 1e-6):
    """Per head: orthonormal basis of Im X (columns), numerical rank at rtol * s_max.

    Returns (bases (n, D, d) with columns beyond the rank zeroed, ranks (n,)). A head with
    non-finite weights gets rank -1 and a zero basis (its pairs become NaN + flag)."""
    finite = np.isfinite(X).all(axis=(-1, -2))
    U, s, _ = np.linalg.svd(np.where(finite[:, None, None], X, 0.0), full_matrices=False)
    keep = (s > rank_rtol * s[..., :1]) & finite[:, None]
    ranks = np.where(finite, keep.sum(-1), -1)
    return U * keep[..., None, :], ranks


def cross_blocks(Ua: np.ndarray, Ub: np.ndarray) -> np.ndarray:
    """All U_a^T U_b blocks, (na, nb, da, db), from one GEMM over the stacked bases."""
    na, D, da = Ua.shape
    nb, _, db = Ub.shape
    Sa = np.ascontiguousarray(np.swapaxes(Ua, 0, 1).reshape(D, na * da))
    Sb = np.ascontiguousarray(np.swapaxes(Ub, 0, 1).reshape(D, nb * db))
    C = Sa.T @ Sb
    return C.reshape(na, da, nb, db).transpose(0, 2, 1, 3)


def _sine_min_angle(Ui, ri, Uj, rj) -> float:
    """theta_1 in degrees from the sine form: the smallest singular value of (I - P_U) V is
    sin theta_1 when dim V <= dim U. Needs the D x r factors (not a D x D operator)."""
    U, V = (Ui[:, :ri], Uj[:, :rj]) if ri >= rj else (Uj[:, :rj], Ui[:, :ri])
    resid = V - U @ (U.T @ V)
    smin = np.linalg.svd(resid, compute_uv=False).min()
    return float(np.degrees(np.arcsin(min(1.0, smin))))


def min_angle_deg(smax: float) -> float:
    return float(np.degrees(np.arccos(np.clip(smax, -1.0, 1.0))))


def pk_within(bases: np.ndarray, ranks: np.ndarray) -> dict[str, np.ndarray]:
    """Unordered pairs i<j of one kind within a layer."""
    n = bases.shape[0]
    iu, ju = np.triu_indices(n, k=1)
    if len(iu) == 0:
        return {k: np.array([], dtype=t) for k, t in
                (("head_i", np.int64), ("head_j", np.int64), ("pk", float), ("rho", float), ("min_angle_deg", float), ("dim_i", np.int64), ("dim_j", np.int64), ("flags", object))}
    C = cross_blocks(bases, bases)[iu, ju]  # (npairs, d, d)
    pk = np.einsum("pij,pij->p", C, C)
    smax = np.linalg.svd(C, compute_uv=False)[:, 0]
    dims = np.minimum(ranks[iu], ranks[ju])
    undefined = dims <= 0  # a zero or non-finite head: NaN + flag, the run continues
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.where(undefined, np.nan, pk / dims)
    pk = np.where(undefined, np.nan, pk)
    ang = np.where(undefined, np.nan, np.degrees(np.arccos(np.clip(smax, -1.0, 1.0))))
    for p in np.flatnonzero(ang < SINE_FORM_BELOW_DEG):
        i, j = iu[p], ju[p]
        ang[p] = _sine_min_angle(bases[i], ranks[i], bases[j], ranks[j])
    flags = np.array(["undefined" if u else "" for u in undefined], dtype=object)
    return {"head_i": iu, "head_j": ju, "pk": pk, "rho": rho, "min_angle_deg": ang,
            "dim_i": ranks[iu], "dim_j": ranks[ju], "flags": flags}


def direct_sum_defect(ranks_heads: np.ndarray, W_O_layer_rank: int, H: int, d_head: int, d_model: int):
    """(sum_i rank W_O^i - rank W_O^l, max(0, H d_head - d_model))."""
    return int(np.sum(ranks_heads) - W_O_layer_rank), max(0, H * d_head - d_model)


def stacked_rank(X: np.ndarray, rank_rtol: float = 1e-6) -> int:
    """Rank of the layer matrix [X_1 ... X_n] (D x n d) from its (n d x n d) Gram's spectrum."""
    n, D, d = X.shape
    S = np.swapaxes(X, 0, 1).reshape(D, n * d)
    if not np.isfinite(S).all():
        return -1
    s = np.linalg.svd(S, compute_uv=False)
    return int(np.sum(s > rank_rtol * s[0])) if s.size and s[0] > 0 else 0


def pk_layer(f, kinds=KINDS, rank_rtol: float = 1e-6) -> tuple[dict[str, np.ndarray], dict]:
    """Within-layer PK for every kind. Returns (pair columns, per-kind layer facts)."""
    cols: dict[str, list] = {k: [] for k in ("kind", "head_i", "head_j", "pk", "rho", "min_angle_deg", "dim_i", "dim_j", "flags")}
    facts = {}
    for kind in kinds:
        X = factor_stack(f, kind)
        bases, ranks = orthonormal_bases(X, rank_rtol)
        r = pk_within(bases, ranks)
        for k, v in r.items():
            cols[k].append(np.asarray(v))
        cols["kind"].append(np.array([kind] * len(r["pk"]), dtype=object))
        layer_rank = stacked_rank(X, rank_rtol)
        defect, expected = direct_sum_defect(ranks, layer_rank, X.shape[0], X.shape[2], X.shape[1])
        facts[kind] = {"ranks": ranks.tolist(), "layer_rank": layer_rank, "direct_sum_defect": defect,
                       "expected_defect": expected, "n_heads": int(X.shape[0])}
    return {k: np.concatenate(v) if v else np.array([]) for k, v in cols.items()}, facts


def isotropic_rho(d_head: int, d_model: int) -> float:
    return d_head / d_model


def isotropic_sd(d_head: int, d_model: int) -> float:
    """SD of rho for independent random subspaces: sqrt(2 (D-d)^2 / (D^2 (D-1)(D+2)))."""
    D, d = d_model, d_head
    return float(np.sqrt(2 * (D - d) ** 2 / (D**2 * (D - 1) * (D + 2))))
