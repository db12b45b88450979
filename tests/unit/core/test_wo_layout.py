"""W_O kept as the checkpoint stores it: LayerFactors.W_O is the heads of one C-ordered (D, H d)
matrix (W_O_stacked), and the products that read many heads at once (LayerGrams' M blocks) are one
wide GEMM over its columns. Checked: the layout and the absence of copies, every M block bit for bit
against a per-head product of contiguous copies (what the per-head route computed) and against
explicit sums, and the weighted cross-layer measure's head norms independent of the layout."""

import numpy as np
import pytest

from headgeom.core.factors import LayerFactors, gqa_map, split_cols
from headgeom.methods.grams import LayerGrams
from headgeom.methods.overlap import cross_pairs, head_sq_norms, orthonormal_bases, reading_matrix


def factors(W_O, G=2, seed=0):
    H, D, d = np.shape(W_O)
    rng = np.random.default_rng(seed)
    return LayerFactors(W_Q=rng.standard_normal((H, d, D)), W_K=rng.standard_normal((G, d, D)),
                        W_V=rng.standard_normal((G, d, D)), W_O=W_O, kv_group=gqa_map(H, G),
                        norm_gain=None, norm_type="none")


def test_w_o_is_the_heads_of_the_stacked_output_projection():
    rng = np.random.default_rng(1)
    H, D, d = 6, 40, 5
    W = rng.standard_normal((D, H * d))  # o_proj.weight: (d_model, heads x d_head)
    heads = split_cols(W, H)
    assert np.shares_memory(heads, W)  # a view: the checkpoint's matrix is not copied
    f = factors(heads)
    assert np.shares_memory(f.W_O, W) and f.W_O_stacked.base is not None
    assert f.W_O_stacked.flags.c_contiguous and f.W_O_stacked.shape == (D, H * d)
    for h in range(H):
        assert np.array_equal(f.W_O[h], W[:, h * d:(h + 1) * d])
        assert np.shares_memory(f.W_O[h], f.W_O_stacked)
    # per-head input (tests, the API): the same values, stacked once
    O = rng.standard_normal((H, D, d))
    g = factors(O)
    assert np.array_equal(g.W_O, O) and not np.shares_memory(g.W_O, O)
    assert np.array_equal(g.W_O_stacked, np.concatenate(list(O), axis=1))
    # float32 weights become float64; no heads stays a valid empty layer
    assert factors(O.astype(np.float32)).W_O.dtype == np.float64
    assert factors(np.zeros((0, D, d))).W_O.shape == (0, D, d)


@pytest.mark.parametrize("H,G,perm", [(8, 2, None), (6, 3, None), (5, 1, None), (6, 2, [1, 0, 1, 0, 0, 1])])
def test_m_blocks_from_the_stacked_product_equal_per_head_products(H, G, perm):
    rng = np.random.default_rng(H + G)
    D, d = 96, 16
    kv = gqa_map(H, G) if perm is None else np.asarray(perm)
    f = LayerFactors(W_Q=rng.standard_normal((H, d, D)), W_K=rng.standard_normal((G, d, D)),
                     W_V=rng.standard_normal((G, d, D)), W_O=rng.standard_normal((H, D, d)),
                     kv_group=kv, norm_gain=None, norm_type="none")
    O = [np.ascontiguousarray(f.W_O[h]) for h in range(H)]  # per-head contiguous copies
    V = [np.ascontiguousarray(f.W_V[g]) for g in range(G)]
    pair, full = LayerGrams(f), LayerGrams(f)
    for h in range(H):
        g = kv[h]
        assert np.array_equal(pair.M_own[h], V[g] @ O[h])  # bit for bit: the same dot products over D
        np.testing.assert_allclose(pair.M_own[h], np.einsum("ik,kj->ij", f.W_V[g], O[h]), rtol=1e-12, atol=1e-12)
        if G > 1:
            assert np.array_equal(pair.M_wrong[h], V[(g + 1) % G] @ O[h])
        for b in range(G):
            assert np.array_equal(full.M_full[h, b], V[b] @ O[h])
        assert np.array_equal(pair.A[h], O[h].T @ O[h])


def test_weighted_measure_does_not_depend_on_the_writers_layout():
    rng = np.random.default_rng(4)
    H, D, d = 5, 64, 8
    f = factors(rng.standard_normal((H, D, d)) * rng.uniform(0.5, 2.0, (H, 1, d)), G=1)
    Xw = f.W_O  # heads of the stacked matrix
    Xc = np.ascontiguousarray(Xw)  # the same values, one C-ordered stack
    assert not Xw.flags.c_contiguous
    assert np.array_equal(head_sq_norms(Xw), np.einsum("wij,wij->w", Xc, Xc))
    np.testing.assert_allclose(head_sq_norms(Xw), [np.sum(Xc[h] ** 2) for h in range(H)], rtol=1e-13)
    Xr = reading_matrix(rng.standard_normal((3, d, D)), None, "none")
    Bw, rw = orthonormal_bases(Xw)
    Br, rr = orthonormal_bases(Xr)
    ref = cross_pairs(Bw, rw, Br, rr, Xw=Xc, Xr=Xr)["weighted"]
    assert np.array_equal(cross_pairs(Bw, rw, Br, rr, Xw=Xw, Xr=Xr)["weighted"], ref)
    assert np.array_equal(cross_pairs(Bw, rw, Br, rr, Xw=Xw, Xr=Xr, nw2=head_sq_norms(Xw))["weighted"], ref)
    assert np.array_equal(cross_pairs(Bw, rw, Br, rr, Xw=Xw, Xr=Xr, nw2=head_sq_norms(Xw),
                                      nr2=head_sq_norms(Xr))["weighted"], ref)
    # the measure itself: D ||R B||^2 / (||R||^2 ||B||^2), R = Xr_j^T, B = Xw_i
    i, j = 2, 1
    want = D * np.sum((Xr[j].T @ Xc[i]) ** 2) / (np.sum(Xr[j] ** 2) * np.sum(Xc[i] ** 2))
    np.testing.assert_allclose(ref.reshape(H, 3)[i, j], want, rtol=1e-12)
