"""The capacity search as it was before batching (one projected ascent per head, the trial
point's log P computed apart from its gradient): the reference for tests/unit/methods/test_capacity_batch.py
and the `capacity` stage of bench/run.py."""

import numpy as np

from headgeom.methods import closure as C
from headgeom.methods import paper1 as P1
from headgeom.methods.grams import LayerGrams
from headgeom.methods.linalg import fro2
from headgeom.methods.paper1.capacity import capacity_starts
from headgeom.methods.paper1.common import coords, valid_heads
from headgeom.methods.paper1.scramble import scramble_draws, sv_relerr



def ref_projected_ascent(X0, D, sigma, iters, step0=0.1):
    X = np.array(X0, dtype=np.float64, copy=True)
    f, g = P1.logP_and_grad(X, D)
    f = np.where(np.isfinite(f), f, -np.inf)
    eta = np.full(X.shape[0], step0)
    for _ in range(iters):
        active = eta > 1e-12
        if not active.any():
            break
        gn = np.sqrt(fro2(g))
        xn = np.sqrt(fro2(X))
        with np.errstate(divide="ignore", invalid="ignore"):
            h = np.where((gn > 0)[:, None, None], g * (eta * xn / gn)[:, None, None], 0.0)
        Xn = P1.retract(X + h, sigma)
        fn = P1.logP(Xn, D)
        ok = active & np.isfinite(fn) & (fn > f)
        if ok.any():
            X[ok] = Xn[ok]
            fo, go = P1.logP_and_grad(X[ok], D[ok])
            f[ok], g[ok] = fo, go
        eta = np.where(ok, eta * 1.5, eta * 0.5)
    return X, np.exp(f)


def ref_feasible_capacity(K, D, model, layer, head, restarts, iters):
    d = K.shape[-1]
    # the restarts are the package's (the deterministic starts are not what this reference checks)
    starts, sigma = capacity_starts(K, model, layer, head, restarts)
    n = starts.shape[0]
    X, P = ref_projected_ascent(starts, np.ascontiguousarray(np.broadcast_to(D, (n, d))),
                                 np.ascontiguousarray(np.broadcast_to(sigma, (n, d))), iters)
    best = int(np.nanargmax(P))
    return {"cap": float(P[best]), "cap_trained_start": float(P[0]),
            "cap_random": float(np.max(P[1:])) if n > 1 else float("nan"),
            "sv_relerr": float(sv_relerr(K, X[best][None])[0]), "P_start": float(C.P_of(K, D))}


def ref_capacity_layer(f, model, layer, prm):
    """The per-head loop of capacity_layer before batching (one ascent per head)."""
    base = C.closure_layer(f, rank_rtol=prm["rank_rtol"])
    geo = LayerGrams(f, prm["rank_rtol"])
    valid = valid_heads(base, geo)
    strong, matched, sample = P1.capacity_selection(base["P"], valid, prm["strong_threshold"], model, layer,
                                                    prm["sample_per_layer"])
    sel = np.flatnonzero(strong | matched | sample)
    out = {k: np.full(sel.size, np.nan) for k in ("P", "R", "cap", "cap_trained_start", "cap_random", "sv_relerr")}
    for r, h in enumerate(sel):
        if not valid[h]:
            continue
        Dh, Kh = coords(geo, [h], [geo.kv_group[h]])
        pp, _, _ = scramble_draws(Kh[0], Dh[0], model, layer, int(h), prm["scramble_draws"], 0)
        cap = ref_feasible_capacity(Kh[0], Dh[0], model, layer, int(h), prm["restarts"], prm["iters"])
        out["P"][r], out["R"][r] = cap["P_start"], np.median(pp)
        for k in ("cap", "cap_trained_start", "cap_random", "sv_relerr"):
            out[k][r] = cap[k]
    return sel, out
