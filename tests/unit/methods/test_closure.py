"""docs/methods.md §1 identities on random factors, and hand-built exact cases."""

import numpy as np
import pytest

from headgeom.methods import closure as C
from head_grams import grams, sibling_law, toy_factors
from references import closure_explicit, closure_weighted_form
from synth import closed_head

rng = np.random.default_rng(12345)


def explicit(O, V):
    """Materialize T (tests only, tiny shapes)."""
    T = O @ V.T
    T2 = T @ T
    ip = np.sum(T2 * T)
    return T, T2, ip**2 / (np.sum(T2**2) * np.sum(T**2)), ip / np.sum(T**2)


@pytest.mark.parametrize("D,d", [(24, 6), (40, 8), (16, 16)])
def test_gram_traces_match_explicit_operator(D, d):
    for _ in range(5):
        O, V = rng.standard_normal((D, d)), rng.standard_normal((D, d))
        T, T2, P, alpha = explicit(O, V)
        nT2, ip, nT4 = C.closure_terms(*grams(O, V))
        assert np.isclose(nT2, np.sum(T**2), rtol=1e-12)
        assert np.isclose(ip, np.sum(T2 * T), rtol=1e-10, atol=1e-10 * abs(nT2) ** 1.5)
        assert np.isclose(nT4, np.sum(T2**2), rtol=1e-12)
        P2, a2, g, und = C.closure_from_terms(nT2, ip, nT4)
        assert not und and 0 <= P2 <= 1
        assert np.isclose(P2, P, rtol=1e-9) and np.isclose(a2, alpha, rtol=1e-9)
        assert np.isclose(g, np.linalg.norm(T2) / np.linalg.norm(T), rtol=1e-12)


def test_weighted_metric_form_agrees():
    O, V = rng.standard_normal((5, 30, 7)), rng.standard_normal((5, 30, 7))
    A, B, M = grams(O, V)
    P, alpha, _, _ = C.closure_from_terms(*C.closure_terms(A, B, M))
    Pw, aw = closure_weighted_form(A, B, M)
    np.testing.assert_allclose(Pw, P, rtol=1e-10)
    np.testing.assert_allclose(aw, alpha, rtol=1e-10)


def test_principal_coordinates_factorize_T_and_T2():
    D, d = 20, 5
    O, V = rng.standard_normal((D, d)), rng.standard_normal((D, d))
    A, B, M = grams(O, V)
    Dv, K = C.principal_coordinates(A, B, M)
    # rebuild the orthonormal bases the Gram route stands for
    R_O, R_V = np.linalg.cholesky(A).T, np.linalg.cholesky(B).T
    Q_O, Q_V = O @ np.linalg.inv(R_O), V @ np.linalg.inv(R_V)
    U_c, s, WcT = np.linalg.svd(Q_V.T @ Q_O)
    Qt_O, Qt_V = Q_O @ WcT.T, Q_V @ U_c
    np.testing.assert_allclose(Qt_V.T @ Qt_O, np.diag(Dv), atol=1e-12)
    T = O @ V.T
    np.testing.assert_allclose(Qt_O @ K @ Qt_V.T, T, atol=1e-10 * np.abs(T).max())
    np.testing.assert_allclose(Qt_O @ (K @ np.diag(Dv) @ K) @ Qt_V.T, T @ T, atol=1e-10 * np.abs(T @ T).max())
    assert np.all((Dv >= 0) & (Dv <= 1 + 1e-12))
    P = closure_explicit(O, V)[0]
    assert abs(C.P_of(K, Dv) - P) / P < 1e-10


def test_isoclinic_normalization_gives_latent_closure():
    K = rng.standard_normal((6, 6))
    c = 0.37
    assert np.isclose(C.P_of(K, np.full(6, c)), C.P_of(K), rtol=1e-12)
    s = C.principal_summary(np.full(6, c), K)
    assert np.isclose(s["I_D"], 1.0) and np.isclose(s["G_overlap"], c**2)


def test_random_subspace_total_overlap_expectation():
    D, d = 200, 10
    G = []
    for _ in range(60):
        O, V = rng.standard_normal((D, d)), rng.standard_normal((D, d))
        Dv, _ = C.principal_coordinates(*grams(O, V))
        G.append(np.sum(Dv**2) / d)
    assert abs(np.mean(G) - d / D) < 0.15 * d / D


def test_exactly_closed_head():
    D, d = 32, 8
    V = rng.standard_normal((D, d))
    for alpha in (2.5, -0.7):
        O = closed_head(V, alpha)
        T = O @ V.T
        np.testing.assert_allclose(T @ T, alpha * T, atol=1e-10 * np.abs(T).max())
        P, a, g, und = C.closure_from_terms(*C.closure_terms(*grams(O, V)))
        assert np.isclose(P, 1.0, atol=1e-12) and np.isclose(a, alpha, rtol=1e-10)
        assert np.isclose(g, abs(alpha), rtol=1e-10)


def test_exact_shared_value_sibling():
    """Heads i, j share V and j is exactly closed: T_i T_j = alpha_j T_i, so F = rho = 1."""
    D, d = 32, 8
    V = rng.standard_normal((D, d))
    O_j = closed_head(V, 1.8)
    O_i = rng.standard_normal((D, d))
    Ti, Tj = O_i @ V.T, O_j @ V.T
    np.testing.assert_allclose(Ti @ Tj, 1.8 * Ti, atol=1e-10 * np.abs(Ti).max())
    F, beta, rho = sibling_law(O_i, O_j, V, 1.8)
    assert np.isclose(F, 1.0, atol=1e-10) and np.isclose(rho, 1.0, rtol=1e-10) and np.isclose(beta, 1.8)
    # a sibling with another value factor does not obey the law
    F2, _, rho2 = sibling_law(O_i, closed_head(rng.standard_normal((D, d)), 1.8), V, 1.8)
    assert F2 < 0.5 and abs(rho2) < 0.5


def test_sibling_law_matches_explicit_operators():
    D, d = 20, 5
    O_i, O_j, V = (rng.standard_normal((D, d)) for _ in range(3))
    a = 0.9
    Ti, Tj = O_i @ V.T, O_j @ V.T
    P = Ti @ Tj
    F, beta, rho = sibling_law(O_i, O_j, V, a)
    assert np.isclose(F, 1 - np.sum((P - a * Ti) ** 2) / np.sum(P**2), rtol=1e-9)
    assert np.isclose(beta, np.sum(P * Ti) / np.sum(Ti**2), rtol=1e-9)


def test_zero_head_gives_nan_and_flag():
    D, d = 16, 4
    O = np.zeros((D, d))
    V = rng.standard_normal((D, d))
    P, a, g, und = C.closure_from_terms(*C.closure_terms(*grams(O, V)))
    assert und and np.isnan(P) and np.isnan(a)
    # square-zero T (T != 0, T^2 = 0): V^T O = 0
    V = np.vstack([rng.standard_normal((8, d)), np.zeros((8, d))])
    O = np.vstack([np.zeros((8, d)), rng.standard_normal((8, d))])
    P, a, g, und = C.closure_from_terms(*C.closure_terms(*grams(O, V)))
    assert und and np.isnan(P)



def test_wrong_v_cyclic_by_group():
    assert C.wrong_v_groups(np.arange(5), 5).tolist() == [1, 2, 3, 4, 0]  # MHA: V_{h+1}
    assert C.wrong_v_groups(np.array([0, 0, 0, 1, 1, 1, 2, 2, 2]), 3).tolist() == [1, 1, 1, 2, 2, 2, 0, 0, 0]
    assert C.wrong_v_groups(np.zeros(4, int), 1) is None


def test_closure_layer_flags_rank_deficient_and_zero_heads_and_continues():
    f = toy_factors()
    f.W_O[1] = 0.0  # zero head
    f.W_O[2][:, -1] = f.W_O[2][:, 0]  # rank-deficient O
    out = C.closure_layer(f)
    assert "zero_T" in out["flags"][1] and np.isnan(out["P"][1])
    assert "rank_deficient" in out["flags"][2] and np.isfinite(out["P"][2]) and np.isnan(out["P_latent"][2])
    assert out["flags"][0] == "" and np.isfinite(out["P_latent"][0])
    # wrong-V for GQA pairs each head with the next group's V
    O0, V1 = f.W_O[0], f.W_V[1].T
    assert np.isclose(out["P_wrong_v"][0], closure_explicit(O0, V1)[0])


def test_closure_layer_nan_weights_flagged_not_crashing():
    f = toy_factors()
    f.W_O[3][0, 0] = np.nan
    out = C.closure_layer(f)
    assert np.isnan(out["P"][3]) and "nonfinite" in out["flags"][3]
    assert np.isfinite(out["P"][0])


def test_mqa_wrong_v_is_nan_and_flagged():
    f = toy_factors(H=4, G=1)
    out = C.closure_layer(f)
    assert np.all(np.isnan(out["P_wrong_v"])) and all("wrong_v_undefined_G1" in x for x in out["flags"])
