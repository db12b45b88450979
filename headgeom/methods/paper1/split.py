"""Perturbation split of the latent closure P_D(K) (docs/methods.md §1.3): c, s, a, b, w2, with the identity
asserted."""

from __future__ import annotations

import numpy as np

from headgeom.methods.linalg import fro2, inner


# ================================================================ perturbation split


def perturbation_split(K, D):
    """Exact split of P_D(K) around the isoclinic core (docs/methods.md §1.3).

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
        nX = np.sqrt(fro2(X))
        nY = np.sqrt(fro2(K))
        x = X / nX[..., None, None]
        ipXY = inner(X, K)
        sig = np.where(ipXY < 0, -1.0, 1.0)
        y = sig[..., None, None] * K / nY[..., None, None]
        s = inner(x, y)
        Fn = F / (c * nX)[..., None, None]
        a = inner(Fn, x)
        ur = y - s[..., None, None] * x
        ur = ur - inner(ur, x)[..., None, None] * x  # re-orthogonalize
        nur = np.sqrt(fro2(ur))
        one_dim = ~(nur > 1e-14)
        u = np.where(one_dim[..., None, None], 0.0, ur / np.where(one_dim, 1.0, nur)[..., None, None])
        t = inner(u, y)
        b = inner(Fn, u)
        w = Fn - a[..., None, None] * x - b[..., None, None] * u
        w2 = fro2(w)
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
