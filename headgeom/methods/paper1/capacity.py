"""Feasible capacity: projected ascent of log P over cores with K's singular values, from
seeded restarts; the heads a lineage's final checkpoint selects; attainment."""

from __future__ import annotations

import numpy as np

from headgeom.methods import closure as C
from headgeom.core.seeds import rng_for, seed_for
from headgeom.methods.grams import LayerGrams
from headgeom.methods.linalg import fro2, inner, mT
from headgeom.methods.paper1.common import CAPACITY, MATCHED, SAMPLE, coords, valid_heads
from headgeom.methods.paper1.scramble import haar_orthogonal, scramble_draws, sv_relerr


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
    ip = inner(Z, X)
    n4 = fro2(Z)
    n2 = fro2(X)
    XtX = mT(X) @ X
    g_ip = (X @ mT(X)) * Dr + Dc * XtX + Z
    g_n4 = 2 * ((Z @ mT(X)) * Dr + Dc * (mT(X) @ Z))
    with np.errstate(divide="ignore", invalid="ignore"):
        f = 2 * np.log(np.abs(ip)) - np.log(n4) - np.log(n2)
        g = 2 * g_ip / ip[..., None, None] - g_n4 / n4[..., None, None] - 2 * X / n2[..., None, None]
    return f, g


def logP(X, D):
    Z = (X * D[..., None, :]) @ X
    with np.errstate(divide="ignore", invalid="ignore"):
        return 2 * np.log(np.abs(inner(Z, X))) - np.log(fro2(Z)) - np.log(fro2(X))


def retract(Y, sigma):
    """Exact SVD retraction onto {U diag(sigma) W^T}: the nearest such matrix to Y in Frobenius
    norm (singular vectors of Y, prescribed singular values in the same descending order)."""
    U, _, Wt = np.linalg.svd(Y)
    return (U * sigma[..., None, :]) @ Wt


def _logP_Z(X, D):
    """log P_D(X) with the pieces its gradient reuses: Z = XDX, <Z, X>, ||Z||^2, ||X||^2
    (the same operations, in the same order, as logP_and_grad)."""
    Z = (X * D[..., None, :]) @ X
    ip = inner(Z, X)
    n4 = fro2(Z)
    n2 = fro2(X)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = 2 * np.log(np.abs(ip)) - np.log(n4) - np.log(n2)
    return f, Z, ip, n4, n2


def _grad_from(X, D, Z, ip, n4, n2):
    """The Euclidean gradient of log P_D at X given _logP_Z's pieces (as in logP_and_grad), each
    operation of that expression done in place on the products' own arrays (the same operations
    on the same operands, so the same bits, without a temporary per operation)."""
    Dr = D[..., None, :]
    Dc = D[..., :, None]
    g = X @ mT(X)  # g_ip = (X X^T) Dr + Dc (X^T X) + Z
    g *= Dr
    XtX = mT(X) @ X
    XtX *= Dc
    g += XtX
    g += Z
    n = Z @ mT(X)  # g_n4 = 2 ((Z X^T) Dr + Dc (X^T Z))
    n *= Dr
    XtZ = np.matmul(mT(X), Z, out=XtX)
    XtZ *= Dc
    n += XtZ
    n *= 2
    with np.errstate(divide="ignore", invalid="ignore"):
        g *= 2  # 2 g_ip / ip - g_n4 / n4 - 2 X / n2, left to right
        g /= ip[..., None, None]
        n /= n4[..., None, None]
        g -= n
        np.multiply(X, 2, out=n)
        n /= n2[..., None, None]
        g -= n
    return g


def projected_ascent(X0, D, sigma, iters: int, step0: float = 0.1, tol: float = 0.0, window: int = 0,
                     stats: dict | None = None):
    """Projected gradient ascent of log P_D on the orbit of sigma, one trial step per iteration:
    accepted (step x1.5) when it raises P, else rejected (step x0.5). Batched over starts (and
    heads: D and sigma are per start, (n, d)); every start runs independently of the others.
    Returns (best X, best P); P never falls below the start's (log P is non-decreasing).

    Stopping rule (per start; a stopped start takes no more steps and keeps its iterate):
      - converged: after t >= window steps, log P(t) - log P(t - window) < tol
        (log P gained less than ``tol`` over the last ``window`` steps; tol = 0 or window = 0
        turns it off, as log P never decreases);
      - the step fell below 1e-12 (every trial step rejected for ~40 steps);
      - the cap: ``iters`` steps.
    A stopped start's trajectory is a prefix of the fixed-step one, so Cap_hat can only be lower
    than the ``iters``-step search by what the remaining steps would have gained.

    ``stats`` (a dict, optional) receives ``svd`` (retractions computed, one d x d SVD each) and
    ``steps`` (per start, steps taken); with a list under ``trace``, log P of every start at the
    start and after every step is appended to it (measurements: bench/capacity_convergence.py);
    a callable under ``progress`` is called as progress(step, iters, starts still climbing, starts)
    after every tenth of ``iters`` (a long search's progress line).

    Per step and start the unavoidable work is one d x d SVD (the retraction) plus, on the
    trial point, Z = XDX (one product) and, where accepted, the gradient's four products
    (X X^T and X^T X as symmetric products, Z X^T, X^T Z); XDX of the trial point is computed
    once and reused by its gradient."""
    X = np.array(X0, dtype=np.float64, copy=True)
    D = np.ascontiguousarray(D, dtype=np.float64)
    sigma = np.ascontiguousarray(sigma, dtype=np.float64)
    f, g = logP_and_grad(X, D)
    f = np.where(np.isfinite(f), f, -np.inf)
    n = X.shape[0]
    eta = np.full(n, step0)
    stop = _Stopping(f, tol, window)
    done = np.zeros(n, bool)
    steps = np.zeros(n, np.int64)
    n_svd = 0
    trace = stats.get("trace") if stats is not None else None
    progress = stats.get("progress") if stats is not None else None
    every = max(1, iters // 10)
    if trace is not None:
        trace.append(f.copy())
    for t in range(1, iters + 1):
        active = (eta > 1e-12) & ~done
        if not active.any():
            break
        if progress is not None and t > 1 and (t - 1) % every == 0:
            progress(t - 1, iters, int(active.sum()), n)
        idx = np.flatnonzero(active)  # stopped starts take no more steps (their state is final)
        Xa, ga, ea = X[idx], g[idx], eta[idx]
        gn = np.sqrt(fro2(ga))
        xn = np.sqrt(fro2(Xa))
        with np.errstate(divide="ignore", invalid="ignore"):
            h = np.where((gn > 0)[:, None, None], ga * (ea * xn / gn)[:, None, None], 0.0)
        Da = D[idx]
        Xn = retract(Xa + h, sigma[idx])
        n_svd += idx.size
        steps[idx] += 1
        fn, Z, ip, n4, n2 = _logP_Z(Xn, Da)
        oka = np.isfinite(fn) & (fn > f[idx])
        if oka.any():
            acc = idx[oka]
            Xo = Xn[oka]
            X[acc] = Xo
            f[acc] = fn[oka]
            g[acc] = _grad_from(Xo, Da[oka], Z[oka], ip[oka], n4[oka], n2[oka])
        eta[idx] = np.where(oka, ea * 1.5, ea * 0.5)
        if trace is not None:
            trace.append(f.copy())
        done = stop.update(t, f, done)
    return _finished(X, f, stats, n_svd, steps)


def _finished(X, f, stats, n_svd: int, steps):
    """An ascent's end: the iterates and their P (f is log P), its SVD count and steps in ``stats``."""
    if stats is not None:
        stats["svd"] = stats.get("svd", 0) + n_svd
        stats["steps"] = steps
    return X, np.exp(f)


def orbit_frame(X):
    """The singular frame (U, W^T) of X = U diag(sigma) W^T (batched): the tangent space's basis."""
    U, _, Wt = np.linalg.svd(X)
    return U, Wt


def sigma_ties(sigma):
    """Where the orbit has fewer tangent directions, or None when no start has such a pair:
    (tie, dead), (..., d, d) masks of the pairs i != j with sigma_i = sigma_j (to 1e-12 of
    sigma_max; no symmetric direction) and of those with sigma_i = sigma_j = 0 (no direction)."""
    tol = 1e-12 * sigma.max(-1)[..., None, None]
    tie = np.abs(sigma[..., :, None] - sigma[..., None, :]) <= tol
    d = sigma.shape[-1]
    tie[..., np.arange(d), np.arange(d)] = False
    if not tie.any():
        return None
    zero = sigma <= tol[..., 0]
    return tie, tie & zero[..., :, None] & zero[..., None, :]


def orbit_tangent(G, U, Wt, tie=None):
    """The component of G tangent to the orbit {U' diag(sigma) W'^T} at X = U diag(sigma) W^T.

    Tangent vectors are U (A diag(sigma) - diag(sigma) B) W^T with A, B skew; in the frame
    (G~ = U^T G W) their (i, j), (j, i) entries span R^2 when sigma_i != sigma_j, the
    antisymmetric direction when sigma_i = sigma_j != 0, none when both are 0, and the diagonal
    is never reached. So the projection zeroes G~'s diagonal and, on the pairs ``tie`` marks
    (sigma_ties), its symmetric part, or all of it where both singular values are 0."""
    if tie is None:  # G minus its normal part sum_i (u_i^T G w_i) u_i w_i^T: two products, not four
        GW = G @ mT(Wt)
        c = np.einsum("...ki,...ki->...i", U, GW)
        N = np.multiply(U, c[..., None, :], out=GW) @ Wt  # GW's memory reused for U diag(c)
        return np.subtract(G, N, out=N)
    Gt = mT(U) @ G @ mT(Wt)
    d = Gt.shape[-1]
    Gt[..., np.arange(d), np.arange(d)] = 0.0
    tied, dead = tie
    Gt = np.where(dead, 0.0, Gt - np.where(tied, 0.5 * (Gt + mT(Gt)), 0.0))
    return U @ Gt @ Wt


def _ties_of(tie, idx):
    return None if tie is None else (tie[0][idx], tie[1][idx])


class _Stopping:
    """The convergence rule both ascents share: a start is done once log P gained less than
    ``tol`` over its last ``window`` steps (off when tol = 0 or window = 0)."""

    def __init__(self, f, tol: float, window: int):
        self.window = int(window)
        self.on = tol > 0 and self.window > 0
        self.tol = tol
        self.hist = np.empty((self.window + 1, f.shape[0])) if self.on else None  # ring of log P
        if self.on:
            self.hist[0] = f

    def update(self, t: int, f, done):
        if self.on:
            self.hist[t % (self.window + 1)] = f
            if t >= self.window:
                with np.errstate(invalid="ignore"):
                    gain = f - self.hist[(t - self.window) % (self.window + 1)]
                done |= np.isfinite(gain) & (gain < self.tol)
        return done


LBFGS_MEMORY = 8  # stored (s, y) pairs per start


def lbfgs_ascent(X0, D, sigma, iters: int, step0: float = 0.1, tol: float = 0.0, window: int = 0,
                 memory: int = LBFGS_MEMORY, stats: dict | None = None):
    """Quasi-Newton projected ascent of log P_D on the orbit of sigma, batched over starts.

    The same problem, retraction and stopping rule as projected_ascent; only the direction and
    step differ: the direction is L-BFGS's (the last ``memory`` steps' pairs s = X_k+1 - X_k,
    y = grad_k - grad_k+1 of the Riemannian gradient, i.e. the Euclidean gradient's component
    tangent to the orbit, orbit_tangent), not projected onto the tangent space again (its normal
    part only moves sigma, which the retraction restores); the step is
    backtracking (Armijo, c = 1e-4, halving from 1; the first step and any step after a lost
    ascent direction has length ``step0`` x ||X||, as projected_ascent's first). A trial point is
    the exact SVD retraction of X + step x direction, and a step is taken only where it raises
    log P (never decreasing, as projected_ascent). A start whose 30 halvings all fail is stopped.

    ``stats`` as projected_ascent's (svd counts the frames of the starts and every trial point's
    retraction; steps counts iterations, each one accepted step or a stop)."""
    X = np.array(X0, dtype=np.float64, copy=True)
    D = np.ascontiguousarray(D, dtype=np.float64)
    sigma = np.ascontiguousarray(sigma, dtype=np.float64)
    n, d, _ = X.shape
    U, Wt = orbit_frame(X)
    tie = sigma_ties(sigma)
    f, g = logP_and_grad(X, D)
    f = np.where(np.isfinite(f), f, -np.inf)
    gr = orbit_tangent(g, U, Wt, tie)
    S = np.zeros((memory, n, d, d))
    Y = np.zeros((memory, n, d, d))
    rho = np.zeros((memory, n))  # 1 / <s, y>; 0 marks an empty or unusable pair
    slot = 0
    xn = np.sqrt(fro2(X))
    stop = _Stopping(f, tol, window)
    done = ~np.isfinite(f)
    steps = np.zeros(n, np.int64)
    n_svd = n
    trace = stats.get("trace") if stats is not None else None
    progress = stats.get("progress") if stats is not None else None
    every = max(1, iters // 10)
    if trace is not None:
        trace.append(f.copy())
    for t in range(1, iters + 1):
        act = np.flatnonzero(~done)
        if act.size == 0:
            break
        if progress is not None and t > 1 and (t - 1) % every == 0:
            progress(t - 1, iters, int(act.size), n)
        full = act.size == n
        sel = slice(None) if full else act  # a view of the memory while every start climbs
        ga = gr if full else gr[act]  # the active starts' gradients (read only below)
        # two-loop recursion, newest pair first (a start's empty pairs have rho = 0: no effect)
        q = ga.copy()
        tmp = np.empty_like(q)  # each term of the recursion, before it is added (no array per term)
        order = [(slot - 1 - i) % memory for i in range(memory)]
        alpha_j = {}
        for j in order:
            Sj, Yj = S[j][sel], Y[j][sel]
            alpha_j[j] = rho[j, act] * inner(Sj, q)
            q -= np.multiply(alpha_j[j][:, None, None], Yj, out=tmp)
        newest = (slot - 1) % memory
        r_new = rho[newest, act]
        yy = fro2(Y[newest][sel])
        gn = np.sqrt(fro2(ga))
        with np.errstate(divide="ignore", invalid="ignore"):
            first_step = step0 * xn[act] / gn
            gamma = np.where((r_new > 0) & (yy > 0), 1.0 / (r_new * yy), first_step)
        q *= gamma[:, None, None]
        for j in reversed(order):
            beta = rho[j, act] * inner(Y[j][sel], q)
            q += np.multiply((alpha_j[j] - beta)[:, None, None], S[j][sel], out=tmp)
        p = q  # its normal part only moves sigma, which the retraction restores (not projected: 4 products saved)
        slope = inner(ga, p)
        lost = ~(slope > 0)
        if lost.any():  # not an ascent direction: the gradient at projected_ascent's first length, memory dropped
            p[lost] = ga[lost] * first_step[lost][:, None, None]
            slope[lost] = inner(ga[lost], p[lost])
            rho[:, act[lost]] = 0.0
        step = np.ones(act.size)
        pending = np.isfinite(slope) & (slope > 0)
        moved = np.zeros(act.size, bool)
        Xn = X[act]
        Un, Wn, fn = U[act], Wt[act], f[act]
        Gn = np.empty_like(Xn)  # the Euclidean gradient at the accepted trial point
        for _ in range(30):
            ii = np.flatnonzero(pending)
            if ii.size == 0:
                break
            whole = full and ii.size == n  # every start's trial point: the arrays themselves, not copies
            Ut, _, Wtt = np.linalg.svd((X if whole else X[act[ii]]) + step[ii, None, None] * (p if whole else p[ii]))
            Xt = (Ut * sigma[act[ii]][:, None, :]) @ Wtt
            n_svd += ii.size
            Dt = D[act[ii]]
            ft, Z, ip, n4, n2 = _logP_Z(Xt, Dt)
            f0 = f[act[ii]]
            ok = np.isfinite(ft) & (ft > f0) & (ft >= f0 + 1e-4 * step[ii] * slope[ii])
            k = ii[ok]
            Xn[k], Un[k], Wn[k], fn[k] = Xt[ok], Ut[ok], Wtt[ok], ft[ok]
            if ok.any():
                Gn[k] = _grad_from(Xt[ok], Dt[ok], Z[ok], ip[ok], n4[ok], n2[ok])
            pending[k] = False
            moved[k] = True
            step[ii[~ok]] *= 0.5
        steps[act] += 1
        done[act[~moved]] = True  # no ascent along the direction: stopped where it is
        rho[slot] = 0.0
        mv = act[moved]
        if mv.size == n:  # every start moved: the trial arrays become the state (no copies)
            X_old, gr_old = X, gr
            X, U, Wt, f = Xn, Un, Wn, fn
            gr = orbit_tangent(Gn, U, Wt, tie)
            s_k = X - X_old
            y_k = gr_old - gr
        elif mv.size:
            X_old, gr_old = X[mv], gr[mv]
            X[mv], U[mv], Wt[mv], f[mv] = Xn[moved], Un[moved], Wn[moved], fn[moved]
            gr[mv] = orbit_tangent(Gn[moved], U[mv], Wt[mv], _ties_of(tie, mv))
            s_k = X[mv] - X_old
            y_k = gr_old - gr[mv]
        if mv.size:
            sy = inner(s_k, y_k)
            usable = sy > 1e-12 * np.sqrt(fro2(s_k) * fro2(y_k))  # curvature condition of -log P
            S[slot, mv], Y[slot, mv] = s_k, y_k
            rho[slot, mv] = np.where(usable, 1.0 / np.where(usable, sy, 1.0), 0.0)
        slot = (slot + 1) % memory
        if trace is not None:
            trace.append(f.copy())
        done = stop.update(t, f, done)
    return _finished(X, f, stats, n_svd, steps)


ASCENTS = {"gradient": projected_ascent, "lbfgs": lbfgs_ascent}


def capacity_starts(K, model: str, layer: int, head: int, restarts: int) -> np.ndarray:
    """Deterministic restarts: the trained K, then Haar-random orientations U diag(sigma) W^T."""
    d = K.shape[-1]
    sigma = np.linalg.svd(K, compute_uv=False)
    starts = [K]
    for r in range(1, restarts):
        rng = rng_for(model, layer, head, r, CAPACITY)
        starts.append((haar_orthogonal(rng, d) * sigma[None, :]) @ haar_orthogonal(rng, d))
    return np.stack(starts), sigma


def feasible_capacity_batch(Ks, Ds, model: str, layer: int, heads, restarts: int, iters: int, tol: float = 0.0,
                            window: int = 0, stats: dict | None = None, method: str = "gradient") -> list[dict]:
    """Cap_hat of several heads of one layer in one batched ascent (every head's restarts
    stacked; the ascent ``method``, "gradient" (projected_ascent) or "lbfgs" (lbfgs_ascent), with
    their stopping rule ``tol``/``window`` and ``iters`` the cap); per head the same dict as
    feasible_capacity plus ``steps`` (the most steps any of its starts took)."""
    Ks = np.asarray(Ks, dtype=np.float64)
    Ds = np.asarray(Ds, dtype=np.float64)
    if len(heads) == 0:
        return []
    starts, sigmas = zip(*(capacity_starts(K, model, layer, int(h), restarts) for K, h in zip(Ks, heads)))
    n = restarts
    X0 = np.concatenate(starts)
    Dn = np.repeat(Ds, n, axis=0)
    sig = np.repeat(np.stack(sigmas), n, axis=0)
    st = {k: stats[k] for k in ("trace", "progress") if stats is not None and k in stats}
    if method not in ASCENTS:
        raise ValueError(f"capacity method must be one of {sorted(ASCENTS)}, not {method!r}")
    X, P = ASCENTS[method](X0, Dn, sig, iters, tol=tol, window=window, stats=st)
    if stats is not None:
        stats["svd"] = stats.get("svd", 0) + st["svd"]
    P_start = C.P_of(Ks, Ds)
    out = []
    for i in range(len(heads)):
        Pi, Xi = P[i * n:(i + 1) * n], X[i * n:(i + 1) * n]
        best = int(np.nanargmax(Pi))
        out.append({
            "cap": float(Pi[best]),
            "cap_trained_start": float(Pi[0]),
            "cap_random": float(np.max(Pi[1:])) if n > 1 else float("nan"),
            "sv_relerr": float(sv_relerr(Ks[i], Xi[best][None])[0]),
            "P_start": float(P_start[i]),
            "steps": int(st["steps"][i * n:(i + 1) * n].max()),
        })
    return out


def feasible_capacity(K, D, model: str, layer: int, head: int, restarts: int, iters: int, tol: float = 0.0,
                      window: int = 0):
    """Cap_hat: lower bound of max P_D(U diag(sigma) W^T) (sigma = singular values of K, D fixed).

    Returns dict: cap, cap_trained_start, cap_random (best random start only; NaN without
    one), sv_relerr (of the best iterate), P_start (P_D(K))."""
    return feasible_capacity_batch(np.asarray(K)[None], np.asarray(D)[None], model, layer, [head], restarts, iters,
                                   tol, window)[0]


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


# ================================================================ one layer: capacity


def capacity_layer(f, f_final, model: str, final_model: str, layer: int, params: dict, stats: dict | None = None):
    """Cap_hat, R and E for the heads the final checkpoint selects (strong, layer-matched
    ordinary, hash sample), computed on this checkpoint's factors ``f``. ``stats`` (optional)
    receives the search's SVD count (projected_ascent)."""
    rank_rtol = params.get("rank_rtol", 1e-6)
    threshold = float(params["strong_threshold"])
    n_perm = int(params.get("scramble_draws", 8))
    restarts = int(params["restarts"])
    iters = int(params["iters"])
    tol = float(params.get("tol", 0.0))
    window = int(params.get("window", 0))
    n_sample = int(params["sample_per_layer"])
    sv_rtol = float(params.get("sv_rtol", 1e-12))

    geo = LayerGrams(f, rank_rtol)  # the closure first (its own/wrong M blocks), then M_full for the coordinates
    base = C.closure_layer(f, rank_rtol=rank_rtol, grams=geo)
    if f_final is f:
        base_f, geo_f = base, geo
    else:
        geo_f = LayerGrams(f_final, rank_rtol)
        base_f = C.closure_layer(f_final, rank_rtol=rank_rtol, grams=geo_f)
        if (geo_f.H, geo_f.G, geo_f.d, geo_f.D) != (geo.H, geo.G, geo.d, geo.D):
            raise ValueError(f"{model} layer {layer} has another shape than its lineage's final checkpoint {final_model}")
    valid_f = valid_heads(base_f, geo_f)
    strong, matched, sample = capacity_selection(base_f["P"], valid_f, threshold, final_model, layer, n_sample)
    sel = np.flatnonzero(strong | matched | sample)
    valid = valid_heads(base, geo)
    n = sel.size
    out = {k: np.full(n, np.nan) for k in ("P", "R", "cap", "cap_trained_start", "cap_random", "E", "E_random",
                                           "sv_relerr")}
    flags = np.array(["undefined_here" if not valid[h] else "" for h in sel], dtype=object)
    rows = np.flatnonzero(flags == "")
    hs = sel[rows]
    Dh, Kh = coords(geo, hs, geo.kv_group[hs])
    for r, h, K1, D1 in zip(rows, hs, Kh, Dh):
        pp, _, _ = scramble_draws(K1, D1, model, layer, int(h), n_perm, 0)
        out["R"][r] = np.median(pp) if pp.size else np.nan
    # every selected head's restarts in one batched ascent (each start runs independently)
    caps = feasible_capacity_batch(Kh, Dh, model, layer, hs, restarts, iters, tol, window, stats,
                                   params.get("method", "gradient"))
    for r, h, cap in zip(rows, hs, caps):
        if not cap["sv_relerr"] < sv_rtol:
            raise AssertionError(f"capacity iterate lost the singular values of K (head {h}): {cap['sv_relerr']:.3e}")
        out["P"][r] = cap["P_start"]
        for k in ("cap", "cap_trained_start", "cap_random", "sv_relerr"):
            out[k][r] = cap[k]
    out["E"] = attainment(out["P"], out["R"], out["cap"])
    # E from the random starts only (Cap_hat above includes the trained K's start, so E <= 1 there)
    out["E_random"] = attainment(out["P"], out["R"], out["cap_random"])
    return {
        "head": sel.astype(np.int64),
        "kv_group": geo.kv_group[sel].astype(np.int64),
        "final_model": np.array([final_model] * n, dtype=object),
        "P_final": np.asarray(base_f["P"], dtype=float)[sel],
        "is_strong": strong[sel], "is_matched": matched[sel], "is_sample": sample[sel],
        **out,
        "restarts": np.full(n, restarts, dtype=np.int64), "iters": np.full(n, iters, dtype=np.int64),
        "flags": flags,
    }
