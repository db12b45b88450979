"""docs/methods.md §2: PK, rho, principal angles, folding, reference statistics."""

import numpy as np
import pytest
from scipy.linalg import subspace_angles

from headgeom.methods import overlap
from headgeom.core.factors import LayerFactors

rng = np.random.default_rng(7)


def test_pk_equals_projector_trace_and_angles_match_scipy():
    D, d, n = 30, 5, 4
    X = rng.standard_normal((n, D, d))
    bases, ranks = overlap.orthonormal_bases(X)
    assert ranks.tolist() == [d] * n
    out = overlap.pk_within(bases, ranks)
    assert len(out["pk"]) == n * (n - 1) // 2
    for p, (i, j) in enumerate(zip(out["head_i"], out["head_j"])):
        Pi = X[i] @ np.linalg.pinv(X[i])
        Pj = X[j] @ np.linalg.pinv(X[j])
        assert np.isclose(out["pk"][p], np.trace(Pi @ Pj), rtol=1e-10)
        assert np.isclose(out["rho"][p], np.trace(Pi @ Pj) / d, rtol=1e-10)
        theta1 = np.degrees(subspace_angles(X[i], X[j]).min())
        assert np.isclose(out["min_angle_deg"][p], theta1, atol=1e-8)


def test_tiny_angle_uses_sine_form():
    D, d = 40, 4
    Q = np.linalg.qr(rng.standard_normal((D, D)))[0]
    U = Q[:, :d]
    eps = 1e-9  # radians: arccos of the cosine cannot resolve this
    W = np.c_[np.cos(eps) * Q[:, 0] + np.sin(eps) * Q[:, d], Q[:, d + 1:2 * d + 0]]
    bases, ranks = overlap.orthonormal_bases(np.stack([U, W, U @ rng.standard_normal((d, d))]))
    out = overlap.pk_within(bases, ranks)
    assert np.isclose(out["min_angle_deg"][0], np.degrees(eps), rtol=1e-4)
    assert out["min_angle_deg"][1] < 1e-9  # same subspace: exactly 0 up to rounding


def test_layernorm_folding_removes_the_mean_and_applies_gain():
    D, d = 12, 3
    W = rng.standard_normal((2, d, D))
    gain = 1 + rng.random(D)
    R = overlap.reading_matrix(W, gain, "layernorm")
    Pc = np.eye(D) - np.ones((D, D)) / D
    np.testing.assert_allclose(R[0], Pc @ np.diag(gain) @ W[0].T, atol=1e-12)
    np.testing.assert_allclose(overlap.reading_matrix(W, gain, "rmsnorm")[1], np.diag(gain) @ W[1].T)
    np.testing.assert_allclose(overlap.reading_matrix(W, None, "none")[1], W[1].T)


def test_rank_deficient_head_dimension_and_zero_head_nan():
    D, d = 20, 4
    X = rng.standard_normal((3, D, d))
    X[1][:, 3] = X[1][:, 0] + X[1][:, 1]
    X[2] = 0.0
    bases, ranks = overlap.orthonormal_bases(X)
    assert ranks.tolist() == [4, 3, 0]
    out = overlap.pk_within(bases, ranks)
    p01 = 0
    assert out["dim_j"][p01] == 3
    Pi, Pj = X[0] @ np.linalg.pinv(X[0]), X[1] @ np.linalg.pinv(X[1], rcond=1e-8)
    assert np.isclose(out["rho"][p01], np.trace(Pi @ Pj) / 3, rtol=1e-8)
    assert np.isnan(out["rho"][1]) and out["flags"][1] == "undefined"


def test_isotropic_reference_values():
    assert np.isclose(overlap.isotropic_sd(64, 768), 0.0017, atol=5e-5)  # docs/methods.md §2.5: 0.0017 at 768/64
    assert overlap.isotropic_rho(64, 768) == 64 / 768


@pytest.mark.parametrize("D,d", [(256, 16)])
def test_random_subspaces_calibrate(D, d):
    X = rng.standard_normal((24, D, d))
    bases, ranks = overlap.orthonormal_bases(X)
    rho = overlap.pk_within(bases, ranks)["rho"]
    assert abs(rho.mean() - d / D) < 4 * overlap.isotropic_sd(d, D) / np.sqrt(len(rho)) + 1e-3
    assert 0.6 < rho.std() / overlap.isotropic_sd(d, D) < 1.4


def test_cross_blocks_one_gemm_matches_pairwise():
    a, b = rng.standard_normal((3, 15, 4)), rng.standard_normal((2, 15, 4))
    C = overlap.cross_blocks(a, b)
    assert C.shape == (3, 2, 4, 4)
    np.testing.assert_allclose(C[2, 1], a[2].T @ b[1])


def test_pk_within_layer_kinds_and_direct_sum_defect():
    H, G, D, d = 6, 2, 16, 4  # H d = 24 > D = 16: writing spaces cannot be a direct sum
    f = LayerFactors(W_Q=rng.standard_normal((H, d, D)), W_K=rng.standard_normal((G, d, D)),
                     W_V=rng.standard_normal((G, d, D)), W_O=rng.standard_normal((H, D, d)),
                     kv_group=np.arange(H) // 3, norm_gain=np.ones(D), norm_type="rmsnorm")
    cols, facts = overlap.pk_within_layer(f)
    kinds = list(cols["kind"])
    assert kinds.count("O") == 15 and kinds.count("Q") == 15 and kinds.count("K") == 1 and kinds.count("V") == 1
    assert facts["O"]["direct_sum_defect"] == facts["O"]["expected_defect"] == 8
    sel = np.array(kinds) == "O"
    assert np.all(cols["rho"][sel] > 0) and np.all(cols["rho"][sel] <= 1 + 1e-12)


@pytest.mark.parametrize("H, D, d", [(6, 16, 4), (3, 32, 4)])  # H d > D (the D x D Gram) and H d < D
def test_stacked_singular_values_are_those_of_the_explicit_w_o(H, D, d):
    W_O = rng.standard_normal((H, D, d)) * rng.uniform(0.1, 3.0, (H, 1, d))
    explicit = np.hstack([W_O[h] for h in range(H)])  # D x H d, head by head
    want = np.linalg.svd(explicit, compute_uv=False)
    got = overlap.stacked_singular_values(W_O)
    assert got.shape == (min(D, H * d),)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12 * want[0])
    f = LayerFactors(W_Q=rng.standard_normal((H, d, D)), W_K=rng.standard_normal((1, d, D)),
                     W_V=rng.standard_normal((1, d, D)), W_O=W_O, kv_group=np.zeros(H, int),
                     norm_gain=np.ones(D), norm_type="rmsnorm")
    np.testing.assert_allclose(overlap.pk_within_layer(f, kinds=("O",))[1]["O"]["singular_values"], want, rtol=1e-10,
                               atol=1e-12 * want[0])
    bad = W_O.copy()
    bad[0, 0, 0] = np.nan
    assert np.isnan(overlap.stacked_singular_values(bad)).all()
