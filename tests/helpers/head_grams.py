"""The three Grams of one head written out by hand (A = O^T O, B = V^T V, M = V^T O), for tests
that feed closure formulas single-head factors without a LayerFactors."""

import numpy as np


def grams(O, V):
    """(A, B, M) for O, V of shape (..., d_model, d_head)."""
    Ot, Vt = np.swapaxes(O, -1, -2), np.swapaxes(V, -1, -2)
    return Ot @ O, Vt @ V, Vt @ O
