"""The math modules against independent computations (issue 11).

Every expected value here is computed from explicit d_model x d_model operators, projector
traces, scipy, or a fresh QR/SVD of the factors; never from the code under test. Heads are
random and non-symmetric (a planted head with M = alpha I hides a transposed M), some are
rank-deficient, and layers are GQA (several query heads per KV group).

Mutants these tests are written to kill (checked by hand, see docs/hardening.md, "Mutation testing"):
M = O^T V instead of V^T O in closure_layer; cross-layer rho divided by D instead of the
minimum rank; wrong-V pairing with the wrong group; LayerNorm centring over the wrong axis."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.linalg as sla

# One place for the imports of the code under test (the package layout may move).
from headgeom.core import stats as S
from headgeom.methods import closure as C
from headgeom.methods.grams import LayerGrams
from headgeom.methods import nulls as N
from headgeom.methods import overlap as PK
from headgeom.outputs.pk import cross_layer
from headgeom.core.factors import LayerFactors, gqa_map
from headgeom.io.fetch import fetch_model
from headgeom.jobs.pk_paper import pk_cross_job
from headgeom.io.shards import read_shards
from head_grams import closure_score, grams, sibling_law
from references import closure_explicit, closure_weighted_form, weighted_inner
from synth import write_llama

RNG = np.random.default_rng(20261201)


# ------------------------------------------------------------------ independent references


def proj(X: np.ndarray, rtol: float = 1e-6) -> tuple[np.ndarray, int]:
    """Orthogonal projector onto Im X (D x D) and the numerical rank, from a full SVD."""
    U, s, _ = np.linalg.svd(X, full_matrices=False)
    r = int(np.sum(s > rtol * s[0])) if s.size and s[0] > 0 else 0
    return U[:, :r] @ U[:, :r].T, r


def principal_explicit(O: np.ndarray, V: np.ndarray):
    """Cosines of the principal angles between Im O and Im V (scipy), and the transport core K
    from fresh QR factors: T = Qt_O K Qt_V^T with Qt the principal bases."""
    cos = np.sort(np.cos(sla.subspace_angles(O, V)))[::-1]
    Q_O, R_O = np.linalg.qr(O)
    Q_V, R_V = np.linalg.qr(V)
    U_c, s, WcT = np.linalg.svd(Q_V.T @ Q_O)
    Qt_O, Qt_V = Q_O @ WcT.T, Q_V @ U_c
    K = Qt_O.T @ (O @ V.T) @ Qt_V
    return cos, s, K


def random_layer(H=6, G=3, D=24, d=5, rank_def=(), zero=(), norm="rmsnorm", rng=RNG) -> LayerFactors:
    """A GQA layer of random non-symmetric heads; ``rank_def`` heads get rank d-2 in W_O."""
    W_O = rng.standard_normal((H, D, d))
    for h in rank_def:
        W_O[h][:, -2:] = W_O[h][:, :2] @ rng.standard_normal((2, 2))  # rank d-2
    for h in zero:
        W_O[h] = 0.0
    gain = 1 + 0.3 * rng.standard_normal(D) if norm != "none" else None
    return LayerFactors(W_Q=rng.standard_normal((H, d, D)), W_K=rng.standard_normal((G, d, D)),
                        W_V=rng.standard_normal((G, d, D)), W_O=W_O, kv_group=gqa_map(H, G),
                        norm_gain=gain, norm_type=norm)


# ------------------------------------------------------------------ closure (paper 1 §1)


@pytest.mark.parametrize("H,G", [(6, 3), (4, 1), (5, 5)])
def test_closure_layer_matches_explicit_operators(H, G):
    """Every head's P, alpha, g_T and ||T|| equal those of T = O_h V_{g(h)}^T built in full;
    wrong-V uses V of group (g+1) mod G. Kills the transposed-M mutant."""
    f = random_layer(H=H, G=G, D=20, d=4, rng=np.random.default_rng(H * 10 + G))
    out = C.closure_layer(f)
    for h in range(H):
        g = f.kv_group[h]
        P, a, gT, nT = closure_explicit(f.O(h), f.V(g))
        assert out["P"][h] == pytest.approx(P, rel=1e-9)
        assert out["alpha"][h] == pytest.approx(a, rel=1e-9)
        assert out["g_T"][h] == pytest.approx(gT, rel=1e-10)
        assert out["norm_T"][h] == pytest.approx(nT, rel=1e-12)
        if G > 1:
            gw = (g + 1) % G
            assert out["wrong_v_group"][h] == gw
            assert out["P_wrong_v"][h] == pytest.approx(closure_explicit(f.O(h), f.V(gw))[0], rel=1e-9)
        else:
            assert np.isnan(out["P_wrong_v"][h]) and out["flags"][h] == "wrong_v_undefined_G1"
            assert out["wrong_v_group"][h] == -1
        assert out["rank_O"][h] == 4 and out["rank_V"][h] == 4
    # the values are not those of a symmetric M: P varies between heads and is far from 1
    assert np.ptp(out["P"]) > 1e-3


def test_closure_principal_summaries_match_scipy_angles_and_fresh_qr():
    f = random_layer(H=4, G=2, D=18, d=5, rng=np.random.default_rng(3))
    out = C.closure_layer(f)
    d = 5
    for h in range(4):
        O, V = f.O(h), f.V(f.kv_group[h])
        cos, s, K = principal_explicit(O, V)
        np.testing.assert_allclose(s, cos, atol=1e-10)  # two independent routes to the angles
        assert out["G_overlap"][h] == pytest.approx(np.sum(cos**2) / d, rel=1e-9)
        assert out["I_D"][h] == pytest.approx(np.sum(cos) ** 2 / (d * np.sum(cos**2)), rel=1e-9)
        KK = K @ K
        ipK = np.sum(KK * K)
        assert out["P_latent"][h] == pytest.approx(ipK**2 / (np.sum(KK**2) * np.sum(K**2)), rel=1e-8)
        assert out["beta"][h] == pytest.approx(ipK / np.sum(K**2), rel=1e-8)
        assert out["identity_relerr"][h] < 1e-10


def test_principal_coordinates_D_and_K_against_fresh_qr():
    rng = np.random.default_rng(11)
    O, V = rng.standard_normal((3, 16, 4)), rng.standard_normal((3, 16, 4))
    Dv, K = C.principal_coordinates(*grams(O, V))
    for h in range(3):
        cos, _, Kx = principal_explicit(O[h], V[h])
        np.testing.assert_allclose(Dv[h], cos, atol=1e-10)
        # K is fixed up to simultaneous sign flips of the principal pairs: compare |K|, and
        # P_D(K) = P(T) through an explicit operator
        np.testing.assert_allclose(np.abs(K[h]), np.abs(Kx), atol=1e-9 * np.abs(Kx).max())
        assert C.P_of(K[h], Dv[h]) == pytest.approx(closure_explicit(O[h], V[h])[0], rel=1e-9)


def test_rank_deficient_and_zero_heads_against_explicit_operators():
    f = random_layer(H=4, G=2, D=16, d=4, rank_def=(1,), zero=(3,), rng=np.random.default_rng(5))
    out = C.closure_layer(f)
    P1 = closure_explicit(f.O(1), f.V(f.kv_group[1]))[0]
    assert out["P"][1] == pytest.approx(P1, rel=1e-9)
    assert out["rank_O"][1] == np.linalg.matrix_rank(f.O(1)) == 2
    assert out["flags"][1] == "rank_deficient" and np.isnan(out["P_latent"][1])
    assert np.isnan(out["P"][3]) and out["flags"][3] == "zero_T" and out["norm_T"][3] == 0
    assert out["rank_O"][3] == 0 and out["rank_V"][3] == 4  # a zero factor has rank 0, not d
    assert out["flags"][0] == "" and out["flags"][2] == ""


def test_closure_from_terms_zero_threshold_and_sign():
    """alpha keeps its sign; T^2 = 0 (nilpotent T) is undefined, T tiny but nonzero is not."""
    e = np.zeros((4, 4))
    e[0, 1] = 1.0  # nilpotent: T^2 = 0
    O, V = e[:, :2], np.eye(4)[:, :2]
    P, a, g, und = C.closure_from_terms(*C.closure_terms(*grams(e, np.eye(4))))
    assert und and np.isnan(P) and np.isnan(a) and np.isnan(g)
    O = RNG.standard_normal((10, 3))
    V = -O @ np.linalg.inv(O.T @ O)  # T^2 = -T
    P, a, g, und = C.closure_from_terms(*C.closure_terms(*grams(O, V)))
    assert not und and P == pytest.approx(1.0, rel=1e-12) and a == pytest.approx(-1.0, rel=1e-12)
    assert g == pytest.approx(1.0, rel=1e-12)
    P, a, g, und = C.closure_from_terms(*C.closure_terms(*grams(1e-6 * O, 1e-6 * V)))
    assert not und and a == pytest.approx(-1e-12, rel=1e-9)


def test_product_law_general_matches_explicit_operators():
    """Distinct value spaces (cross-group pair) and the shared-V case, non-symmetric heads."""
    rng = np.random.default_rng(9)
    D, d = 14, 3
    O_a, V_a, O_b, V_b = (rng.standard_normal((D, d)) for _ in range(4))
    Ta, Tb = O_a @ V_a.T, O_b @ V_b.T
    alpha = 0.7
    P = Ta @ Tb
    F_ex = 1 - np.sum((P - alpha * Ta) ** 2) / np.sum(P**2)
    beta_ex = np.sum(P * Ta) / np.sum(Ta**2)
    F, beta, rho = C.product_law_general(O_a.T @ O_a, V_a.T @ V_a, V_b.T @ V_b, V_a.T @ V_b, V_a.T @ O_b, alpha)
    assert F == pytest.approx(F_ex, rel=1e-10) and beta == pytest.approx(beta_ex, rel=1e-10)
    assert rho == pytest.approx(beta_ex / alpha, rel=1e-10)
    # shared V: T_b = O_b V^T
    Tb = O_b @ V_a.T
    P = Ta @ Tb
    F, beta, rho = sibling_law(O_a, O_b, V_a, alpha)
    assert F == pytest.approx(1 - np.sum((P - alpha * Ta) ** 2) / np.sum(P**2), rel=1e-10)
    assert beta == pytest.approx(np.sum(P * Ta) / np.sum(Ta**2), rel=1e-10)


def test_gram_rank_counts_singular_values_above_rtol():
    """LayerGrams' rank of a factor from its Gram's eigenvalues, against np.linalg.matrix_rank."""
    rng = np.random.default_rng(2)
    X = rng.standard_normal((12, 5))
    X[:, 4] = rng.standard_normal(12) * 1e-4  # s_5 / s_1 ~ 1e-5
    assert LayerGrams._rank(np.linalg.eigvalsh(X.T @ X), 1e-6) == 5 == np.linalg.matrix_rank(X, tol=1e-6 * np.linalg.norm(X, 2))
    assert LayerGrams._rank(np.linalg.eigvalsh(X.T @ X), 1e-3) == 4 == np.linalg.matrix_rank(X, tol=1e-3 * np.linalg.norm(X, 2))
    X[:, 4] = X[:, 0]
    assert LayerGrams._rank(np.linalg.eigvalsh(X.T @ X), 1e-6) == 4


def test_weighted_inner_is_the_frobenius_inner_product_of_the_operators():
    rng = np.random.default_rng(4)
    O, V = rng.standard_normal((12, 3)), rng.standard_normal((12, 3))
    X, Y = rng.standard_normal((3, 3)), rng.standard_normal((3, 3))
    A, B = O.T @ O, V.T @ V
    assert weighted_inner(X, Y, A, B) == pytest.approx(np.sum((O @ X @ V.T) * (O @ Y @ V.T)), rel=1e-10)


# ------------------------------------------------------------------ PK (§2)


def test_reading_matrix_layernorm_and_rmsnorm_folding_explicit():
    rng = np.random.default_rng(6)
    H, d, D = 3, 4, 10
    W = rng.standard_normal((H, d, D))
    gamma = 1 + rng.standard_normal(D)
    Pc = np.eye(D) - np.ones((D, D)) / D
    ln = PK.reading_matrix(W, gamma, "layernorm")
    rms = PK.reading_matrix(W, gamma, "rmsnorm")
    none = PK.reading_matrix(W, gamma, "none")
    for h in range(H):
        np.testing.assert_allclose(ln[h], Pc @ np.diag(gamma) @ W[h].T, atol=1e-12)
        np.testing.assert_allclose(rms[h], np.diag(gamma) @ W[h].T, atol=1e-12)
        np.testing.assert_allclose(none[h], W[h].T, atol=0)
    # the input is not modified in place
    W0 = W.copy()
    nogain = PK.reading_matrix(W, None, "layernorm")
    np.testing.assert_array_equal(W, W0)
    np.testing.assert_allclose(nogain[0], Pc @ W[0].T, atol=1e-12)


def test_orthonormal_bases_span_and_rank():
    rng = np.random.default_rng(8)
    X = rng.standard_normal((3, 15, 4))
    X[1][:, 3] = X[1][:, 0] + X[1][:, 1]  # rank 3
    X[2] = 0.0
    Q, r = PK.orthonormal_bases(X)
    assert r.tolist() == [4, 3, 0]
    for h in range(2):
        Ph, rh = proj(X[h])
        np.testing.assert_allclose(Q[h] @ Q[h].T, Ph, atol=1e-10)
        np.testing.assert_allclose(Q[h][:, :rh].T @ Q[h][:, :rh], np.eye(rh), atol=1e-12)


def test_cross_pairs_rho_is_pk_over_min_rank_with_projectors_and_scipy():
    """Writers of full rank d against readers of rank d-1 (and one of rank 2): rho must be the
    projector trace over the minimum rank, not over d or D. Kills the rho-over-D mutant."""
    rng = np.random.default_rng(10)
    D, d, nw, nr = 16, 4, 3, 4
    Xw = rng.standard_normal((nw, D, d))
    Xr = rng.standard_normal((nr, D, d))
    Xr[0][:, 3] = Xr[0][:, 0] - 2 * Xr[0][:, 2]  # rank 3
    Xr[2][:, 2:] = Xr[2][:, :2] @ rng.standard_normal((2, 2))  # rank 2
    Bw, rw = PK.orthonormal_bases(Xw)
    Br, rr = PK.orthonormal_bases(Xr)
    out = PK.cross_pairs(Bw, rw, Br, rr, Xw=Xw, Xr=Xr)
    assert len(out["rho"]) == nw * nr
    for p in range(nw * nr):
        i, j = out["head_w"][p], out["head_r"][p]
        Pu, ru = proj(Xw[i])
        Pr, rk = proj(Xr[j])
        pk = np.trace(Pu @ Pr)
        assert (out["dim_w"][p], out["dim_r"][p]) == (ru, rk)
        assert out["pk"][p] == pytest.approx(pk, rel=1e-10)
        assert out["rho"][p] == pytest.approx(pk / min(ru, rk), rel=1e-10)
        theta = np.degrees(sla.subspace_angles(Xw[i], Xr[j]).min())
        assert out["min_angle_deg"][p] == pytest.approx(theta, abs=1e-7)
        R, B = Xr[j].T, Xw[i]
        w = D * np.sum((R @ B) ** 2) / (np.sum(R**2) * np.sum(B**2))
        assert out["weighted"][p] == pytest.approx(w, rel=1e-10)
    # the same pairs by rho_matrix (self-overlap route)
    M = PK.rho_matrix(Bw, rw, Br, rr)
    np.testing.assert_allclose(M.ravel(), out["rho"], rtol=1e-12)


def test_pk_within_against_projectors_with_rank_deficient_head():
    rng = np.random.default_rng(12)
    X = rng.standard_normal((4, 14, 4))
    X[2][:, 3] = X[2][:, 1]
    B, r = PK.orthonormal_bases(X)
    out = PK.pk_within(B, r)
    for p, (i, j) in enumerate(zip(out["head_i"], out["head_j"])):
        Pi, ri = proj(X[i])
        Pj, rj = proj(X[j])
        assert out["rho"][p] == pytest.approx(np.trace(Pi @ Pj) / min(ri, rj), rel=1e-10)
        assert out["min_angle_deg"][p] == pytest.approx(np.degrees(sla.subspace_angles(X[i], X[j]).min()), abs=1e-7)


def test_lambda_min_S_and_stacked_rank_against_explicit_projector_sum():
    rng = np.random.default_rng(13)
    D, d = 12, 3
    for n in (5, 3):  # n d >= D: spans; n d < D: lambda_min = 0
        X = rng.standard_normal((n, D, d))
        B, r = PK.orthonormal_bases(X)
        S = sum(proj(X[i])[0] for i in range(n))
        ev = np.linalg.eigvalsh(S)
        assert PK.lambda_min_S(B) == pytest.approx(max(ev[0], 0.0), abs=1e-12)
        assert PK.stacked_rank(B) == np.linalg.matrix_rank(np.concatenate(list(X), axis=1))
    d_def, expected = PK.direct_sum_defect(np.array([3, 3, 2]), 7, 3, 3, 7)
    assert (d_def, expected) == (1, 2)
    assert PK.direct_sum_defect(np.array([2, 2]), 4, 2, 2, 10) == (0, 0)


def test_isotropic_values_match_monte_carlo():
    D, d = 10, 3
    rng = np.random.default_rng(14)
    vals = []
    for _ in range(4000):
        U = np.linalg.qr(rng.standard_normal((D, d)))[0]
        W = np.linalg.qr(rng.standard_normal((D, d)))[0]
        vals.append(np.sum((U.T @ W) ** 2) / d)
    vals = np.array(vals)
    assert PK.isotropic_rho(d, D) == pytest.approx(vals.mean(), abs=4 * vals.std() / np.sqrt(vals.size))
    assert PK.isotropic_sd(d, D) == pytest.approx(vals.std(), rel=0.05)


def test_layer_stats_against_numpy():
    rho = np.array([0.1, 0.5, np.nan, 0.3, 0.05, 0.9])
    ang = np.array([30.0, np.nan, 10.0, 20.0, 50.0, 5.0])
    st = PK.layer_stats(rho, ang, iso=0.2)
    r = rho[np.isfinite(rho)]
    assert st["n_pairs"] == 5 and st["mean"] == pytest.approx(r.mean()) and st["sd"] == pytest.approx(r.std())
    assert st["median"] == pytest.approx(0.3) and st["max"] == 0.9 and st["min_angle_deg"] == 5.0
    assert st["p95"] == pytest.approx(np.percentile(r, 95))
    assert st["share_above_2iso"] == pytest.approx(2 / 5) and st["share_below_half_iso"] == pytest.approx(1 / 5)
    assert PK.layer_stats([np.nan], [], 0.2)["n_pairs"] == 0


def test_self_overlap_test_exact_enumeration_by_hand():
    rho = np.array([[0.9, 0.1, 0.2], [0.3, 0.8, 0.1], [0.2, 0.2, 0.7]])
    obs, null, p, exact = PK.self_overlap_test(rho, [0, 1, 2], np.random.default_rng(0))
    assert exact and obs == pytest.approx(0.8)
    import itertools

    means = sorted(np.mean([rho[h, q[h]] for h in range(3)]) for q in itertools.permutations(range(3)) if q != (0, 1, 2))
    np.testing.assert_allclose(sorted(null), means)
    assert p == pytest.approx(1 / 6)  # no permutation reaches 0.8


# ------------------------------------------------------------------ cross-layer shards and PK Table 2


@pytest.fixture(scope="module")
def cross_store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cross")
    write_llama(tmp / "ckpt", d_model=24, n_heads=4, n_kv=2, d_head=8, n_layers=3, seed=4, closed=())
    fetch_model("tiny", {"source": "local", "path": str(tmp / "ckpt")}, tmp / "store", log=lambda s: None)
    return tmp


def test_pk_cross_shard_rho_is_projector_trace_over_min_rank_and_bound_holds(cross_store):
    """The cross-layer rho that feeds PK Tables 1, 2, 9 and Figure 9, from the shard a job wrote,
    against projector traces of the store's own factors; then Table 2's lower bound
    max_i rho(R, U_i) >= lambda_min(S)/H holds and bound_violations == 0."""
    from headgeom.io.store import TensorStore

    store = TensorStore(cross_store / "store")
    out = cross_store / "L0.parquet"
    pk_cross_job(cross_store / "store", 0, out, {"rank_rtol": 1e-6}, log=lambda s: None)
    cols, _ = read_shards([str(out)])
    f0 = store.layer_factors(0)
    Pw = [proj(f0.W_O[h])[0] for h in range(4)]
    S = sum(Pw)
    lam = max(np.linalg.eigvalsh(S)[0], 0.0)
    assert lam > 0.01  # 4 writers of dim 8 span R^24: the bound is not vacuous
    np.testing.assert_allclose(cols["lambda_min_S"], lam, rtol=1e-9)
    checked = 0
    for lr in (1, 2):
        f = store.layer_factors(lr)
        for kind in ("Q", "K", "V"):
            Xr = PK.factor_stack(f, kind)
            sel = (cols["layer_r"] == lr) & (cols["kind"] == kind)
            for p in np.flatnonzero(sel):
                w, r = cols["head_w"][p], cols["head_r"][p]
                Pr, rk = proj(Xr[r])
                assert cols["rho"][p] == pytest.approx(np.trace(Pw[w] @ Pr) / min(8, rk), rel=1e-9)
                checked += 1
            # the proposition, from explicit projectors
            for r in range(Xr.shape[0]):
                Pr, rk = proj(Xr[r])
                best = max(np.trace(Pw[w] @ Pr) / min(8, rk) for w in range(4))
                assert best >= lam / 4 * (1 - 1e-9)
    assert checked == 2 * (4 * 4 + 4 * 2 + 4 * 2)
    fields = {"tiny": json.loads((cross_store / "store" / "manifest.json").read_text())["fields"]}
    t = cross_layer.pk_table2_lower_bound({"pk_cross": cols}, fields, ["tiny"])
    assert len(t.rows) == 1 and t.rows[0]["bound_violations"] == 0
    assert t.rows[0]["lambda_min"] == pytest.approx(lam, rel=1e-9)


# ------------------------------------------------------------------ nulls


def test_null_draws_preserve_what_they_claim():
    rng = np.random.default_rng(15)
    X = rng.standard_normal((4, 10, 3))
    S = N.stack(X)
    np.testing.assert_array_equal(S[:, 3:6], X[1])  # head 1's columns, in order
    np.testing.assert_array_equal(N.unstack(S, 4), X)
    R = N.null_factors(X, "rotation", np.random.default_rng(1))
    np.testing.assert_allclose(np.linalg.svd(N.stack(R), compute_uv=False), np.linalg.svd(S, compute_uv=False), rtol=1e-10)
    np.testing.assert_allclose(N.stack(R) @ N.stack(R).T, S @ S.T, atol=1e-10)  # left side kept
    Wd = rng.standard_normal((5, 40))  # wide: m > D
    Rw = N.rotate_spectrum(Wd, np.random.default_rng(2))
    np.testing.assert_allclose(Rw @ Rw.T, Wd @ Wd.T, atol=1e-9)
    P = N.null_factors(X, "reassign", np.random.default_rng(3))
    assert sorted(map(tuple, N.stack(P).T.round(12))) == sorted(map(tuple, S.T.round(12)))
    with pytest.raises(ValueError):
        N.null_factors(X, "shuffle", rng)
    Q = N.haar_stiefel(7, 3, np.random.default_rng(4))
    np.testing.assert_allclose(Q.T @ Q, np.eye(3), atol=1e-12)


def test_empirical_p_and_blocks_by_hand():
    assert S.empirical_p(0.5, [0.1, 0.6, 0.5, 0.2]) == pytest.approx(3 / 5)
    assert S.empirical_p(0.5, [0.1, 0.6, 0.5, 0.2], greater=False) == pytest.approx(4 / 5)
    assert S.empirical_p(1.0, [1.0 - 1e-14]) == pytest.approx(1.0)  # a tie within rounding counts
    assert S.empirical_p(1.0, [1.0 - 1e-9]) == pytest.approx(0.5)
    assert list(N.sample_range(10, 2, 4)) == [8, 9] and list(N.sample_range(10, 0, 4)) == [0, 1, 2, 3]
    assert N.n_blocks(10, 4) == 3 and N.n_blocks(8, 4) == 2


# ------------------------------------------------------------------ closure_layer: flags and the asserted identity


def _sv_factor(rng, D, s):
    """D x len(s) factor with singular values s."""
    U = np.linalg.qr(rng.standard_normal((D, len(s))))[0]
    W = np.linalg.qr(rng.standard_normal((len(s), len(s))))[0]
    return U @ np.diag(s) @ W


def test_closure_layer_ill_conditioned_and_nonfinite_heads():
    rng = np.random.default_rng(21)
    D, d, H, G = 16, 4, 4, 4
    f = random_layer(H=H, G=G, D=D, d=d, rng=rng)
    W_O, W_V = f.W_O.copy(), f.W_V.copy()
    # head 1: cond(O) = 1e4 and cond(V) = 1e3 -> sqrt(cond A) sqrt(cond B) = 1e7 > 1e6, but full rank at
    # 1e-6; any other pair of eigenvalues (second largest, second smallest) gives a product below 1e6
    W_O[1] = _sv_factor(rng, D, [1.0, 1e-2, 1e-2, 1e-4])
    W_V[1] = _sv_factor(rng, D, [1.0, 10**-1.5, 10**-1.5, 1e-3]).T
    # head 2: cond product 1e4 (well conditioned)
    W_O[2] = _sv_factor(rng, D, [1.0, 0.5, 0.1, 1e-2])
    W_V[2] = _sv_factor(rng, D, [1.0, 0.5, 0.1, 1e-2]).T
    W_O[3][0, 0] = np.nan
    g = LayerFactors(W_Q=f.W_Q, W_K=f.W_K, W_V=W_V, W_O=W_O, kv_group=f.kv_group, norm_gain=f.norm_gain,
                     norm_type=f.norm_type)
    out = C.closure_layer(g)
    assert out["flags"][1] == "ill_conditioned" and out["rank_O"][1] == 4 and np.isfinite(out["P_latent"][1])
    assert out["flags"][2] == "" and out["identity_relerr"][2] < 1e-10
    assert out["flags"][3] == "nonfinite" and out["rank_O"][3] == -1 and out["rank_V"][3] == -1
    assert np.isnan(out["P_latent"][3]) and np.isnan(out["identity_relerr"][3])
    for h in (0, 1, 2):
        assert out["P"][h] == pytest.approx(closure_explicit(g.O(h), g.V(h))[0], rel=1e-7)
    assert out["head"].tolist() == [0, 1, 2, 3] and out["kv_group"].tolist() == [0, 1, 2, 3]


def test_closure_layer_asserts_the_principal_coordinate_identity(monkeypatch):
    f = random_layer(H=2, G=1, D=12, d=3, rng=np.random.default_rng(22))
    real = C.P_of
    monkeypatch.setattr(C, "P_of", lambda K, D=None: real(K, D) * (1 + 1e-7))
    with pytest.raises(AssertionError, match="head 0"):
        C.closure_layer(f)
    C.closure_layer(f, identity_rtol=1e-6)  # within a looser tolerance it passes
    monkeypatch.setattr(C, "P_of", lambda K, D=None: real(K, D) * (1 + 1e-12))
    C.closure_layer(f)  # rounding-size differences pass at 1e-10


def test_principal_coordinate_identity_near_zero_P_is_not_a_failure():
    """A well-conditioned head with <T^2, T> ~ 0 (O on a line O_a + t O_b, t a root of the
    explicit <T^2, T>(t) found by scipy's brentq): P is at rounding level, where the error
    relative to P itself is far above 1e-10 although the cosine sqrt(P) agrees to rounding. The
    identity holds on the scale of sqrt(P), the head is not a bug, and the layer's other heads
    are computed."""
    from scipy.optimize import brentq

    rng = np.random.default_rng(31)
    f = random_layer(H=2, G=2, D=40, d=3, rng=rng)
    V = f.V(0)
    O_a, O_b = rng.standard_normal((2, 40, 3))

    def ip(t):
        T = (O_a + t * O_b) @ V.T
        return float(np.sum((T @ T) * T))

    grid = np.linspace(-5, 5, 201)
    k = next(i for i in range(200) if np.sign(ip(grid[i])) != np.sign(ip(grid[i + 1])))
    t0 = brentq(ip, grid[k], grid[k + 1], xtol=1e-15, rtol=4 * np.finfo(float).eps)
    W_O = f.W_O.copy()
    W_O[0] = O_a + t0 * O_b
    g = LayerFactors(W_Q=f.W_Q, W_K=f.W_K, W_V=f.W_V, W_O=W_O, kv_group=f.kv_group, norm_gain=f.norm_gain,
                     norm_type=f.norm_type)
    out = C.closure_layer(g)
    P_exp = closure_explicit(g.O(0), g.V(0))[0]
    assert out["P"][0] < 1e-20 and out["flags"][0] == ""
    assert out["identity_relerr"][0] > 1e-10  # relative to P itself the identity looks broken ...
    assert abs(np.sqrt(out["P"][0]) - np.sqrt(P_exp)) < 1e-13  # ... the cosine agrees to rounding
    assert out["P"][1] == pytest.approx(closure_explicit(g.O(1), g.V(1))[0], rel=1e-9)


def test_closure_score_and_weighted_form_on_batches():
    rng = np.random.default_rng(23)
    O, V = rng.standard_normal((3, 10, 3)), rng.standard_normal((3, 10, 3))
    P = closure_score(O, V)
    Pw, aw = closure_weighted_form(*grams(O, V))
    for h in range(3):
        Pe, ae, _, _ = closure_explicit(O[h], V[h])
        assert P[h] == pytest.approx(Pe, rel=1e-9) and Pw[h] == pytest.approx(Pe, rel=1e-9)
        assert aw[h] == pytest.approx(ae, rel=1e-9)


def test_wrong_v_groups_cycle():
    assert C.wrong_v_groups(np.array([0, 0, 1, 1, 2, 2]), 3).tolist() == [1, 1, 2, 2, 0, 0]
    assert C.wrong_v_groups(np.array([0, 0]), 1) is None
    assert C.wrong_v_groups(np.array([0, 1]), 2).tolist() == [1, 0]


def test_P_of_and_principal_summary_against_definitions():
    rng = np.random.default_rng(24)
    K, Dv = rng.standard_normal((4, 4)), np.sort(rng.uniform(0.1, 1, 4))[::-1]
    KDK = K @ np.diag(Dv) @ K
    assert C.P_of(K, Dv) == pytest.approx(np.sum(KDK * K) ** 2 / (np.sum(KDK**2) * np.sum(K**2)), rel=1e-12)
    KK = K @ K
    assert C.P_of(K) == pytest.approx(np.sum(KK * K) ** 2 / (np.sum(KK**2) * np.sum(K**2)), rel=1e-12)
    s = C.principal_summary(Dv, K)
    assert s["G_overlap"] == pytest.approx(np.sum(Dv**2) / 4) and s["I_D"] == pytest.approx(np.sum(Dv) ** 2 / (4 * np.sum(Dv**2)))
    assert s["beta"] == pytest.approx(np.sum(KK * K) / np.sum(K**2))


def test_closure_weighted_form_with_two_batch_axes():
    rng = np.random.default_rng(25)
    O, V = rng.standard_normal((2, 3, 9, 4)), rng.standard_normal((2, 3, 9, 4))
    Pw, aw = closure_weighted_form(*grams(O, V))
    assert Pw.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            Pe, ae, _, _ = closure_explicit(O[i, j], V[i, j])
            assert Pw[i, j] == pytest.approx(Pe, rel=1e-9) and aw[i, j] == pytest.approx(ae, rel=1e-9)


def test_closure_layer_overflowing_gram_is_nonfinite_even_when_M_is_finite():
    """O ~ 1e160 overflows A = O^T O to inf while M = V^T O (V ~ 1e-160) stays finite: the head
    is flagged nonfinite (every Gram must be finite), not passed to the rank computation."""
    f = random_layer(H=2, G=2, D=10, d=3, rng=np.random.default_rng(26))
    W_O, W_V = f.W_O.copy(), f.W_V.copy()
    W_O[0] *= 1e160
    W_V[0] *= 1e-160
    g = LayerFactors(W_Q=f.W_Q, W_K=f.W_K, W_V=W_V, W_O=W_O, kv_group=f.kv_group, norm_gain=f.norm_gain,
                     norm_type=f.norm_type)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        out = C.closure_layer(g)
    assert out["flags"][0].startswith("nonfinite") and out["rank_O"][0] == -1
    assert out["flags"][1] == ""


def test_closure_layer_rank_rtol_is_used_for_both_factors():
    rng = np.random.default_rng(27)
    f = random_layer(H=2, G=2, D=12, d=3, rng=rng)
    W_O, W_V = f.W_O.copy(), f.W_V.copy()
    W_O[0] = _sv_factor(rng, 12, [1.0, 0.5, 1e-4])  # rank 3 at 1e-6, rank 2 at 1e-3
    W_V[1] = _sv_factor(rng, 12, [1.0, 0.5, 1e-4]).T
    g = LayerFactors(W_Q=f.W_Q, W_K=f.W_K, W_V=W_V, W_O=W_O, kv_group=f.kv_group, norm_gain=f.norm_gain,
                     norm_type=f.norm_type)
    loose = C.closure_layer(g, rank_rtol=1e-3)
    assert loose["rank_O"].tolist() == [2, 3] and loose["rank_V"].tolist() == [3, 2]
    assert loose["flags"].tolist() == ["rank_deficient", "rank_deficient"]
    tight = C.closure_layer(g)
    assert tight["rank_O"].tolist() == [3, 3] and tight["rank_V"].tolist() == [3, 3]


# ------------------------------------------------------------------ PK: the rest of the module


def test_pk_within_layer_against_projectors_for_every_kind():
    rng = np.random.default_rng(30)
    f = random_layer(H=4, G=2, D=14, d=3, norm="layernorm", rng=rng)
    cols, facts = PK.pk_within_layer(f)
    Pc = np.eye(14) - np.ones((14, 14)) / 14
    facs = {"O": list(f.W_O), "Q": [Pc @ np.diag(f.norm_gain) @ W.T for W in f.W_Q],
            "K": [Pc @ np.diag(f.norm_gain) @ W.T for W in f.W_K], "V": [Pc @ np.diag(f.norm_gain) @ W.T for W in f.W_V]}
    for kind, X in facs.items():
        n = len(X)
        sel = cols["kind"] == kind
        assert sel.sum() == n * (n - 1) // 2
        for p in np.flatnonzero(sel):
            i, j = cols["head_i"][p], cols["head_j"][p]
            Pi, ri = proj(X[i])
            Pj, rj = proj(X[j])
            assert cols["rho"][p] == pytest.approx(np.trace(Pi @ Pj) / min(ri, rj), rel=1e-9)
            assert cols["pk"][p] == pytest.approx(np.trace(Pi @ Pj), rel=1e-9)
            assert (cols["dim_i"][p], cols["dim_j"][p]) == (ri, rj) and cols["flags"][p] == ""
        layer_rank = np.linalg.matrix_rank(np.concatenate(X, axis=1))
        ranks = [np.linalg.matrix_rank(x) for x in X]
        got = dict(facts[kind])
        if kind == "O":  # the writing space's layer facts also keep W_O^l's singular values (PK section 5.3)
            sv = np.linalg.svd(np.concatenate(X, axis=1), compute_uv=False)
            assert np.allclose(got.pop("singular_values"), sv, rtol=1e-12, atol=1e-12)
        assert got == {"ranks": ranks, "layer_rank": layer_rank, "direct_sum_defect": sum(ranks) - layer_rank,
                       "expected_defect": max(0, n * 3 - 14), "n_heads": n}
    _, _, spaces = PK.pk_within_layer(f, kinds=("O", "K"), return_spaces=True)
    assert set(spaces) == {"O", "K"} and spaces["K"][2].tolist() == [3, 3]
    np.testing.assert_allclose(spaces["K"][0][1], facs["K"][1], atol=1e-12)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4)])
def test_sigma_max_against_svd(shape):
    C_ = np.random.default_rng(31).standard_normal((6, *shape))
    np.testing.assert_allclose(PK.sigma_max(C_), np.linalg.svd(C_, compute_uv=False)[:, 0], rtol=1e-10)


def test_min_angle_deg_and_clipping():
    assert PK.min_angle_deg(1.0 + 1e-12) == 0.0 and PK.min_angle_deg(0.5) == pytest.approx(60.0)
    assert PK.min_angle_deg(-2.0) == pytest.approx(180.0) and PK.min_angle_deg(0.0) == pytest.approx(90.0)


def test_tiny_cross_angles_between_spaces_of_different_rank_use_the_sine_form():
    """Reader of rank 4 containing a writer direction rotated by 1e-8 rad; writer of rank 2 (and
    the reverse): theta_1 from the sine form equals the constructed eps, which arccos cannot resolve."""
    rng = np.random.default_rng(32)
    D = 20
    Q = np.linalg.qr(rng.standard_normal((D, D)))[0]
    eps = 1e-8
    W = np.stack([np.c_[Q[:, 0], Q[:, 1], Q[:, 1]]])  # rank 2 (third column repeats)
    R = np.stack([np.c_[np.cos(eps) * Q[:, 0] + np.sin(eps) * Q[:, 5], Q[:, 6], Q[:, 7], Q[:, 8]]])
    Bw, rw = PK.orthonormal_bases(W)
    Br, rr = PK.orthonormal_bases(R[:, :, :3])
    assert rw.tolist() == [2] and rr.tolist() == [3]
    for a, ra, b, rb in ((Bw, rw, Br, rr), (Br, rr, Bw, rw)):
        out = PK.cross_pairs(a, ra, b, rb)
        assert out["min_angle_deg"][0] == pytest.approx(np.degrees(eps), rel=1e-4)
    out = PK.cross_pairs(Bw, rw, Br, rr, angles=False)
    assert "min_angle_deg" not in out and "weighted" not in out


def test_nonfinite_and_single_heads_in_pk():
    rng = np.random.default_rng(33)
    X = rng.standard_normal((3, 10, 2))
    X[1][0, 0] = np.inf
    B, r = PK.orthonormal_bases(X)
    assert r.tolist() == [2, -1, 2] and np.all(B[1] == 0)
    out = PK.pk_within(B, r)
    bad = (out["head_i"] == 1) | (out["head_j"] == 1)
    assert np.all(np.isnan(out["rho"][bad])) and np.all(np.isnan(out["pk"][bad]))
    assert np.all(np.isnan(out["min_angle_deg"][bad])) and list(out["flags"][bad]) == ["undefined"] * 2
    assert list(out["flags"][~bad]) == [""] and np.isfinite(out["rho"][~bad]).all()
    assert PK.stacked_rank(np.where(np.isfinite(X), X, np.nan)) == -1
    assert PK.stacked_rank(np.zeros((2, 10, 2))) == 0
    one = PK.pk_within(B[:1], r[:1])
    assert all(len(v) == 0 for v in one.values()) and one["rho"].dtype == float and one["head_i"].dtype == np.int64
    assert PK.upper_blocks(B[:1]).shape == (0, 2, 2)
    cr = PK.cross_pairs(B, r, B[:1], r[:1])
    assert np.isnan(cr["rho"][1]) and np.isnan(cr["min_angle_deg"][1]) and np.isnan(cr["pk"][1])


def test_lambda_min_S_exactly_spanning_and_deficient():
    rng = np.random.default_rng(34)
    D, d = 8, 2
    X = rng.standard_normal((4, D, d))  # n d = D
    B, _ = PK.orthonormal_bases(X)
    S = sum(proj(x)[0] for x in X)
    assert PK.lambda_min_S(B) == pytest.approx(np.linalg.eigvalsh(S)[0], rel=1e-8)
    X[3] = X[2] @ rng.standard_normal((d, d))  # two heads share a space: S is singular
    B, _ = PK.orthonormal_bases(X)
    assert PK.lambda_min_S(B) == pytest.approx(0.0, abs=1e-12)
    assert PK.lambda_min_S(B[:3]) == 0.0


def test_self_overlap_random_permutations_and_degenerate_cases():
    rng = np.random.default_rng(35)
    n = 8  # 8! - 1 > 100: random permutations
    rho = rng.uniform(0, 0.2, (n, n)) + np.eye(n) * 0.5
    obs, null, p, exact = PK.self_overlap_test(rho, np.arange(n), np.random.default_rng(1), n_perm=100)
    assert not exact and null.shape == (100,) and obs == pytest.approx(np.mean(np.diag(rho)))
    perms = np.array([np.random.default_rng(1).permutation(n) for _ in range(1)])
    assert null[0] == pytest.approx(np.mean(rho[np.arange(n), perms[0]]))
    assert p == pytest.approx((np.sum(null >= obs - 1e-12 * obs) + 1) / 101)
    obs, null, p, exact = PK.self_overlap_test(np.array([[0.3], [0.5]]), [0, 0], rng)
    assert obs == pytest.approx(0.4) and null.size == 0 and np.isnan(p) and exact
    # GQA: 4 heads, 2 groups: labels [0,0,1,1], one non-identity labelling
    rho = np.array([[0.9, 0.1], [0.8, 0.2], [0.1, 0.7], [0.3, 0.6]])
    obs, null, p, exact = PK.self_overlap_test(rho, [0, 0, 1, 1], rng)
    assert exact and obs == pytest.approx(np.mean([0.9, 0.8, 0.7, 0.6]))
    np.testing.assert_allclose(null, [np.mean([0.1, 0.2, 0.1, 0.3])])
    assert p == pytest.approx(0.5)


# ------------------------------------------------------------------ nulls and statistics: definitions


def test_haar_stiefel_is_the_sign_fixed_qr_of_its_gaussian():
    """Mezzadri: Q = Z R^{-1} with R's diagonal positive, i.e. Q^T Z is upper triangular with a
    positive diagonal (the property that makes Q Haar, not merely orthonormal)."""
    for m, r in ((7, 3), (5, 5)):
        Z = np.random.default_rng(40).standard_normal((m, r))
        Q = N.haar_stiefel(m, r, np.random.default_rng(40))
        R = Q.T @ Z
        np.testing.assert_allclose(np.tril(R, -1), 0, atol=1e-12)
        assert np.all(np.diag(R) > 0)
        np.testing.assert_allclose(Q @ R, Z, atol=1e-12)


def test_rotate_spectrum_tall_and_wide_keep_the_left_gram_and_move_the_right():
    rng = np.random.default_rng(41)
    for D, m in ((9, 4), (4, 9)):
        S = rng.standard_normal((D, m))
        R = N.rotate_spectrum(S, np.random.default_rng(2))
        assert R.shape == (D, m)
        np.testing.assert_allclose(R @ R.T, S @ S.T, atol=1e-10)
        assert np.abs(R - S).max() > 0.1  # the right singular vectors did move
    D, m = 9, 4
    S = rng.standard_normal((D, m))
    O = N.haar_stiefel(m, m, np.random.default_rng(3))
    np.testing.assert_allclose(N.rotate_spectrum(S, np.random.default_rng(3)), S @ O, atol=1e-12)


def test_null_registry():
    assert {n: N.null_model(n).label for n in ("rotation", "reassign")} == {"rotation": "rotation", "reassign": "reassignment"}
    with pytest.raises(ValueError, match="unknown null 'nope'"):
        N.null_model("nope")
    with pytest.raises(ValueError, match="already registered"):
        N.register_null(N.NullModel("rotation", N.rotate_spectrum, "x"))
    toy = N.register_null(N.NullModel("toy-identity-test", lambda S, rng: S * 2, "toy"))
    try:
        X = np.random.default_rng(42).standard_normal((2, 5, 3))
        np.testing.assert_array_equal(N.null_factors(X, "toy-identity-test", None), 2 * X)
    finally:
        N.NULL_MODELS.pop(toy.name)
    X = np.random.default_rng(43).standard_normal((3, 6, 2))
    P = N.null_factors(X, "reassign", np.random.default_rng(5))
    perm = np.random.default_rng(5).permutation(6)
    np.testing.assert_array_equal(N.stack(P), N.stack(X)[:, perm])


def test_auroc_brute_force_with_ties_and_nans():
    pos = [0.9, 0.5, 0.5, np.nan, 0.2]
    neg = [0.5, 0.1, 0.3, np.inf * 0]
    p = [x for x in pos if np.isfinite(x)]
    n = [x for x in neg if np.isfinite(x)]
    brute = np.mean([1.0 if a > b else 0.5 if a == b else 0.0 for a in p for b in n])
    assert S.auroc(pos, neg) == pytest.approx(brute)
    assert S.auroc([1, 2], [3, 4]) == 0.0 and S.auroc([3, 4], [1, 2]) == 1.0
    assert np.isnan(S.auroc([], [1.0])) and np.isnan(S.auroc([1.0], [np.nan]))


def test_hierarchical_bootstrap_point_estimate_and_degenerate_intervals():
    units = [[([1.0, 3.0], [0.0, 0.0]), ([5.0], [1.0])], [([2.0, 2.0], [1.0])], [([], [1.0])]]
    point, lo, hi = S.hierarchical_bootstrap(units, 200, np.random.default_rng(0))
    assert point == pytest.approx(np.mean([2.0 - 0.0, 5.0 - 1.0, 2.0 - 1.0]))
    assert lo <= point <= hi and lo >= 1.0 - 1e-12 and hi <= 4.0 + 1e-12
    const = [[([2.0, 2.0], [1.0, 1.0])], [([4.0], [3.0])]]  # every resample gives gap 1
    assert S.hierarchical_bootstrap(const, 50, np.random.default_rng(1)) == pytest.approx((1.0, 1.0, 1.0))
    assert all(np.isnan(S.hierarchical_bootstrap([[([], [])]], 10, np.random.default_rng(2))))
    pt, lo, hi = S.hierarchical_bootstrap(const, 0, np.random.default_rng(3))
    assert pt == 1.0 and np.isnan(lo) and np.isnan(hi)
    # the interval is the 2.5 / 97.5 % quantiles of replicates drawn top-down
    units = [[([0.0, 1.0], [0.0])], [([2.0, 3.0], [0.0])]]
    rng = np.random.default_rng(4)
    reps = []
    for _ in range(300):
        gaps = []
        for ui in rng.integers(0, 2, 2):
            for li in rng.integers(0, 1, 1):
                a, b = [np.asarray(x) for x in units[ui][li]]
                gaps.append(a[rng.integers(0, a.size, a.size)].mean() - b[rng.integers(0, b.size, b.size)].mean())
        reps.append(np.mean(gaps))
    _, lo, hi = S.hierarchical_bootstrap(units, 300, np.random.default_rng(4))
    assert (lo, hi) == pytest.approx(tuple(np.quantile(reps, [0.025, 0.975])))


def test_closure_from_terms_near_nilpotent_and_nonfinite_terms():
    """T = N + eps I with N nilpotent: ||T^2||^2 / ||T||^4 ~ 4 eps^2 falls below ZERO_RTOL, so P,
    alpha, g are undefined (NaN + flag) at every scale of T; a NaN term is undefined too."""
    N_ = np.zeros((4, 4))
    N_[0, 1] = 1.0
    for c in (1.0, 1e-3, 1e3):
        T = c * (N_ + 1e-14 * np.eye(4))
        nT2, ip, nT4 = np.sum(T * T), np.sum((T @ T) * T), np.sum((T @ T) ** 2)
        assert 0 < nT4 <= C.ZERO_RTOL * nT2**2
        P, a, g, und = C.closure_from_terms(nT2, ip, nT4)
        assert und and np.isnan(P) and np.isnan(a) and np.isnan(g)
    for terms in ((1.0, 0.5, np.nan), (np.nan, 0.5, 1.0), (1.0, 0.5, np.inf), (np.inf, 0.5, 1.0)):
        assert C.closure_from_terms(*terms)[3]
    # a small but honest T: g_T = ||T^2|| / ||T|| at any scale (no cut-off at ||T|| <= 1)
    O = RNG.standard_normal((8, 2)) * 1e-3
    V = RNG.standard_normal((8, 2))
    P, a, g, und = C.closure_from_terms(*C.closure_terms(*grams(O, V)))
    Pe, ae, ge, _ = closure_explicit(O, V)
    assert not und and g == pytest.approx(ge, rel=1e-10) and P == pytest.approx(Pe, rel=1e-9)


def test_closure_layer_single_group_zero_head_has_both_flags():
    f = random_layer(H=2, G=1, D=10, d=2, zero=(1,), rng=np.random.default_rng(28))
    out = C.closure_layer(f)
    assert out["flags"].tolist() == ["wrong_v_undefined_G1", "zero_T,wrong_v_undefined_G1"]
    assert out["wrong_v_group"].tolist() == [-1, -1]


def test_mutant_kills_from_the_second_pass():
    """Survivors of `make mutation` pass 2 (docs/hardening.md): NaN in one head's V only flags that
    head; a square layer matrix takes the tall branch (S O with O Haar); ties within rounding of a
    large statistic; a single positive score; the bootstrap resamples every b in full."""
    f = random_layer(H=3, G=3, D=10, d=2, rng=np.random.default_rng(50))
    W_V = f.W_V.copy()
    W_V[2][0, 0] = np.nan
    g = LayerFactors(W_Q=f.W_Q, W_K=f.W_K, W_V=W_V, W_O=f.W_O, kv_group=f.kv_group, norm_gain=f.norm_gain,
                     norm_type=f.norm_type)
    out = C.closure_layer(g)
    assert out["flags"].tolist()[0] == "" and out["flags"][2].startswith("nonfinite")
    Sq = np.random.default_rng(51).standard_normal((5, 5))
    np.testing.assert_allclose(N.rotate_spectrum(Sq, np.random.default_rng(6)),
                               Sq @ N.haar_stiefel(5, 5, np.random.default_rng(6)), atol=1e-12)
    assert S.empirical_p(100.0, [100.0 - 1e-11]) == pytest.approx(1.0)  # within 1e-12 relative: a tie
    assert S.empirical_p(100.0, [100.0 - 1e-6]) == pytest.approx(0.5)
    assert S.auroc([2.0], [1.0, 3.0]) == pytest.approx(0.5) and S.auroc([2.0], [1.0]) == 1.0
    units = [[([0.0], [0.0, 10.0, 20.0, 30.0])]]
    rng = np.random.default_rng(7)
    reps = []
    for _ in range(200):
        rng.integers(0, 1, 1), rng.integers(0, 1, 1)
        a, b = np.array([0.0]), np.array([0.0, 10.0, 20.0, 30.0])
        reps.append(a[rng.integers(0, 1, 1)].mean() - b[rng.integers(0, 4, 4)].mean())
    assert -30 < np.quantile(reps, 0.025)  # a mean of 4 draws rarely reaches the extreme; one draw often does
    _, lo, hi = S.hierarchical_bootstrap(units, 200, np.random.default_rng(7))
    assert (lo, hi) == pytest.approx(tuple(np.quantile(reps, [0.025, 0.975])))
