"""LayerGrams (headgeom.methods.grams): every Gram against explicit products of the factors,
the two routes to M agreeing, ranks against SVDs, and closure_layer and the paper 1 suite sharing it."""

import numpy as np
import pytest

from headgeom.core.factors import LayerFactors, gqa_map
from headgeom.methods import closure as C
from headgeom.methods.grams import LayerGrams


def layer(D=48, d=6, H=6, G=3, seed=0, perm=None):
    rng = np.random.default_rng(seed)
    kv = gqa_map(H, G) if perm is None else np.asarray(perm)
    return LayerFactors(W_Q=rng.standard_normal((H, d, D)), W_K=rng.standard_normal((G, d, D)),
                        W_V=rng.standard_normal((G, d, D)), W_O=rng.standard_normal((H, D, d)),
                        kv_group=kv, norm_gain=None, norm_type="none")


@pytest.mark.parametrize("H,G,perm", [(6, 3, None), (4, 4, None), (5, 1, None), (6, 2, [1, 0, 1, 0, 0, 1])])
def test_grams_equal_explicit_products(H, G, perm):
    f = layer(H=H, G=G, perm=perm)
    g = LayerGrams(f)
    kv = np.asarray(f.kv_group)
    for h in range(H):
        O, V = f.W_O[h], f.W_V[kv[h]].T  # O_h, V_g(h): D x d
        np.testing.assert_allclose(g.A[h], sum(np.outer(O[k], O[k]) for k in range(O.shape[0])), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(g.M_own[h], np.einsum("ki,kj->ij", V, O), rtol=1e-12, atol=1e-12)
        if G > 1:
            Vw = f.W_V[(kv[h] + 1) % G].T
            np.testing.assert_allclose(g.M_wrong[h], np.einsum("ki,kj->ij", Vw, O), rtol=1e-12, atol=1e-12)
        else:
            assert g.M_wrong is None
    for a in range(G):
        np.testing.assert_allclose(g.B[a], np.einsum("ik,jk->ij", f.W_V[a], f.W_V[a]), rtol=1e-12, atol=1e-12)
        for b in range(G):
            np.testing.assert_allclose(g.C[a, b], np.einsum("ik,jk->ij", f.W_V[a], f.W_V[b]), rtol=1e-12, atol=1e-12)
            for h in range(H):
                np.testing.assert_allclose(g.M_full[h, b], np.einsum("ik,kj->ij", f.W_V[b], f.W_O[h]), rtol=1e-12, atol=1e-12)


def test_pair_route_and_full_route_agree():
    f = layer(D=64, d=8, H=8, G=4, seed=3)
    pair = LayerGrams(f)
    own, wrong = pair.M_own.copy(), pair.M_wrong.copy()
    full = LayerGrams(f)
    full.M_full  # noqa: B018  (computed first: M_own then indexes it)
    h = np.arange(8)
    assert np.array_equal(full.M_own, full.M_full[h, f.kv_group])
    np.testing.assert_allclose(own, full.M_own, rtol=1e-13, atol=0)
    np.testing.assert_allclose(wrong, full.M_wrong, rtol=1e-13, atol=0)
    # M_full computed after the pair route replaces it: one set of bits per block afterwards
    pair.M_full  # noqa: B018
    assert np.array_equal(pair.M_own, pair.M_full[h, f.kv_group])


def test_ranks_and_cond_match_svd():
    f = layer(D=40, d=6, H=4, G=2, seed=5)
    f.W_O[1][:, 0] = f.W_O[1][:, 1] * 2.0  # rank 5
    f.W_V[1][2] = 0.0  # rank 5
    f.W_O[2][0, 0] = np.nan
    g = LayerGrams(f)
    ref_O = [np.linalg.matrix_rank(f.W_O[h], tol=1e-6 * np.linalg.svd(f.W_O[h], compute_uv=False)[0])
             if np.isfinite(f.W_O[h]).all() else -1 for h in range(4)]
    ref_V = [np.linalg.matrix_rank(f.W_V[a], tol=1e-6 * np.linalg.svd(f.W_V[a], compute_uv=False)[0]) for a in range(2)]
    assert g.rank_O.tolist() == ref_O == [6, 5, -1, 6]
    assert g.rank_V.tolist() == ref_V == [6, 5]
    sO, sV = np.linalg.svd(f.W_O[0], compute_uv=False), np.linalg.svd(f.W_V[0], compute_uv=False)
    np.testing.assert_allclose(g.cond(np.array([0]), np.array([0]))[0], sO[0] / sO[-1] * sV[0] / sV[-1], rtol=1e-8)


def test_closure_reads_the_full_M_when_it_is_computed_first():
    f = layer(D=64, d=8, H=8, G=4, seed=7)
    geo = LayerGrams(f)
    M = geo.M_full  # as heads_layer does
    shared = C.closure_layer(f, grams=geo)
    alone = C.closure_layer(f)
    assert geo.__dict__["M_full"] is M
    for k in ("P", "alpha", "g_T", "P_wrong_v", "rank_O", "rank_V", "G_overlap", "P_latent"):
        np.testing.assert_allclose(shared[k], alone[k], rtol=1e-12, atol=0)
    # the shared M blocks are exactly the geometry's
    assert np.array_equal(geo.M_own, M[np.arange(8), f.kv_group])
