"""The three Grams of one head written out by hand (A = O^T O, B = V^T V, M = V^T O), for tests
that feed closure formulas single-head factors without a LayerFactors."""

import numpy as np


def grams(O, V):
    """(A, B, M) for O, V of shape (..., d_model, d_head)."""
    Ot, Vt = np.swapaxes(O, -1, -2), np.swapaxes(V, -1, -2)
    return Ot @ O, Vt @ V, Vt @ O


def toy_factors(H=4, G=2, D=24, d=6, seed=0):
    """A random grouped-query layer (H query heads over G KV groups), RMSNorm with unit gain."""
    from headgeom.core.factors import LayerFactors

    r = np.random.default_rng(seed)
    return LayerFactors(W_Q=r.standard_normal((H, d, D)), W_K=r.standard_normal((G, d, D)),
                        W_V=r.standard_normal((G, d, D)), W_O=r.standard_normal((H, D, d)),
                        kv_group=np.arange(H) // (H // G), norm_gain=np.ones(D), norm_type="rmsnorm")
