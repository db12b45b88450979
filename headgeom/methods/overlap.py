"""§2 Reading and writing spaces and projection-kernel (PK) overlap (the PK paper).

Writing space U^h = Im W_O^h. Reading space R_X^h = Im(P_c diag(gamma) W_X^{hT}), X in
{Q,K,V}; P_c = I - 11^T/D for LayerNorm, I for RMSNorm; nothing folded for post-norm models.
PK(U,V) = ||U^T V||_F^2 over orthonormal bases; rho = PK/min(dim U, dim V);
theta_1 = arccos(sigma_max(U^T V)) (sine form below ~1 degree).

All pairs of a set of heads come from one GEMM over stacked orthonormal bases; the cross-layer nulls' pairs
from projector Grams are headgeom.methods.projectors."""

from __future__ import annotations

import numpy as np

from headgeom.core.backend import NUMPY
from headgeom.core.factors import heads_of, stacked_columns as stacked  # noqa: F401 (callers import them from here)
from headgeom.methods.linalg import fro2

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


def orthonormal_bases(X: np.ndarray, rank_rtol: float = 1e-6, backend=NUMPY, first_pass: str = "eigh",
                      overwrite_x: bool = False):
    """Per head: orthonormal basis of Im X (columns), numerical rank at rtol * s_max.

    From the d x d Gram: X^T X = W diag(s^2) W^T, Q1 = X W_r diag(1/s_r) over the kept
    singular values, then one Cholesky re-orthonormalization pass (CholeskyQR2) so that
    orthogonality holds to rounding even for cond(X) near 1/rank_rtol. About 10x faster than
    a thin SVD of the D x d factor at the same accuracy.

    ``first_pass="cholesky"`` (the null draws'): where every head has full numerical rank (certified
    from the Cholesky factors themselves, the Gram's eigenvalues only past that bound: _cholesky_qr2)
    the first pass is Q1 = X L^-T from the Gram's Cholesky factor L, and both passes' triangular
    factors are inverted as triangles (LAPACK trtri), not by LU: CholeskyQR2 proper. Each head gets
    another orthonormal basis of the same space (its projector agrees to rounding, so do the
    statistics, which do not depend on the basis; orthogonality holds for cond(X) well past
    1/rank_rtol in float64), and the d x d work (two Cholesky factors, two triangular inverses) is
    a fraction of the eigenvector route's, which is what a basis costs where d is not small against
    D (Gemma-3-270M: d = 256 in D = 640). A batch with a rank-deficient or
    non-finite head, or in float32 a head with cond(X) past CHOLESKY_FIRST_PASS_COND32, takes the
    eigenvector route. ``overwrite_x`` (a null draw, which no one else reads): the Cholesky route may
    compute the bases in X's own memory (_cholesky_qr2), with the same bits.

    Returns (bases (n, D, d), the heads of one stacked matrix (``heads_of``), with columns beyond
    the rank zeroed; ranks (n,)). A head with
    non-finite weights gets rank -1 and a zero basis (its pairs become NaN + flag)."""
    if first_pass not in ("eigh", "cholesky"):
        raise ValueError(f"orthonormal_bases: first_pass is 'eigh' or 'cholesky', not {first_pass!r}")
    finite = np.isfinite(X).all(axis=(-1, -2))
    Xf = X if finite.all() else np.where(finite[:, None, None], X, 0.0)
    mm = backend.matmul
    G = mm(np.swapaxes(Xf, -1, -2), Xf)
    if first_pass == "cholesky" and finite.all():
        Q = _cholesky_qr2(Xf, G, rank_rtol, backend, overwrite_x)
        if Q is not None:
            return Q, np.full(X.shape[0], X.shape[-1])
    w, W = np.linalg.eigh(G)
    w, W = w[..., ::-1], W[..., ::-1]  # largest singular value first, dropped columns last
    s = np.sqrt(np.clip(w, 0.0, None))
    keep = (s > rank_rtol * s[..., :1]) & finite[:, None]
    with np.errstate(divide="ignore"):
        inv = np.where(keep, 1.0 / np.where(keep, s, 1.0), 0.0)
    Q1 = mm(Xf, W * inv[..., None, :])
    # second pass: Q1^T Q1 = I + E; dropped (zero) columns get 1 on the diagonal; Q = Q1 L^{-T}
    G2 = mm(np.swapaxes(Q1, -1, -2), Q1) + np.eye(X.shape[-1], dtype=X.dtype) * (~keep)[..., None, :]
    Linv = np.linalg.inv(np.linalg.cholesky(G2))
    ranks = np.where(finite, keep.sum(-1), -1)
    return _stacked_product(Q1, Linv, backend), ranks


def _stacked_product(Q1: np.ndarray, Linv: np.ndarray, backend) -> np.ndarray:
    """The second pass's Q = Q1 L^{-T} per head, written as the heads of one stacked (D, n d) matrix:
    the pair products (upper_blocks, cross_blocks) then stack them for free instead of copying them."""
    n, D, d = Q1.shape
    Q = heads_of(np.empty((D, n * d), dtype=Q1.dtype), n)
    if backend.name == "numpy":
        np.matmul(Q1, np.swapaxes(Linv, -1, -2), out=Q)  # BLAS writes each head in place, same bits
    else:
        Q[...] = backend.matmul(Q1, np.swapaxes(Linv, -1, -2))
    return Q


CHOLESKY_FIRST_PASS_COND32 = 1e2  # float32: the Gram's Cholesky first pass only for cond(X) below this


def _lower_inverse(L: np.ndarray, in_place: bool = False) -> np.ndarray | None:
    """Inverses of lower-triangular matrices (..., d, d) by LAPACK trtri (None if one is singular);
    ``in_place``: written over L (C-ordered), else into a copy."""
    from headgeom.core import lapack

    out = L if in_place and L.flags.c_contiguous else np.array(L, order="C")
    for i in np.ndindex(L.shape[:-2]):
        if lapack.lower_inverse_in_place(out[i]) != 0:
            return None
    return out


def _cholesky_qr2(X: np.ndarray, G: np.ndarray, rank_rtol: float, backend, overwrite_x: bool = False):
    """orthonormal_bases' first_pass="cholesky": the bases of full-rank heads X (n, D, d) with Gram G,
    or None where the eigenvector route must run (a head below full rank, a Gram that is not
    numerically positive definite).

    Full rank, cond(X) = s_max / s_min < 1 / bound, is certified without eigenvalues where
    ||L||_F ||L^-1||_F (L L^T = G: L^T has X's singular values, and each Frobenius norm is at most
    sqrt(d) times the 2-norm, so this bounds cond(X) from above) is below 1 / bound; a head the
    bound cannot certify is decided by G's eigenvalues (eigvalsh), as the eigenvector route does.

    ``overwrite_x`` (on numpy, X the heads of a stacked matrix, ``heads_of``): both passes' products
    with the triangles run as BLAS trmm on X where it lies (_stacked_in_place): half a GEMM's
    multiplications, no array per pass, the same bits as the GEMMs (a triangle's zeros add exact
    zeros; tests), and the bases are returned in X's memory."""
    bound = rank_rtol if X.dtype == np.float64 else max(rank_rtol, 1.0 / CHOLESKY_FIRST_PASS_COND32)
    mm = backend.matmul
    try:
        L1 = np.linalg.cholesky(G)
    except np.linalg.LinAlgError:  # not numerically positive definite
        return None
    L1inv = _lower_inverse(L1)
    if L1inv is None:
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        certified = np.sqrt(fro2(L1) * fro2(L1inv)) * bound < 1.0
    if not certified.all():
        s2 = np.linalg.eigvalsh(G)  # ascending
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.sqrt(np.clip(s2[..., 0], 0.0, None) / s2[..., -1])  # s_min / s_max per head
        if not (ratio > bound).all():
            return None
    S = _stacked_in_place(X) if overwrite_x and backend.name == "numpy" else None
    if S is not None:
        from headgeom.core import lapack

        Q1 = heads_of(lapack.trmm_heads(S, L1inv), X.shape[0])  # X L1^-T, over X
    else:
        Q1 = mm(X, np.swapaxes(L1inv, -1, -2))
    try:
        L2inv = _lower_inverse(np.linalg.cholesky(mm(np.swapaxes(Q1, -1, -2), Q1)), in_place=True)
    except np.linalg.LinAlgError:
        L2inv = None
    if L2inv is None:
        if S is not None:  # X was overwritten: back to X (to rounding) for the eigenvector route
            lapack.trmm_heads(S, np.ascontiguousarray(L1))
        return None
    if S is not None:
        return heads_of(lapack.trmm_heads(S, L2inv), X.shape[0])
    return _stacked_product(Q1, L2inv, backend)


def _stacked_in_place(X: np.ndarray) -> np.ndarray | None:
    """The stacked (D, n d) matrix whose heads X is (``heads_of``: a view, not a copy), where it is
    C-ordered and writeable, so that products can run on the heads in place; None otherwise."""
    n, D, d = X.shape
    Y = np.swapaxes(X, 0, 1)
    if not (Y.flags.c_contiguous and Y.flags.writeable):
        return None
    return Y.reshape(D, n * d)  # a C-ordered array reshapes without a copy


def stacked_heads(X: np.ndarray) -> np.ndarray:
    """(n, D, d) heads -> the same values as heads of one stacked (D, n d) copy (``heads_of``): what
    a job that draws many null samples of one layer's heads hands to each draw, so that no draw
    copies them again."""
    return heads_of(stacked(X), X.shape[0])


def cross_blocks(Ua: np.ndarray, Ub: np.ndarray, backend=NUMPY, Sa: np.ndarray | None = None) -> np.ndarray:
    """All U_a^T U_b blocks, (na, nb, da, db), from one GEMM over the stacked bases (``Sa``:
    Ua already stacked, ``stacked(Ua)``)."""
    na, D, da = Ua.shape
    nb, _, db = Ub.shape
    Sa = stacked(Ua) if Sa is None else Sa
    if Sa.shape != (D, na * da):
        raise ValueError(f"cross_blocks: stacked Ua {Sa.shape} is not ({D}, {na * da})")
    Sb = stacked(Ub)
    C = backend.matmul(Sa.T, Sb)
    return C.reshape(na, da, nb, db).transpose(0, 2, 1, 3)


def sigma_max(C: np.ndarray) -> np.ndarray:
    """Largest singular value of each block (..., a, b), from the smaller Gram's top
    eigenvalue (about 2x faster than an SVD; small angles are redone in sine form)."""
    return _top_sigma(_block_grams(C))


def _block_grams(C: np.ndarray) -> np.ndarray:
    """The smaller Gram of each block (..., a, b): C^T C or C C^T (sigma_max's and sigma_max_largest's)."""
    return np.swapaxes(C, -1, -2) @ C if C.shape[-1] <= C.shape[-2] else C @ np.swapaxes(C, -1, -2)


def _top_sigma(G: np.ndarray) -> np.ndarray:
    """sqrt of each Gram's (..., d, d) top eigenvalue (eigvalsh; clipped at 0): the block's sigma_max."""
    return np.sqrt(np.clip(np.linalg.eigvalsh(G)[..., -1], 0.0, None))


LARGEST_MARGIN = 1e-8  # sigma_max_largest: a block is certified below the largest top eigenvalue by this relative margin
POWER_STEPS = 4  # sigma_max_largest: power steps for each block's lower bound (they only rank the candidates)
LARGEST_ROUNDS = 4  # sigma_max_largest: candidates tried before every block left uncertified gets eigvalsh


def sigma_max_largest(C: np.ndarray, skip: np.ndarray | None = None) -> np.ndarray | None:
    """sigma_max(C) for every block (n, a, b) that can hold the largest value, NaN for the blocks
    certified below it, without the eigenvalues of the others: what the smallest principal angle of
    a set of pairs needs (a null draw's layer statistics read only that minimum).

    Each block's Gram is sigma_max's (the same product, so the same bits); a few power steps give a
    lower bound of each top eigenvalue, which ranks the candidates. The best-ranked block left gets its
    top eigenvalue lam by eigvalsh, and every block left is certified below it where the Cholesky
    factorization of mu I - G, mu = lam (1 - LARGEST_MARGIN), runs to the end (LAPACK potrf: success
    bounds G's top eigenvalue by mu + d (d + 1) eps mu, far inside the margin at any d_head); the
    blocks it cannot certify are left for the next candidate, up to LARGEST_ROUNDS, then all get
    eigvalsh. Every value returned is computed as sigma_max computes it, so the largest value and the
    blocks holding it are sigma_max's bits. ``skip``: blocks left out (NaN). None when no block is
    left, a Gram is not finite or a candidate's value is not positive (use sigma_max)."""
    from headgeom.core import lapack

    G = _block_grams(C)
    n = G.shape[0]
    live = np.ones(n, bool) if skip is None else ~np.asarray(skip, bool)
    # |G_ij| <= sqrt(G_ii G_jj): a block's Gram is finite where its trace is (no (n, d, d) temporary)
    if not live.any() or not np.isfinite(np.einsum("pii->p", G)[live]).all():
        return None
    v = G.sum(axis=-1)  # G 1, then power steps: v^T G v / v^T v <= the top eigenvalue
    for _ in range(POWER_STEPS):
        norm = np.sqrt(np.einsum("pi,pi->p", v, v))
        v = v / np.where(norm > 0, norm, 1.0)[:, None]
        Gv = np.einsum("pij,pj->pi", G, v)
        lower, v = np.einsum("pi,pi->p", v, Gv), Gv
    out = np.full(n, np.nan)
    left = np.flatnonzero(live)  # blocks neither computed nor certified below a computed value
    top = 0.0
    for _ in range(LARGEST_ROUNDS):
        c = left[np.argmax(lower[left])]
        lam = np.linalg.eigvalsh(G[c])[-1]  # one matrix at a time: the bits of sigma_max's batched call
        if not lam > 0:
            return None
        out[c], top = np.sqrt(lam), max(top, lam)  # lam > 0: the clip of _top_sigma changes nothing
        left = left[left != c]
        left = left[~lapack.shifted_positive_definite(G, top * (1.0 - LARGEST_MARGIN), left)]
        if left.size == 0:
            break
    if left.size:
        out[left] = _top_sigma(G[left])
    return out


UPPER_STRIP_MB = 128  # upper_blocks: at most this much of the stacked Gram is held at a time
UPPER_STRIP_COLS = 512  # upper_blocks: a strip's width in columns (heads x d), what keeps its GEMM near peak


def upper_blocks(bases: np.ndarray, backend=NUMPY) -> np.ndarray:
    """U_i^T U_j for i < j (triu order) from the Gram of the stacked bases S = [U_1 ... U_n],
    computed in strips of heads a..b of about UPPER_STRIP_COLS columns: per strip one GEMM
    S_ab^T S_b: (the strip against every head right of it: OpenBLAS's syrk runs at about 0.7 of the
    GEMM rate, the GEMM near its peak), and the strip's own pairs i < j < b by one product per head
    S_i^T S_(i+1):b written where the pairs lie: no block is computed twice or left unused. On another
    backend a strip is one call, S_ab^T S_(a+1): (its own triangle computed twice: fewer, larger
    calls). Each entry is the same dot product over d_model as in a per-head product (one GEMM per
    head against the heads after it, the reference in tests: equal to 1e-12 relative, bit for bit
    with this project's OpenBLAS)."""
    n, D, d = bases.shape
    npairs = n * (n - 1) // 2
    # memory laid out (row of the block, pair, column), as the concatenation of per-head products
    # was: the pair sums of pk_within (einsum) and its sigma_max Grams then add in the same order
    mem = np.empty((d, npairs, d), dtype=bases.dtype)
    out = mem.transpose(1, 0, 2)
    if npairs == 0:
        return out
    S = stacked(bases)
    k = max(1, min(n, UPPER_STRIP_COLS // d, int(UPPER_STRIP_MB * 2**20 // (bases.itemsize * n * d * d))))
    starts = np.cumsum([0] + [n - 1 - i for i in range(n - 1)])  # triu offset of row i

    def gram(a, b, j0):  # S_ab^T [U_j0 ... U_n-1] (one product, blocks (b - a, d, n - j0, d))
        Sa, right = S[:, a * d:b * d], S[:, j0 * d:]
        G = np.matmul(Sa.T, right) if backend.name == "numpy" else backend.matmul(np.ascontiguousarray(Sa.T), right)
        return G.reshape(b - a, d, n - j0, d)  # the transposed view goes to BLAS as is: no copy

    for a in range(0, n - 1, k):
        b = min(a + k, n)
        if backend.name != "numpy":  # one call for the whole strip, its own triangle computed twice
            G4, j0 = gram(a, b, a + 1), a + 1
        else:  # the strip's own pairs i < j < b, one product per head written where the pairs lie
            for i in range(a, b - 1):
                p0 = starts[i]
                # a view of the pairs' rows: within a row of blocks the pairs' columns lie side by side
                flat = mem[:, p0:p0 + b - 1 - i].reshape(d, (b - 1 - i) * d)
                np.matmul(S[:, i * d:(i + 1) * d].T, S[:, (i + 1) * d:b * d], out=flat)
            if b == n:
                break
            G4, j0 = gram(a, b, b), b
        for i in range(a, min(b, n - 1)):  # head i's pairs with j >= max(j0, i + 1), where they lie
            c = max(j0, i + 1)
            p0 = starts[i] + c - i - 1
            mem[:, p0:p0 + n - c] = G4[i - a, :, c - j0:, :]
    return out


def _sine_min_angle(Ui, ri, Uj, rj) -> float:
    """theta_1 in degrees from the sine form: the smallest singular value of (I - P_U) V is
    sin theta_1 when dim V <= dim U. Needs the D x r factors (not a D x D operator)."""
    U, V = (Ui[:, :ri], Uj[:, :rj]) if ri >= rj else (Uj[:, :rj], Ui[:, :ri])
    resid = V - U @ (U.T @ V)
    smin = np.linalg.svd(resid, compute_uv=False).min()
    return float(np.degrees(np.arcsin(min(1.0, smin))))


def min_angle_deg(smax: float) -> float:
    return float(np.degrees(np.arccos(np.clip(smax, -1.0, 1.0))))


def pk_within(bases: np.ndarray, ranks: np.ndarray, backend=NUMPY, angles: str = "all") -> dict[str, np.ndarray]:
    """Unordered pairs i<j of one kind within a layer. ``angles="min"`` (a null draw, whose layer
    statistics read only the smallest angle): ``min_angle_deg`` holds each pair's angle where the pair
    can hold the layer's smallest one (sigma_max_largest: the same bits as ``"all"``) and NaN for the
    pairs certified above it."""
    if angles not in ("all", "min"):
        raise ValueError(f"pk_within: angles is 'all' or 'min', not {angles!r}")
    n = bases.shape[0]
    iu, ju = np.triu_indices(n, k=1)
    if len(iu) == 0:
        return {k: np.array([], dtype=t) for k, t in
                (("head_i", np.int64), ("head_j", np.int64), ("pk", float), ("rho", float), ("min_angle_deg", float), ("dim_i", np.int64), ("dim_j", np.int64), ("flags", object))}
    C = upper_blocks(bases, backend).astype(np.float64, copy=False)  # (npairs, d, d), triu order; statistics in float64
    pk = np.einsum("pij,pij->p", C, C)
    dims = np.minimum(ranks[iu], ranks[ju])
    undefined = dims <= 0  # a zero or non-finite head: NaN + flag, the run continues
    smax = sigma_max_largest(C, skip=undefined) if angles == "min" else None
    if smax is not None and np.nanmax(smax) >= np.cos(np.radians(2 * SINE_FORM_BELOW_DEG)):
        smax = None  # a smallest angle near the sine form's range: every pair's, as "all"
    if smax is None:
        smax = sigma_max(C)
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


def stacked_rank(bases: np.ndarray, rank_rtol: float = 1e-6) -> int:
    """dim(sum_i Im U_i) from the (sum d x sum d) Gram of the stacked orthonormal bases:
    its eigenvalues are the squared singular values of [U_1 ... U_n] (which have scale 1)."""
    n, D, d = bases.shape
    if not np.isfinite(bases).all():
        return -1
    S = stacked(bases)
    G = S.T @ S if n * d <= D else S @ S.T
    ev = np.clip(np.linalg.eigvalsh(G), 0.0, None)
    return int(np.sum(np.sqrt(ev) > rank_rtol * np.sqrt(ev[-1]))) if ev.size and ev[-1] > 0 else 0


def stacked_singular_values(X: np.ndarray) -> np.ndarray:
    """Singular values of the stacked matrix [X_1 ... X_n] (D x n d; for the writing factors, the
    layer's W_O), largest first, from the smaller of its two Grams (eigenvalues = squared singular
    values); all NaN when a factor is not finite."""
    n, D, d = X.shape
    if not np.isfinite(X).all():
        return np.full(min(D, n * d), np.nan)
    S = stacked(X)
    G = S.T @ S if n * d <= D else S @ S.T
    return np.sqrt(np.clip(np.linalg.eigvalsh(G), 0.0, None))[::-1]


def pk_within_layer(f, kinds=KINDS, rank_rtol: float = 1e-6, return_spaces: bool = False):
    """Within-layer PK for every kind. Returns (pair columns, per-kind layer facts[, spaces])."""
    cols: dict[str, list] = {k: [] for k in ("kind", "head_i", "head_j", "pk", "rho", "min_angle_deg", "dim_i", "dim_j", "flags")}
    facts = {}
    spaces = layer_spaces(f, kinds, rank_rtol)
    for kind, (X, bases, ranks) in spaces.items():
        r = pk_within(bases, ranks)
        for k, v in r.items():
            cols[k].append(np.asarray(v))
        cols["kind"].append(np.array([kind] * len(r["pk"]), dtype=object))
        layer_rank = stacked_rank(bases, rank_rtol)
        defect, expected = direct_sum_defect(ranks, layer_rank, X.shape[0], X.shape[2], X.shape[1])
        facts[kind] = {"ranks": ranks.tolist(), "layer_rank": layer_rank, "direct_sum_defect": defect,
                       "expected_defect": expected, "n_heads": int(X.shape[0])}
        if kind == "O":  # the spectrum of W_O^l itself (PK §5.3: a few strong write directions)
            facts[kind]["singular_values"] = [float(x) for x in stacked_singular_values(X)]
    cols = {k: np.concatenate(v) if v else np.array([]) for k, v in cols.items()}
    return (cols, facts, spaces) if return_spaces else (cols, facts)


def isotropic_rho(d_head: int, d_model: int) -> float:
    return d_head / d_model


def isotropic_sd(d_head: int, d_model: int) -> float:
    """SD of rho for independent random subspaces: sqrt(2 (D-d)^2 / (D^2 (D-1)(D+2)))."""
    D, d = d_model, d_head
    return float(np.sqrt(2 * (D - d) ** 2 / (D**2 * (D - 1) * (D + 2))))


# ---------------------------------------------------------------- layer statistics


def layer_stats(rho, angles, iso: float) -> dict:
    """Per layer (or layer pair): mean, dispersion (SD over pairs, ddof 0), quantiles,
    min angle, shares above 2x and below 0.5x the isotropic value."""
    rho = np.asarray(rho, dtype=float)
    rho = rho[np.isfinite(rho)]
    ang = np.asarray(angles, dtype=float)
    ang = ang[np.isfinite(ang)]
    if rho.size == 0:
        nan = float("nan")
        return {"n_pairs": 0, "mean": nan, "sd": nan, "median": nan, "p95": nan, "max": nan,
                "min_angle_deg": nan, "share_above_2iso": nan, "share_below_half_iso": nan}
    return {
        "n_pairs": int(rho.size),
        "mean": float(rho.mean()),
        "sd": float(rho.std(ddof=0)),
        "median": float(np.median(rho)),
        "p95": float(np.quantile(rho, 0.95)),
        "max": float(rho.max()),
        "min_angle_deg": float(ang.min()) if ang.size else float("nan"),
        "share_above_2iso": float(np.mean(rho > 2 * iso)),
        "share_below_half_iso": float(np.mean(rho < 0.5 * iso)),
    }


def layer_spaces(f, kinds, rank_rtol: float = 1e-6) -> dict:
    """kind -> (factors (n, D, d), orthonormal bases, ranks)."""
    out = {}
    for kind in kinds:
        X = factor_stack(f, kind)
        B, r = orthonormal_bases(X, rank_rtol)
        out[kind] = (X, B, r)
    return out


# ---------------------------------------------------------------- across layers


def head_sq_norms(X: np.ndarray) -> np.ndarray:
    """||X_i||_F^2 per head of an (n, D, d) stack, summed in a C-ordered stack's order whatever X's
    layout (a layer's W_O is heads of its stacked matrix; einsum's order follows the memory)."""
    Xc = np.ascontiguousarray(X)
    return np.einsum("wij,wij->w", Xc, Xc)


def cross_pairs(Bw, rw, Br, rr, Xw=None, Xr=None, angles: bool = True, backend=NUMPY,
                Sw=None, SXw=None, nw2=None, nr2=None) -> dict[str, np.ndarray]:
    """Every writer head (bases Bw, ranks rw) with every reader head (Br, rr).

    One GEMM over the stacked bases gives all (d x d) blocks; rho = PK / min(dim);
    min angle from sigma_max (sine form below 1 degree). With the raw factors Xw (writing
    matrices W_O^h) and Xr (folded reading factors) also the spectral-weighted measure
    D ||R B||_F^2 / (||R||_F^2 ||B||_F^2), R = Xr^T, B = Xw.
    ``Sw``, ``SXw``, ``nw2``: Bw and Xw already stacked (``stacked``) and Xw's ``head_sq_norms``, when
    one writer meets many readers; ``nr2``: Xr's ``head_sq_norms``, when one reader meets many writers."""
    nw, nr = Bw.shape[0], Br.shape[0]
    C = cross_blocks(Bw, Br, backend, Sa=Sw).astype(np.float64, copy=False)  # (nw, nr, d, d); statistics in float64
    pk = np.einsum("wrij,wrij->wr", C, C)
    dims = np.minimum(rw[:, None], rr[None, :])
    undefined = dims <= 0
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.where(undefined, np.nan, pk / dims)
    out = {"head_w": np.repeat(np.arange(nw), nr), "head_r": np.tile(np.arange(nr), nw),
           "pk": np.where(undefined, np.nan, pk).ravel(), "rho": rho.ravel(),
           "dim_w": np.repeat(rw, nr), "dim_r": np.tile(rr, nw)}
    if angles:
        smax = sigma_max(C).reshape(nw * nr)  # per block of the strided view: no copy of C
        ang = np.degrees(np.arccos(np.clip(smax, -1.0, 1.0)))
        ang[undefined.ravel()] = np.nan
        for p in np.flatnonzero(ang < SINE_FORM_BELOW_DEG):
            i, j = divmod(int(p), nr)
            ang[p] = _sine_min_angle(Bw[i], rw[i], Br[j], rr[j])
        out["min_angle_deg"] = ang
    if Xw is not None and Xr is not None:
        D = Xw.shape[1]
        RB = cross_blocks(Xw, Xr, backend, Sa=SXw)  # blocks Xw_i^T Xr_j = (R_j B_i)^T: same Frobenius norm
        num = np.einsum("wrij,wrij->wr", RB, RB)
        nw2 = head_sq_norms(Xw) if nw2 is None else nw2
        nr2 = head_sq_norms(Xr) if nr2 is None else nr2
        with np.errstate(divide="ignore", invalid="ignore"):
            out["weighted"] = (D * num / (nw2[:, None] * nr2[None, :])).ravel()
    return out


def rho_of_pk(pk: np.ndarray, ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
    """rho = PK / min(dim a, dim b) of an (na, nb) PK block with ranks ra, rb; NaN where a space is
    zero or non-finite (rank <= 0)."""
    dims = np.minimum(ra[:, None], rb[None, :])
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(dims <= 0, np.nan, pk / dims)


def lambda_min_S(Bw: np.ndarray) -> float:
    """lambda_min of S = sum_i P_{U_i} (D x D) from the (sum d x sum d) Gram of the stacked
    bases: S's nonzero spectrum is the Gram's. 0 when the writers do not span R^D."""
    n, D, d = Bw.shape
    if n * d < D:
        return 0.0
    Sw = stacked(Bw)
    ev = np.linalg.eigvalsh(Sw.T @ Sw)
    return float(max(ev[-D], 0.0))


# ---------------------------------------------------------------- self-head overlap


def self_overlap_test(rho_hn: np.ndarray, labels, rng, n_perm: int = 10_000):
    """Self-head overlap: mean_h rho_hn[h, labels[h]] against permutations of the labels.

    rho_hn (H x n): rho between head h's space and space k of the other kind (n = H for
    head-to-head tests; n = G with labels = KV group for GQA). When n! - 1 <= n_perm every
    non-identity permutation is used (exact test; GQA: exhaustive group labels), else n_perm
    random permutations. Returns (observed, null means, p = (k+1)/(N+1), exact)."""
    import itertools
    import math

    H, n = rho_hn.shape
    labels = np.asarray(labels)
    obs = float(np.mean(rho_hn[np.arange(H), labels]))
    if n < 2:
        return obs, np.array([]), float("nan"), True
    exact = math.factorial(n) - 1 <= n_perm
    if exact:
        perms = np.array([p for p in itertools.permutations(range(n)) if p != tuple(range(n))])
    else:
        perms = np.array([rng.permutation(n) for _ in range(n_perm)])
    null = rho_hn[np.arange(H)[None, :], perms[:, labels]].mean(axis=1)
    from headgeom.core.stats import empirical_p

    return obs, null, empirical_p(obs, null, greater=True), exact


def rho_matrix(Ba, ra, Bb, rb) -> np.ndarray:
    """rho between every space in a and every space in b: (na, nb)."""
    C = cross_blocks(Ba, Bb)
    pk = np.einsum("abij,abij->ab", C, C)
    dims = np.minimum(ra[:, None], rb[None, :])
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(dims > 0, pk / dims, np.nan)
