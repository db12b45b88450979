"""The three Grams of one head written out by hand (A = O^T O, B = V^T V, M = V^T O), for tests
that feed closure formulas single-head factors without a LayerFactors."""

import numpy as np


def grams(O, V):
    """(A, B, M) for O, V of shape (..., d_model, d_head)."""
    Ot, Vt = np.swapaxes(O, -1, -2), np.swapaxes(V, -1, -2)
    return Ot @ O, Vt @ V, Vt @ O


def closure_score(O, V):
    """P(T) for T = O V^T (broadcasting over heads): the closure stage's closure_terms and
    closure_from_terms on the Grams written out above."""
    from headgeom.methods.closure import closure_from_terms, closure_terms

    return closure_from_terms(*closure_terms(*grams(O, V)))[0]


def sibling_law(O_i, O_j, V, alpha_j):
    """F_ij, beta_ij, rho_ij for heads i, j sharing V (docs/methods.md §1.9): the stage's
    product_law_general with V_a = V_b = V, i.e. T_i T_j = O_i M_j V^T with M_j = V^T O_j."""
    from headgeom.methods.closure import product_law_general

    A_i, B, _ = grams(O_i, V)
    return product_law_general(A_i, B, B, B, np.swapaxes(V, -1, -2) @ O_j, alpha_j)


def toy_factors(H=4, G=2, D=24, d=6, seed=0):
    """A random grouped-query layer (H query heads over G KV groups), RMSNorm with unit gain."""
    from headgeom.core.factors import LayerFactors

    r = np.random.default_rng(seed)
    return LayerFactors(W_Q=r.standard_normal((H, d, D)), W_K=r.standard_normal((G, d, D)),
                        W_V=r.standard_normal((G, d, D)), W_O=r.standard_normal((H, D, d)),
                        kv_group=np.arange(H) // (H // G), norm_gain=np.ones(D), norm_type="rmsnorm")
