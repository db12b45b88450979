"""Orientation scrambles (signed permutations) and the Haar audit of the transport core K;
singular values of K asserted unchanged."""

from __future__ import annotations

import numpy as np

from headgeom.methods import closure as C
from headgeom.core.seeds import rng_for
from headgeom.methods.paper1.common import HAAR, SCRAMBLE


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
