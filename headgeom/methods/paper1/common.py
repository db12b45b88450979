"""Shared by the paper 1 modules: seed purposes, the flags that exclude a head, small matrix
helpers, and LayerGeometry (every Gram of one layer)."""

from __future__ import annotations

import numpy as np

from headgeom.methods import closure as C


SCRAMBLE, HAAR, CAPACITY, MATCHED, SAMPLE, BOOTSTRAP = "scramble", "haar", "capacity", "matched", "sample", "bootstrap"

# Heads whose principal coordinates are defined: closure flags that exclude a head.
EXCLUDING_FLAGS = ("nonfinite", "zero_T", "rank_deficient")


def mT(X):
    return np.swapaxes(X, -1, -2)


def inner(X, Y):
    return np.einsum("...ij,...ij->...", X, Y)


def fro2(X):
    return inner(X, X)


def trace(X):
    return np.einsum("...ii->...", X)


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
        self.A = mT(O) @ O
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


def valid_heads(base: dict, geo: LayerGeometry) -> np.ndarray:
    """Heads with defined principal coordinates (full-rank finite O and V, T and T^2 nonzero)."""
    fl = base["flags"]
    bad = np.array([any(x in str(s).split(",") for x in EXCLUDING_FLAGS) for s in fl], dtype=bool)
    return ~bad & (geo.rank_O == geo.d) & (geo.rank_V[geo.kv_group] == geo.d) & np.isfinite(base["P"])
