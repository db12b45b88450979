"""Paper 1 suite (METHODS §1 beyond closure.py): perturbation split, orientation scrambles and
the Haar audit, factorial D x K, feasible capacity, shared-value algebra and value anchors.

Everything is float64 and built from d_head x d_head Grams of one layer:
  A_h = O_h^T O_h,  B_g = V_g^T V_g,  M[h, g] = V_g^T O_h,  C[g, g'] = V_g^T V_g'.
Every random draw comes from ``headgeom.seeds.rng_for(model, layer, head, draw, purpose)``, so a
head's numbers do not depend on which other heads, layers or jobs run, nor in which order.

Assertions here guard identities (a failure is a bug in this code, never a property of the
weights): the perturbation split reproduces P_D(K); scrambles, Haar draws and capacity iterates
keep the singular values of K; the gamma_ij bound holds."""

from __future__ import annotations

import numpy as np

from headgeom.methods import closure as C
from headgeom.core.seeds import rng_for, seed_for

# Purposes (the last part of every seed key).
SCRAMBLE, HAAR, CAPACITY, MATCHED, SAMPLE, BOOTSTRAP = "scramble", "haar", "capacity", "matched", "sample", "bootstrap"

# Heads whose principal coordinates are defined: closure flags that exclude a head.
EXCLUDING_FLAGS = ("nonfinite", "zero_T", "rank_deficient")


def _t(X):
    return np.swapaxes(X, -1, -2)


def _ip(X, Y):
    return np.einsum("...ij,...ij->...", X, Y)


def _fro2(X):
    return _ip(X, X)


def _tr(X):
    return np.einsum("...ii->...", X)


# ================================================================ perturbation split


def perturbation_split(K, D):
    """Exact split of P_D(K) around the isoclinic core (METHODS §1).

    c = tr(D)/d, E = D - cI, X = K^2, Y = K, F = KEK; x = X/||X||, sigma = sign<X,Y> (1 if 0),
    y = sigma Y/||Y||, s = <x,y> = sqrt(P_I(K)); u = (y - s x)/sqrt(1-s^2) (computed by
    re-orthogonalizing y - s x against x, so x, u are orthonormal to machine precision, and
    t = <u, y> stands for sqrt(1-s^2)); F/(c||X||) = a x + b u + w with w orthogonal to x, u.
    Then P_D(K) = ((1+a)s + b t)^2 / ((1+a)^2 + b^2 + ||w||^2).
    When y = x to 1e-14 the one-dimensional form is used (b = 0, t = 0).

    Returns dict of arrays: c, s, t, a, b, w2, P_split, scale (the size of the terms in the
    numerator, for the identity check)."""
    K = np.asarray(K, dtype=np.float64)
    D = np.asarray(D, dtype=np.float64)
    d = D.shape[-1]
    c = D.sum(-1) / d
    E = D - c[..., None]
    X = K @ K
    F = K @ (E[..., :, None] * K)
    with np.errstate(divide="ignore", invalid="ignore"):
        nX = np.sqrt(_fro2(X))
        nY = np.sqrt(_fro2(K))
        x = X / nX[..., None, None]
        ipXY = _ip(X, K)
        sig = np.where(ipXY < 0, -1.0, 1.0)
        y = sig[..., None, None] * K / nY[..., None, None]
        s = _ip(x, y)
        Fn = F / (c * nX)[..., None, None]
        a = _ip(Fn, x)
        ur = y - s[..., None, None] * x
        ur = ur - _ip(ur, x)[..., None, None] * x  # re-orthogonalize
        nur = np.sqrt(_fro2(ur))
        one_dim = ~(nur > 1e-14)
        u = np.where(one_dim[..., None, None], 0.0, ur / np.where(one_dim, 1.0, nur)[..., None, None])
        t = _ip(u, y)
        b = _ip(Fn, u)
        w = Fn - a[..., None, None] * x - b[..., None, None] * u
        w2 = _fro2(w)
        num = (1 + a) * s + b * t
        den = (1 + a) ** 2 + b**2 + w2
        P_split = num**2 / den
        scale = (np.abs(1 + a) * np.abs(s) + np.abs(b) * np.abs(t)) ** 2 / den
    return {"c": c, "s": s, "t": t, "a": a, "b": b, "w2": w2, "P_split": P_split, "scale": scale}


def split_relerr(split: dict, P_D) -> np.ndarray:
    """|P_split - P_D(K)| relative to the size of the numerator's terms (>= P): the error of an
    exact identity evaluated in floating point, robust to cancellation when P is tiny."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.abs(split["P_split"] - P_D) / np.maximum(np.maximum(split["scale"], np.abs(P_D)), np.finfo(float).tiny)


# ================================================================ orientation scrambles


def signed_permutation(rng: np.random.Generator, d: int) -> np.ndarray:
    perm = rng.permutation(d)
    signs = rng.choice(np.array([-1.0, 1.0]), size=d)
    P = np.zeros((d, d))
    P[np.arange(d), perm] = signs
    return P


def haar_orthogonal(rng: np.random.Generator, d: int) -> np.ndarray:
    """Haar-distributed orthogonal matrix (QR of a Gaussian, signs fixed by diag R)."""
    Q, R = np.linalg.qr(rng.standard_normal((d, d)))
    return Q * np.sign(np.where(np.diag(R) == 0, 1.0, np.diag(R)))[None, :]


def sv_relerr(K, Ks) -> np.ndarray:
    """max_i |s_i(K') - s_i(K)| / s_1(K) for each K' in Ks (..., d, d)."""
    s0 = np.linalg.svd(K, compute_uv=False)
    s = np.linalg.svd(Ks, compute_uv=False)
    return np.max(np.abs(s - s0), axis=-1) / s0[0]


def scramble_draws(K, D, model: str, layer: int, head: int, n_perm: int, n_haar: int):
    """P_D(P_L K P_R) for n_perm signed-permutation draws and n_haar Haar draws of one head,
    D fixed. Returns (P_perm (n_perm,), P_haar (n_haar,), max singular-value rel. error)."""
    d = K.shape[-1]
    mats = []
    for r in range(n_perm):
        rng = rng_for(model, layer, head, r, SCRAMBLE)
        PL = signed_permutation(rng, d)
        PR = signed_permutation(rng, d)
        mats.append(PL @ K @ PR)
    for r in range(n_haar):
        rng = rng_for(model, layer, head, r, HAAR)
        QL = haar_orthogonal(rng, d)
        QR = haar_orthogonal(rng, d)
        mats.append(QL @ K @ QR)
    if not mats:
        return np.zeros(0), np.zeros(0), 0.0
    Ks = np.stack(mats)
    P = C.P_of(Ks, np.broadcast_to(D, (len(mats), d)))
    err = float(np.max(sv_relerr(K, Ks)))
    return P[:n_perm], P[n_perm:], err


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


def factorial_layer(Ks, Ds, valid, kv_group) -> np.ndarray:
    """Per-head interaction I_h over each head's donor set (valid heads only; NaN otherwise)."""
    H = len(valid)
    out = np.full(H, np.nan)
    for dset in donor_sets(kv_group):
        idx = dset[valid[dset]]
        if idx.size >= 2:
            out[idx] = interaction(factorial_S(Ks[idx], Ds[idx]))
    return out


# ================================================================ feasible capacity


def logP_and_grad(X, D):
    """log P_D(X) and its Euclidean gradient, batched: X (..., d, d), D (..., d).

    ip = <XDX, X>:   grad = X X^T D + D X^T X + X D X
    n4 = ||XDX||^2:  grad = 2 (Z X^T D + D X^T Z), Z = XDX
    n2 = ||X||^2:    grad = 2 X
    log P = 2 log|ip| - log n4 - log n2."""
    Dr = D[..., None, :]  # scales columns
    Dc = D[..., :, None]  # scales rows
    Z = (X * Dr) @ X
    ip = _ip(Z, X)
    n4 = _fro2(Z)
    n2 = _fro2(X)
    XtX = _t(X) @ X
    g_ip = (X @ _t(X)) * Dr + Dc * XtX + Z
    g_n4 = 2 * ((Z @ _t(X)) * Dr + Dc * (_t(X) @ Z))
    with np.errstate(divide="ignore", invalid="ignore"):
        f = 2 * np.log(np.abs(ip)) - np.log(n4) - np.log(n2)
        g = 2 * g_ip / ip[..., None, None] - g_n4 / n4[..., None, None] - 2 * X / n2[..., None, None]
    return f, g


def logP(X, D):
    Z = (X * D[..., None, :]) @ X
    with np.errstate(divide="ignore", invalid="ignore"):
        return 2 * np.log(np.abs(_ip(Z, X))) - np.log(_fro2(Z)) - np.log(_fro2(X))


def retract(Y, sigma):
    """Exact SVD retraction onto {U diag(sigma) W^T}: the nearest such matrix to Y in Frobenius
    norm (singular vectors of Y, prescribed singular values in the same descending order)."""
    U, _, Wt = np.linalg.svd(Y)
    return (U * sigma[..., None, :]) @ Wt


def projected_ascent(X0, D, sigma, iters: int, step0: float = 0.1):
    """Projected gradient ascent of log P_D on the orbit of sigma, one trial step per iteration:
    accepted (step x1.5) when it raises P, else rejected (step x0.5). Batched over starts.
    Returns (best X, best P); P never falls below the start's."""
    X = np.array(X0, dtype=np.float64, copy=True)
    f, g = logP_and_grad(X, D)
    f = np.where(np.isfinite(f), f, -np.inf)
    eta = np.full(X.shape[0], step0)
    for _ in range(iters):
        active = eta > 1e-12
        if not active.any():
            break
        gn = np.sqrt(_fro2(g))
        xn = np.sqrt(_fro2(X))
        with np.errstate(divide="ignore", invalid="ignore"):
            h = np.where((gn > 0)[:, None, None], g * (eta * xn / gn)[:, None, None], 0.0)
        Xn = retract(X + h, sigma)
        fn = logP(Xn, D)
        ok = active & np.isfinite(fn) & (fn > f)
        if ok.any():
            X[ok] = Xn[ok]
            fo, go = logP_and_grad(X[ok], D[ok])
            f[ok], g[ok] = fo, go
        eta = np.where(ok, eta * 1.5, eta * 0.5)
    return X, np.exp(f)


def capacity_starts(K, model: str, layer: int, head: int, restarts: int) -> np.ndarray:
    """Deterministic restarts: the trained K, then Haar-random orientations U diag(sigma) W^T."""
    d = K.shape[-1]
    sigma = np.linalg.svd(K, compute_uv=False)
    starts = [K]
    for r in range(1, restarts):
        rng = rng_for(model, layer, head, r, CAPACITY)
        starts.append((haar_orthogonal(rng, d) * sigma[None, :]) @ haar_orthogonal(rng, d))
    return np.stack(starts), sigma


def feasible_capacity(K, D, model: str, layer: int, head: int, restarts: int, iters: int):
    """Cap_hat: lower bound of max P_D(U diag(sigma) W^T) (sigma = singular values of K, D fixed).

    Returns dict: cap, cap_trained_start, cap_random (best random start; NaN without one),
    sv_relerr (of the best iterate), P_start (P_D(K))."""
    starts, sigma = capacity_starts(K, model, layer, head, restarts)
    n = starts.shape[0]
    Dn = np.broadcast_to(D, (n, D.shape[-1]))
    sig = np.broadcast_to(sigma, (n, sigma.shape[-1]))
    X, P = projected_ascent(starts, np.ascontiguousarray(Dn), np.ascontiguousarray(sig), iters)
    best = int(np.nanargmax(P))
    return {
        "cap": float(P[best]),
        "cap_trained_start": float(P[0]),
        "cap_random": float(np.max(P[1:])) if n > 1 else float("nan"),
        "sv_relerr": float(sv_relerr(K, X[best][None])[0]),
        "P_start": float(C.P_of(K, D)),
    }


def hash_order(keys_model: str, layer: int, heads, purpose: str) -> list[int]:
    """Heads ordered by a fixed hash of (model, layer, head, 0, purpose): a deterministic,
    closure-independent ordering."""
    return sorted((int(h) for h in heads), key=lambda h: seed_for(keys_model, layer, h, 0, purpose))


def capacity_selection(P_final, valid, threshold: float, final_model: str, layer: int, n_sample: int):
    """Groups fixed by the final checkpoint: strong (P >= threshold), layer-matched ordinary
    (as many as strong, hash-chosen among P < threshold in the same layer), and a hash sample of
    n_sample heads chosen independently of closure. Returns boolean masks."""
    P_final = np.asarray(P_final, dtype=float)
    valid = np.asarray(valid, dtype=bool) & np.isfinite(P_final)
    H = len(P_final)
    strong = valid & (P_final >= threshold)
    ordinary = np.flatnonzero(valid & (P_final < threshold))
    matched = np.zeros(H, bool)
    matched[hash_order(final_model, layer, ordinary, MATCHED)[: int(strong.sum())]] = True
    sample = np.zeros(H, bool)
    sample[hash_order(final_model, layer, np.flatnonzero(valid), SAMPLE)[:n_sample]] = True
    return strong, matched, sample


def attainment(P, R, cap):
    """E = (P - R)/(Cap_hat - R), not clipped; NaN when Cap_hat = R."""
    P, R, cap = (np.asarray(x, dtype=float) for x in (P, R, cap))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(cap != R, (P - R) / (cap - R), np.nan)


# ================================================================ layer geometry


class LayerGeometry:
    """All Grams of one layer: A (H,d,d), B (G,d,d), M (H,G,d,d) = V_g^T O_h, C (G,G,d,d)."""

    def __init__(self, f, rank_rtol: float = 1e-6):
        O = f.W_O  # (H, D, d)
        Vg = np.swapaxes(f.W_V, -1, -2)  # (G, D, d)
        H, Dm, d = O.shape
        G = Vg.shape[0]
        self.H, self.G, self.d, self.d_model = H, G, d, Dm
        self.kv_group = np.asarray(f.kv_group)
        self.O, self.Vg = O, Vg
        self.A = _t(O) @ O
        Vall = np.ascontiguousarray(Vg.transpose(1, 0, 2).reshape(Dm, G * d))
        self.M = (Vall.T[None] @ O).reshape(H, G, d, d)  # M[h, g] = V_g^T O_h
        self.C = (Vall.T @ Vall).reshape(G, d, G, d).transpose(0, 2, 1, 3)  # C[g, g'] = V_g^T V_g'
        self.B = np.stack([self.C[g, g] for g in range(G)]) if G else np.zeros((0, d, d))
        finA = np.isfinite(self.A).all((-1, -2))
        finB = np.isfinite(self.B).all((-1, -2))
        self.rank_O = np.where(finA, C.gram_rank(np.where(finA[:, None, None], self.A, 0.0), rank_rtol), -1)
        self.rank_V = np.where(finB, C.gram_rank(np.where(finB[:, None, None], self.B, 0.0), rank_rtol), -1)

    def own_M(self):
        return self.M[np.arange(self.H), self.kv_group]

    def coords(self, heads, groups):
        """Principal coordinates (D, K) of O_h paired with V_g for the given (head, group) lists."""
        heads, groups = np.asarray(heads, int), np.asarray(groups, int)
        if heads.size == 0:
            return np.zeros((0, self.d)), np.zeros((0, self.d, self.d))
        return C.principal_coordinates(self.A[heads], self.B[groups], self.M[heads, groups])


# ================================================================ anchors


def anchor_scores(geo: LayerGeometry, h: int, nT2: float, cache: dict | None = None) -> np.ndarray:
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
        ip = np.sum(geo.M[h, g] * cache[(g, g0)])  # tr(M^T X) = <M, X>_F
        out[g] = ip**2 / (geo.d * nT2)
    return out


def oblique_share(A, B, M):
    """||(I - P_V) O V^T||^2 / ||O V^T||^2 = 1 - tr(M^T B^{-1} M B) / tr(A B)."""
    return 1.0 - _tr(_t(M) @ np.linalg.solve(B, M) @ B) / _tr(A @ B)


def retrieval_rank(scores: np.ndarray, own: int) -> int:
    """1 + number of candidates scoring strictly higher than the trained V."""
    s = scores[np.isfinite(scores)]
    return int(1 + np.sum(s > scores[own])) if np.isfinite(scores[own]) else -1


# ================================================================ shared-value algebra


def gamma_bound(A_i, A_j):
    """gamma_ij = lambda_max(A_j^{-1/2} A_i A_j^{-1/2}) (generalized eigenvalue, via Cholesky
    A_j = L L^T: the largest eigenvalue of L^{-1} A_i L^{-T}). Broadcasts: a stack of A_i
    against one A_j factors A_j once."""
    Linv = np.linalg.inv(np.linalg.cholesky(A_j))
    W = Linv @ A_i @ _t(Linv)
    return np.linalg.eigvalsh((W + _t(W)) / 2)[..., -1]


product_law_general = C.product_law_general  # shared-V and cross-group sibling products


def _fro_rows(X, Y):
    """<X_a, Y_b>_F for stacks X (n, d, d), Y (m, d, d) -> (n, m)."""
    return X.reshape(X.shape[0], -1) @ Y.reshape(Y.shape[0], -1).T


def pair_rows(geo: LayerGeometry, P, alpha, valid, bound_rtol: float = 1e-9):
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
        M = geo.M[mem, g]  # M_j = V^T O_j
        ok = valid[mem]
        S = M @ B @ _t(M)  # M_j B M_j^T
        Zt = B @ _t(M)  # B M_j^T
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
            N = geo.M[mem, gc]  # V'^T O_j
            Sc = N @ B @ _t(N)
            Zc = N @ _t(geo.C[gc, g])
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


# ================================================================ one layer: heads + pairs


def valid_heads(base: dict, geo: LayerGeometry) -> np.ndarray:
    """Heads with defined principal coordinates (full-rank finite O and V, T and T^2 nonzero)."""
    fl = base["flags"]
    bad = np.array([any(x in str(s).split(",") for x in EXCLUDING_FLAGS) for s in fl], dtype=bool)
    return ~bad & (geo.rank_O == geo.d) & (geo.rank_V[geo.kv_group] == geo.d) & np.isfinite(base["P"])


def heads_layer(f, model: str, layer: int, params: dict, log=None):
    """Per-head columns (closure + split + scrambles + factorial + anchors) and sibling pairs."""
    identity_rtol = params.get("identity_rtol", 1e-10)
    rank_rtol = params.get("rank_rtol", 1e-6)
    n_perm = int(params.get("scramble_draws", 8))
    n_haar = int(params.get("haar_draws", 2))
    split_rtol = float(params.get("split_rtol", 1e-8))
    sv_rtol = float(params.get("sv_rtol", 1e-12))

    base = C.closure_layer(f, identity_rtol=identity_rtol, rank_rtol=rank_rtol)
    geo = LayerGeometry(f, rank_rtol)
    H, G, d = geo.H, geo.G, geo.d
    kv = geo.kv_group
    valid = valid_heads(base, geo)
    idx = np.flatnonzero(valid)
    nan = lambda: np.full(H, np.nan)  # noqa: E731

    Ds, Ks = np.full((H, d), np.nan), np.full((H, d, d), np.nan)
    if idx.size:
        Ds[idx], Ks[idx] = geo.coords(idx, kv[idx])
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
    I_real = factorial_layer(Ks, Ds, valid, kv)
    wv = C.wrong_v_groups(kv, G)
    I_ctrl = nan()
    if wv is not None:
        valid_w = valid & (geo.rank_V[wv] == d)
        iw = np.flatnonzero(valid_w)
        Dw, Kw = np.full((H, d), np.nan), np.full((H, d, d), np.nan)
        if iw.size:
            Dw[iw], Kw[iw] = geo.coords(iw, wv[iw])
        I_ctrl = factorial_layer(Kw, Dw, valid_w, kv)

    # value anchors and same-layer retrieval
    nT2 = _tr(geo.A @ geo.B[kv])
    anchor, anchor_w, oblique = nan(), nan(), nan()
    rank = np.full(H, -1)
    if idx.size:
        oblique[idx] = oblique_share(geo.A[idx], geo.B[kv[idx]], geo.own_M()[idx])
    cache = {}
    for h in idx:
        sc = anchor_scores(geo, h, nT2[h], cache)
        anchor[h] = sc[kv[h]]
        if wv is not None:
            anchor_w[h] = sc[wv[h]]
        rank[h] = retrieval_rank(sc, kv[h])

    pairs = pair_rows(geo, base["P"], base["alpha"], valid)

    cols = dict(base)
    cols.update({
        "valid": valid,
        "P_D": P_D,
        "split_c": sp["c"], "split_s": sp["s"], "split_a": sp["a"], "split_b": sp["b"], "split_w2": sp["w2"],
        "split_relerr": sp_err,
        "P_scramble": P_scr, "R_scramble": R_scr, "P_haar": P_haar, "R_haar": R_haar, "sv_relerr": svr,
        "I_factorial": I_real, "I_factorial_ctrl": I_ctrl,
        "anchor_cos2": anchor, "anchor_cos2_wrong_v": anchor_w, "oblique_share": oblique,
        "retrieval_rank": rank, "n_value_candidates": np.full(H, int(np.sum(geo.rank_V == d))),
    })
    return cols, pairs


# ================================================================ one layer: capacity


def capacity_layer(f, f_final, model: str, final_model: str, layer: int, params: dict):
    """Cap_hat, R and E for the heads the final checkpoint selects (strong, layer-matched
    ordinary, hash sample), computed on this checkpoint's factors ``f``."""
    rank_rtol = params.get("rank_rtol", 1e-6)
    threshold = float(params["strong_threshold"])
    n_perm = int(params.get("scramble_draws", 8))
    restarts = int(params["restarts"])
    iters = int(params["iters"])
    n_sample = int(params["sample_per_layer"])
    sv_rtol = float(params.get("sv_rtol", 1e-12))

    base_f = C.closure_layer(f_final, rank_rtol=rank_rtol) if f_final is not f else None
    base = C.closure_layer(f, rank_rtol=rank_rtol)
    geo = LayerGeometry(f, rank_rtol)
    if base_f is None:
        base_f, geo_f = base, geo
    else:
        geo_f = LayerGeometry(f_final, rank_rtol)
        if (geo_f.H, geo_f.G, geo_f.d, geo_f.d_model) != (geo.H, geo.G, geo.d, geo.d_model):
            raise ValueError(f"{model} layer {layer} has another shape than its lineage's final checkpoint {final_model}")
    valid_f = valid_heads(base_f, geo_f)
    strong, matched, sample = capacity_selection(base_f["P"], valid_f, threshold, final_model, layer, n_sample)
    sel = np.flatnonzero(strong | matched | sample)
    valid = valid_heads(base, geo)
    n = sel.size
    out = {k: np.full(n, np.nan) for k in ("P", "R", "cap", "cap_trained_start", "cap_random", "E", "sv_relerr")}
    flags = []
    for r, h in enumerate(sel):
        if not valid[h]:
            flags.append("undefined_here")
            continue
        Dh, Kh = geo.coords([h], [geo.kv_group[h]])
        Dh, Kh = Dh[0], Kh[0]
        pp, _, _ = scramble_draws(Kh, Dh, model, layer, int(h), n_perm, 0)
        cap = feasible_capacity(Kh, Dh, model, layer, int(h), restarts, iters)
        if not cap["sv_relerr"] < sv_rtol:
            raise AssertionError(f"capacity iterate lost the singular values of K (head {h}): {cap['sv_relerr']:.3e}")
        out["P"][r] = cap["P_start"]
        out["R"][r] = np.median(pp) if pp.size else np.nan
        for k in ("cap", "cap_trained_start", "cap_random", "sv_relerr"):
            out[k][r] = cap[k]
        flags.append("")
    out["E"] = attainment(out["P"], out["R"], out["cap"])
    return {
        "head": sel.astype(np.int64),
        "kv_group": geo.kv_group[sel].astype(np.int64),
        "final_model": np.array([final_model] * n, dtype=object),
        "P_final": np.asarray(base_f["P"], dtype=float)[sel],
        "is_strong": strong[sel], "is_matched": matched[sel], "is_sample": sample[sel],
        **out,
        "restarts": np.full(n, restarts, dtype=np.int64), "iters": np.full(n, iters, dtype=np.int64),
        "flags": np.array(flags, dtype=object),
    }


# ================================================================ aggregation helpers


def auroc(pos, neg) -> float:
    """P(score_pos > score_neg) + 1/2 P(equal) (Mann-Whitney); NaN if a class is empty."""
    from scipy.stats import rankdata

    pos = np.asarray(pos, dtype=float)
    neg = np.asarray(neg, dtype=float)
    pos, neg = pos[np.isfinite(pos)], neg[np.isfinite(neg)]
    if pos.size == 0 or neg.size == 0:
        return float("nan")
    r = rankdata(np.concatenate([pos, neg]))
    return float((r[: pos.size].sum() - pos.size * (pos.size + 1) / 2) / (pos.size * neg.size))


def hierarchical_bootstrap(units, n_boot: int, rng: np.random.Generator, level_names=("model", "layer")):
    """Bootstrap of the mean layer gap with resampling at every level.

    ``units``: list (top level, e.g. models) of lists (layers) of (a, b) pairs of arrays (the
    strong and ordinary heads' values). Each replicate resamples top units, then layers within
    them, then heads within each group; the statistic is the mean over layers of mean(a) - mean(b).
    Returns (point estimate, 2.5%, 97.5%)."""
    units = [[(np.asarray(a, float), np.asarray(b, float)) for a, b in lay if len(a) and len(b)] for lay in units]
    units = [u for u in units if u]
    if not units:
        return float("nan"), float("nan"), float("nan")
    point = float(np.mean([a.mean() - b.mean() for u in units for a, b in u]))
    stats = np.empty(n_boot)
    for k in range(n_boot):
        gaps = []
        for ui in rng.integers(0, len(units), len(units)):
            u = units[ui]
            for li in rng.integers(0, len(u), len(u)):
                a, b = u[li]
                gaps.append(a[rng.integers(0, a.size, a.size)].mean() - b[rng.integers(0, b.size, b.size)].mean())
        stats[k] = np.mean(gaps)
    lo, hi = np.quantile(stats, [0.025, 0.975]) if n_boot else (np.nan, np.nan)
    return point, float(lo), float(hi)
