"""Shared by the paper 1 modules: seed purposes, the flags that exclude a head, small matrix
helpers, and LayerGeometry (every Gram of one layer)."""

from __future__ import annotations

import numpy as np

from headgeom.methods import closure as C
from headgeom.methods.grams import LayerGrams


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
    """All Grams of one layer: A (H,d,d), B (G,d,d), M (H,G,d,d) = V_g^T O_h, C (G,G,d,d);
    a view of the layer's LayerGrams (headgeom.methods.grams), shared with closure_layer."""

    def __init__(self, f, rank_rtol: float = 1e-6, grams=None):
        g = LayerGrams(f, rank_rtol) if grams is None else grams
        self.grams = g
        self.H, self.G, self.d, self.d_model = g.H, g.G, g.d, g.D
        self.kv_group = g.kv_group
        self.O, self.Vg = g.O, np.swapaxes(g.W_V, -1, -2)  # Vg: (G, D, d)
        self.A, self.M, self.C, self.B = g.A, g.M_full, g.C, g.B
        self.rank_O, self.rank_V = g.rank_O, g.rank_V

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
