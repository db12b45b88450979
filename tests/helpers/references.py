"""Reference implementations the tests compare the package against: each computes the same
quantity as a package function by another route (explicit per-token products, the weighted-metric
form of closure, whole projector packings), so a test of the package never calls the code path
under test twice."""

from __future__ import annotations

import numpy as np

from headgeom.methods.linalg import mT, tr_prod
from headgeom.methods.overlap import rho_of_pk
from headgeom.methods.projectors import FLOAT32_RHO_BOUND, pack_projectors
from headgeom.methods.read_paths import norm_stats, write_factors

# ---------------------------------------------------------------- closure (docs/methods.md §1.1)


def closure_explicit(O: np.ndarray, V: np.ndarray):
    """P, alpha, g_T, ||T|| from the explicit D x D operator T = O V^T."""
    T = O @ V.T
    T2 = T @ T
    ip = float(np.sum(T2 * T))
    nT2, nT4 = float(np.sum(T * T)), float(np.sum(T2 * T2))
    return ip**2 / (nT4 * nT2), ip / nT2, np.sqrt(nT4 / nT2), np.sqrt(nT2)


def weighted_inner(X, Y, A, B):
    """<X,Y>_{A,B} = tr(X^T A Y B) (the weighted-metric form, docs/methods.md §1.1)."""
    return tr_prod(mT(X) @ A, Y @ B)


def closure_weighted_form(A, B, M):
    """P and alpha from the weighted-metric form; must agree with closure.closure_from_terms."""
    eye = np.broadcast_to(np.eye(A.shape[-1]), A.shape)
    mi = weighted_inner(M, eye, A, B)
    mm = weighted_inner(M, M, A, B)
    ii = weighted_inner(eye, eye, A, B)
    return mi**2 / (mm * ii), mi / ii


# ---------------------------------------------------------------- read paths (docs/methods.md §3.3)


def jvp(x: np.ndarray, u: np.ndarray, gain, norm_type: str, eps: float, eps_exact: bool = True):
    """(linear, normalization) parts of diag(gamma) J(x) u for single vectors (the read-path
    response of headgeom.methods.read_paths' docstring, written per vector on its norm_stats)."""
    x = np.asarray(x, np.float64)[None]
    u = np.asarray(u, np.float64)
    sigma, xhat, kappa = norm_stats(x, norm_type, eps, eps_exact)
    pu = u - u.mean() if norm_type == "layernorm" else u
    g = np.ones_like(u) if gain is None else np.asarray(gain, np.float64)
    lin = g * pu / sigma[0]
    nrm = -g * kappa[0] * xhat[0] * (xhat[0] @ pu) / sigma[0]
    return lin, nrm


def pair_terms_direct(O_j, z, R_h, x, norm_type, eps, eps_exact=True):
    """Per-token linear and normalization terms for one (writer, reader) pair, materialized
    token by token (independent of read_paths' trace formulas)."""
    lin, nrm = [], []
    for t in range(z.shape[0]):
        u = O_j @ z[t]
        sigma, xhat, kappa = norm_stats(x[t][None], norm_type, eps, eps_exact)
        pu = u - u.mean() if norm_type == "layernorm" else u
        lin.append(R_h.T @ pu / sigma[0])
        nrm.append(-kappa[0] * (R_h.T @ xhat[0]) * (xhat[0] @ pu) / sigma[0])
    return np.array(lin), np.array(nrm)


def head_writes(W_O: np.ndarray, z: np.ndarray, arrays: dict, meta: dict, write_point: str = "residual"):
    """(N, H, D) every head's write at every token, materialized (read_paths keeps them factored)."""
    O, zw = write_factors(W_O, z, arrays, meta, write_point)
    return np.einsum("hDd,thd->thD", O, zw, optimize=True)


# ---------------------------------------------------------------- projector packings (docs/methods.md §2)


def packed_projectors(bases: np.ndarray, twice_upper: bool = False) -> np.ndarray:
    """(n, D, d) orthonormal bases -> (n, packed_length(D)): every slab of each head's projector
    (``pk.pack_projectors``), in the bases' dtype; the jobs pack slab by slab (``pk.projector_gram``)."""
    return pack_projectors(bases, twice_upper)


def projector_pk(Pa2: np.ndarray, Pb: np.ndarray) -> np.ndarray:
    """(na, nb) PK = tr(P_a P_b) from ``packed_projectors``: a packed with ``twice_upper``,
    b without. One GEMM over the whole packed length."""
    return Pa2 @ Pb.T


def cross_rho_projectors(Pw2, rw, Pr, rr) -> np.ndarray:
    """rho of every writer with every reader head, (nw, nr), from whole packed projectors (writers
    ``twice_upper``); NaN where a space is zero or non-finite (rank <= 0)."""
    return rho_of_pk(projector_pk(Pw2, Pr), rw, rr)


def float32_pk_bound(dim: int) -> float:
    """The stated bound on |PK_float32 - PK_float64| of a pair whose smaller space has ``dim``: the
    bound on rho (methods.projectors.FLOAT32_RHO_BOUND) times the dimension rho divides by."""
    return FLOAT32_RHO_BOUND * dim
