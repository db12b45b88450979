"""Paper 1 suite (docs/methods.md §1): identities, invariants and determinism of headgeom.methods.paper1,
checked against explicit operators on tiny shapes; the table builders on synthetic layers."""

import numpy as np
import pytest
import scipy.linalg

from headgeom.methods import closure as C
from headgeom.core import stats
from headgeom.methods import paper1 as P1
from headgeom.methods.grams import LayerGrams
from headgeom.outputs.paper1.latent_closure import p1_latent_closure
from headgeom.outputs.paper1.orientation import p1_factorial, p1_orientation_layers, p1_orientation_scramble
from headgeom.outputs.paper1.siblings import p1_anchors, p1_table4_sibling_law
from headgeom.outputs.paper1.strong_tail import p1_table2_strong_tail, p1_threshold_sweep
from headgeom.core.factors import LayerFactors
from headgeom.core.seeds import rng_for
from head_grams import grams
from references import closure_explicit
from synth import closed_head

rng = np.random.default_rng(2024)


def _layer(H=4, G=2, D=24, d=6, seed=0, closed=()):
    """Random LayerFactors; ``closed`` = ((head, alpha), ...) planted exactly closed heads."""
    r = np.random.default_rng(seed)
    W_V = r.standard_normal((G, d, D))
    W_O = r.standard_normal((H, D, d))
    kv = np.arange(H) // (H // G)
    for h, a in closed:
        W_O[h] = closed_head(W_V[kv[h]].T, a)
    return LayerFactors(W_Q=r.standard_normal((H, d, D)), W_K=r.standard_normal((G, d, D)), W_V=W_V, W_O=W_O,
                        kv_group=kv, norm_gain=np.ones(D), norm_type="rmsnorm")


PARAMS = dict(scramble_draws=8, haar_draws=2, split_rtol=1e-8, sv_rtol=1e-12, identity_rtol=1e-10, rank_rtol=1e-6)


# ------------------------------------------------------------------ perturbation split


@pytest.mark.parametrize("d", [3, 6, 16])
def test_perturbation_split_reproduces_P(d):
    for _ in range(20):
        K = rng.standard_normal((d, d))
        D = np.sort(rng.uniform(0.01, 1.0, d))[::-1]
        sp = P1.perturbation_split(K, D)
        P = C.P_of(K, D)
        assert abs(sp["P_split"] - P) <= 1e-12 * max(P, 1e-300) + 1e-14
        assert P1.split_relerr(sp, P) < 1e-12
        assert np.isclose(sp["s"], np.sqrt(C.P_of(K)), rtol=1e-12)  # s = sqrt(P_I(K))
        assert np.isclose(sp["t"], np.sqrt(1 - sp["s"] ** 2), rtol=1e-9, atol=1e-12)
        assert sp["w2"] >= -1e-12 and np.isclose(sp["c"], D.mean())


def test_perturbation_split_scale_bounds_P_and_equals_it_without_cancellation():
    """scale = (|1+a||s| + |b||t|)^2 / den >= P_split (triangle inequality on the numerator), with
    equality when (1+a)s and bt have the same sign: split_relerr's denominator is the size of the
    numerator's terms, not something larger (a larger one would hide a broken identity)."""
    equal = 0
    for d in (3, 6, 16):
        for _ in range(30):
            K = rng.standard_normal((d, d))
            D = rng.uniform(0.01, 1.0, d)
            sp = P1.perturbation_split(K, D)
            assert sp["scale"] >= sp["P_split"] * (1 - 1e-12)
            if (1 + sp["a"]) * sp["s"] >= 0 and sp["b"] * sp["t"] >= 0:
                equal += 1
                assert np.isclose(sp["scale"], sp["P_split"], rtol=1e-12)
    assert equal >= 10  # the equality case was exercised


def test_perturbation_split_sign_convention_when_K2_is_orthogonal_to_K():
    """sigma = 1 when <K^2, K> = 0 exactly (docs/methods.md §1). For this integer K (found by search),
    <K^2, K> = 0 exactly in floating point, so s = 0, u = y = K/||K|| and
    b = <KEK, K> / (c ||K^2|| ||K||) = -4 / (...) < 0, computed here directly; sigma = -1 would
    flip b's sign (P_split, which squares the numerator, would not see it)."""
    K = np.array([[0.0, 0.0, 0.0], [2.0, -2.0, 0.0], [-2.0, 0.0, 2.0]])
    D = np.array([0.75, 0.5, 0.25])
    assert np.sum((K @ K) * K) == 0.0
    sp = P1.perturbation_split(K, D)
    c = D.mean()
    E = np.diag(D - c)
    b = np.sum((K @ E @ K) * K) / (c * np.linalg.norm(K @ K) * np.linalg.norm(K))
    assert sp["s"] == 0 and np.isclose(sp["t"], 1.0) and b < 0
    assert np.isclose(sp["b"], b, rtol=1e-12)


def test_perturbation_split_batched_equals_single():
    K = rng.standard_normal((5, 7, 7))
    D = rng.uniform(0.1, 0.9, (5, 7))
    sp = P1.perturbation_split(K, D)
    for i in range(5):
        one = P1.perturbation_split(K[i], D[i])
        for k in ("a", "b", "w2", "s", "P_split"):
            assert np.isclose(sp[k][i], one[k], rtol=1e-12, atol=1e-15)


def test_split_isoclinic_support_has_no_perturbation():
    K = rng.standard_normal((6, 6))
    sp = P1.perturbation_split(K, np.full(6, 0.4))
    assert abs(sp["a"]) < 1e-14 and abs(sp["b"]) < 1e-14 and sp["w2"] < 1e-28
    assert np.isclose(sp["P_split"], C.P_of(K), rtol=1e-12)


def test_split_one_dimensional_case_s_equals_one():
    # K^2 = beta K exactly (scaled projector): s = 1, u undefined, the 1-D form is used
    Q, _ = np.linalg.qr(rng.standard_normal((6, 6)))
    K = 1.7 * Q[:, :3] @ Q[:, :3].T
    D = np.array([0.9, 0.8, 0.5, 0.4, 0.3, 0.1])
    sp = P1.perturbation_split(K, D)
    assert np.isclose(sp["s"], 1.0, atol=1e-12) and sp["b"] == 0.0 and sp["t"] == 0.0
    assert P1.split_relerr(sp, C.P_of(K, D)) < 1e-12
    assert np.isclose(sp["P_split"], (1 + sp["a"]) ** 2 / ((1 + sp["a"]) ** 2 + sp["w2"]), rtol=1e-12)


def test_split_check_fails_on_a_wrong_term():
    K, D = rng.standard_normal((5, 5)), rng.uniform(0.1, 0.9, 5)
    sp = P1.perturbation_split(K, D)
    bad = dict(sp, P_split=((1 + sp["a"] * 1.01) * sp["s"] + sp["b"] * sp["t"]) ** 2
               / ((1 + sp["a"]) ** 2 + sp["b"] ** 2 + sp["w2"]))
    assert P1.split_relerr(bad, C.P_of(K, D)) > 1e-6


def test_split_chain_from_factors_to_P_of_T():
    O, V = rng.standard_normal((30, 6)), rng.standard_normal((30, 6))
    Dv, K = C.principal_coordinates(*grams(O, V))
    sp = P1.perturbation_split(K, Dv)
    P = closure_explicit(O, V)[0]
    assert abs(sp["P_split"] - P) < 1e-10 * P


def test_heads_layer_asserts_split_identity(monkeypatch):
    real = P1.perturbation_split

    def broken(K, D):
        out = real(K, D)
        out["P_split"] = out["P_split"] * (1 + 1e-6)
        return out

    monkeypatch.setattr(P1.heads, "perturbation_split", broken)  # where heads_layer looks it up
    with pytest.raises(AssertionError, match="perturbation-split identity"):
        P1.heads_layer(_layer(), "m", 0, PARAMS)


# ------------------------------------------------------------------ scrambles


def test_signed_permutation_and_haar_are_orthogonal():
    r = rng_for("m", 0, 0, 0, "test")
    P = P1.signed_permutation(r, 9)
    assert np.all(np.sum(P != 0, 0) == 1) and np.all(np.sum(P != 0, 1) == 1) and set(np.unique(np.abs(P))) == {0, 1}
    Q = P1.haar_orthogonal(r, 9)
    np.testing.assert_allclose(Q.T @ Q, np.eye(9), atol=1e-13)


def test_scramble_preserves_singular_values_support_and_seeds():
    K, D = rng.standard_normal((8, 8)), np.sort(rng.uniform(0.1, 0.9, 8))[::-1]
    pp, ph, err = P1.scramble_draws(K, D, "m", 3, 5, 8, 2)
    assert pp.shape == (8,) and ph.shape == (2,) and err < 1e-12
    # each draw is P_D(P_L K P_R) from rng_for(model, layer, head, draw, purpose), nothing else
    r = rng_for("m", 3, 5, 4, "scramble")
    PL, PR = P1.signed_permutation(r, 8), P1.signed_permutation(r, 8)
    assert pp[4] == C.P_of(PL @ K @ PR, D)
    r = rng_for("m", 3, 5, 1, "haar")
    QL, QR = P1.haar_orthogonal(r, 8), P1.haar_orthogonal(r, 8)
    assert np.isclose(ph[1], C.P_of(QL @ K @ QR, D), rtol=1e-12)
    pp2, ph2, _ = P1.scramble_draws(K, D, "m", 3, 5, 8, 2)
    assert np.array_equal(pp, pp2) and np.array_equal(ph, ph2)
    pp3, _, _ = P1.scramble_draws(K, D, "m", 3, 6, 8, 2)  # another head: other draws
    assert not np.array_equal(pp, pp3)


def test_sv_relerr_detects_a_changed_spectrum():
    K = rng.standard_normal((6, 6))
    assert P1.sv_relerr(K, (2 * K)[None])[0] > 0.5
    Q = P1.haar_orthogonal(rng_for("x", 0, 0, 0, "t"), 6)
    assert P1.sv_relerr(K, (Q @ K)[None])[0] < 1e-13


def test_heads_layer_asserts_singular_values(monkeypatch):
    monkeypatch.setattr(P1.scramble, "signed_permutation", lambda r, d: np.diag(r.uniform(0.5, 2.0, d)))
    with pytest.raises(AssertionError, match="singular values"):
        P1.heads_layer(_layer(), "m", 0, PARAMS)


def test_head_draws_do_not_depend_on_other_heads_or_order():
    f = _layer(H=6, G=3, seed=4)
    cols, _ = P1.heads_layer(f, "mdl", 7, PARAMS)
    geo = LayerGrams(f)
    for h in (5, 0, 3):  # any order, one head at a time
        Dh, Kh = P1.coords(geo, [h], [f.kv_group[h]])
        pp, ph, _ = P1.scramble_draws(Kh[0], Dh[0], "mdl", 7, h, 8, 2)
        np.testing.assert_array_equal(pp, cols["P_scramble"][h])
        np.testing.assert_array_equal(ph, cols["P_haar"][h])
        assert cols["R_scramble"][h] == np.median(pp)


# ------------------------------------------------------------------ factorial


def test_interaction_is_zero_for_additive_S_and_matches_definition():
    a, b = rng.standard_normal(5), rng.standard_normal(5)
    assert np.allclose(P1.interaction(a[:, None] + b[None, :]), 0, atol=1e-12)
    S = rng.standard_normal((4, 4))
    for h in range(4):
        o = [i for i in range(4) if i != h]
        want = S[h, h] - S[h, o].mean() - S[o, h].mean() + S[np.ix_(o, o)].mean()
        assert np.isclose(P1.interaction(S)[h], want)
    assert np.isnan(P1.interaction(np.ones((1, 1)))).all()


def test_donor_sets_move_by_whole_kv_groups():
    sets = P1.donor_sets(np.array([0, 0, 0, 1, 1, 1]))
    assert [s.tolist() for s in sets] == [[0, 3], [1, 4], [2, 5]]
    assert [s.tolist() for s in P1.donor_sets(np.arange(4))] == [[0, 1, 2, 3]]  # MHA
    assert [s.tolist() for s in P1.donor_sets(np.zeros(3, int))] == [[0], [1], [2]]  # MQA: undefined


def test_factorial_S_entries():
    K, D = rng.standard_normal((3, 5, 5)), rng.uniform(0.1, 0.9, (3, 5))
    S = P1.factorial_S(K, D)
    assert np.isclose(S[2, 0], C.P_of(K[2], D[0]))
    assert np.allclose(np.diag(S), C.P_of(K, D))


def test_factorial_planted_heads_and_control():
    f = _layer(H=8, G=8, D=40, d=5, seed=1, closed=((2, 1.3), (5, -0.9)))  # MHA
    cols, pairs = P1.heads_layer(f, "m", 0, PARAMS)
    assert len(pairs["F"]) == 0  # no shared values in MHA
    I, Ic = cols["I_factorial"], cols["I_factorial_ctrl"]
    assert np.all(np.isfinite(I)) and np.all(np.isfinite(Ic))
    # a closed pairing loses closure under donor reassignment: the planted heads interact most
    assert I[2] > 0.1 and I[5] > 0.1 and set(np.argsort(I)[-2:]) == {2, 5}
    assert np.mean(I) - np.mean(Ic) > 0.05
    f1 = _layer(H=4, G=1, seed=2)  # MQA: undefined
    c1, p1 = P1.heads_layer(f1, "m", 0, PARAMS)
    assert np.isnan(c1["I_factorial"]).all() and np.isnan(c1["I_factorial_ctrl"]).all()
    assert len(p1["F"]) == 12 and np.isnan(p1["F_ctrl"]).all() and np.isfinite(p1["F"]).all()


# ------------------------------------------------------------------ capacity


def test_logP_gradient_matches_finite_differences():
    X, D = rng.standard_normal((2, 6, 6)), rng.uniform(0.1, 0.9, (2, 6))
    f, g = P1.logP_and_grad(X, D)
    assert np.allclose(f, P1.logP(X, D)) and np.allclose(np.exp(f), C.P_of(X, D))
    for _ in range(3):
        E = rng.standard_normal((2, 6, 6))
        eps = 1e-6
        fd = (P1.logP(X + eps * E, D) - P1.logP(X - eps * E, D)) / (2 * eps)
        assert np.allclose(fd, np.einsum("kij,kij->k", g, E), rtol=1e-6, atol=1e-8)


def test_retraction_is_exact_and_nearest():
    sigma = np.sort(rng.uniform(0.5, 3, 6))[::-1]
    Y = rng.standard_normal((6, 6))
    X = P1.retract(Y, sigma)
    np.testing.assert_allclose(np.linalg.svd(X, compute_uv=False), sigma, rtol=1e-13)
    for k in range(20):  # no other point of the orbit is closer to Y
        r = rng_for("near", 0, 0, k, "t")
        Z = (P1.haar_orthogonal(r, 6) * sigma) @ P1.haar_orthogonal(r, 6)
        assert np.linalg.norm(Y - X) <= np.linalg.norm(Y - Z) + 1e-12


def test_capacity_is_deterministic_bounded_and_keeps_the_spectrum():
    K, D = rng.standard_normal((7, 7)), np.sort(rng.uniform(0.05, 0.9, 7))[::-1]
    a = P1.feasible_capacity(K, D, "m", 1, 2, 3, 40)
    b = P1.feasible_capacity(K, D, "m", 1, 2, 3, 40)
    assert a == b
    assert a["cap"] >= a["P_start"] and a["cap"] >= a["cap_trained_start"] - 1e-15 and a["cap"] <= 1 + 1e-12
    assert a["cap"] == max(a["cap_trained_start"], a["cap_random"]) and a["sv_relerr"] < 1e-12
    starts, sigma = P1.capacity_starts(K, "m", 1, 2, 3)
    assert np.array_equal(starts[0], K)
    assert P1.sv_relerr(K, starts).max() < 1e-12


def test_capacity_reaches_one_when_the_orbit_contains_a_closed_core():
    # equal singular values and isoclinic support: U sigma W^T = sigma I is in the orbit and closes (P = 1)
    Q = P1.haar_orthogonal(rng_for("q", 0, 0, 0, "t"), 6)
    K = 2.0 * Q
    r = P1.feasible_capacity(K, np.full(6, 0.3), "m", 0, 0, 2, 200)
    assert r["P_start"] < 0.9 and r["cap"] > 1 - 1e-6


def test_capacity_selection_groups():
    P = np.array([0.95, 0.1, 0.2, 0.91, 0.3, 0.05, np.nan, 0.4])
    valid = np.isfinite(P)
    st, mt, sm = P1.capacity_selection(P, valid, 0.9, "fin", 3, 2)
    assert st.tolist() == [True, False, False, True, False, False, False, False]
    assert mt.sum() == 2 and not np.any(mt & st) and np.all(P[mt] < 0.9) and not mt[6]
    assert sm.sum() == 2 and not sm[6]
    # the sample ignores closure; the matched set is a deterministic hash choice
    P2 = np.where(valid, 1 - np.nan_to_num(P), np.nan)
    assert np.array_equal(P1.capacity_selection(P2, valid, 0.9, "fin", 3, 2)[2], sm)
    assert all(np.array_equal(x, y) for x, y in zip(P1.capacity_selection(P, valid, 0.9, "fin", 3, 2), (st, mt, sm)))


def test_attainment_not_clipped():
    E = P1.attainment([0.5, 0.0, 1.0, 0.3], [0.1, 0.2, 0.1, 0.3], [0.9, 0.9, 0.95, 0.3])
    assert np.isclose(E[0], 0.5) and E[1] < 0 and np.isclose(E[2], 0.9 / 0.85) and np.isnan(E[3])


def test_capacity_layer_groups_come_from_the_final_checkpoint():
    final = _layer(H=4, G=2, seed=5, closed=((1, 1.2),))
    early = _layer(H=4, G=2, seed=5)  # same random weights, head 1 not yet closed
    prm = dict(PARAMS, strong_threshold=0.9, restarts=2, iters=15, sample_per_layer=2)
    cf = P1.capacity_layer(final, final, "fin", "fin", 0, prm)
    ce = P1.capacity_layer(early, final, "early", "fin", 0, prm)
    assert cf["head"].tolist() == ce["head"].tolist() and cf["is_strong"].tolist() == ce["is_strong"].tolist()
    s = cf["head"].tolist().index(1)
    assert cf["is_strong"][s] and np.isclose(cf["P"][s], 1.0) and np.isclose(cf["E"][s], 1.0, atol=1e-9)
    assert ce["P"][s] < 0.9 and np.isclose(ce["P_final"][s], 1.0)
    assert cf["is_matched"].sum() == 1 and cf["is_sample"].sum() == 2
    # R in the capacity shard is the same median as in the heads shard
    heads, _ = P1.heads_layer(final, "fin", 0, PARAMS)
    for r, h in enumerate(cf["head"]):
        assert cf["R"][r] == heads["R_scramble"][h]


# ------------------------------------------------------------------ anchors and siblings


def test_anchor_and_oblique_share_match_explicit_operators():
    f = _layer(H=4, G=2, D=20, d=4, seed=3)
    cols, _ = P1.heads_layer(f, "m", 0, PARAMS)
    for h in range(4):
        O = f.W_O[h]
        V = f.W_V[f.kv_group[h]].T
        Vw = f.W_V[(f.kv_group[h] + 1) % 2].T
        T = O @ V.T
        PV = V @ np.linalg.inv(V.T @ V) @ V.T
        PVw = Vw @ np.linalg.inv(Vw.T @ Vw) @ Vw.T
        cos2 = lambda X, Y: np.sum(X * Y) ** 2 / (np.sum(X * X) * np.sum(Y * Y))  # noqa: E731
        assert np.isclose(cols["anchor_cos2"][h], cos2(T, PV), rtol=1e-9)
        assert np.isclose(cols["anchor_cos2_wrong_v"][h], cos2(T, PVw), rtol=1e-9)
        Tn = T / cols["alpha"][h]  # normalized head: same cosine
        assert np.isclose(cols["anchor_cos2"][h], cos2(Tn, PV), rtol=1e-9)
        ob = np.sum(((np.eye(20) - PV) @ T) ** 2) / np.sum(T**2)
        assert np.isclose(cols["oblique_share"][h], ob, rtol=1e-9)


def test_closed_head_is_its_anchor_and_retrieves_its_own_value_factor():
    f = _layer(H=6, G=3, D=30, d=4, seed=6, closed=((4, -1.1),))
    cols, _ = P1.heads_layer(f, "m", 0, PARAMS)
    assert np.isclose(cols["anchor_cos2"][4], 1.0) and np.isclose(cols["oblique_share"][4], 0.0, atol=1e-12)
    assert cols["retrieval_rank"][4] == 1 and cols["n_value_candidates"][4] == 3
    assert cols["anchor_cos2_wrong_v"][4] < cols["anchor_cos2"][4]
    assert P1.retrieval_rank(np.array([0.2, 0.5, 0.1]), 0) == 2


def test_pair_rows_match_explicit_operators_and_control():
    f = _layer(H=6, G=2, D=22, d=4, seed=7)
    cols, pairs = P1.heads_layer(f, "m", 0, PARAMS)
    assert len(pairs["F"]) == 2 * 3 * 2
    T = [f.W_O[h] @ f.W_V[f.kv_group[h]] for h in range(6)]  # O_h V^T, V = W_V[g].T
    for r in range(len(pairs["F"])):
        i, j, ic = pairs["head_i"][r], pairs["head_j"][r], pairs["ctrl_head"][r]
        a = cols["alpha"][j]
        Pij = T[i] @ T[j]
        assert np.isclose(pairs["F"][r], 1 - np.sum((Pij - a * T[i]) ** 2) / np.sum(Pij**2), rtol=1e-8)
        assert np.isclose(pairs["beta"][r], np.sum(Pij * T[i]) / np.sum(T[i] ** 2), rtol=1e-8)
        assert np.isclose(pairs["rho"][r], pairs["beta"][r] / a)
        assert f.kv_group[ic] == (f.kv_group[i] + 1) % 2 and ic % 3 == i % 3  # same slot, next group
        Pc = T[ic] @ T[j]
        assert np.isclose(pairs["F_ctrl"][r], 1 - np.sum((Pc - a * T[ic]) ** 2) / np.sum(Pc**2), rtol=1e-8)
        assert np.isclose(pairs["beta_ctrl"][r], np.sum(Pc * T[ic]) / np.sum(T[ic] ** 2), rtol=1e-8)
        assert np.isclose(pairs["cos2"][r], np.sum(T[i] * T[j]) ** 2 / (np.sum(T[i] ** 2) * np.sum(T[j] ** 2)), rtol=1e-9)
        # the gamma bound, against scipy's generalized eigenvalues and explicit operators
        A_i, A_j = f.W_O[i].T @ f.W_O[i], f.W_O[j].T @ f.W_O[j]
        gam = scipy.linalg.eigh(A_i, A_j, eigvals_only=True)[-1]
        assert np.isclose(pairs["gamma"][r], gam, rtol=1e-9)
        for x in (a, -2.0, 0.5):
            lhs = np.sum((Pij - x * T[i]) ** 2)
            rhs = np.sum((T[j] @ T[j] - x * T[j]) ** 2)
            assert lhs <= gam * rhs * (1 + 1e-10)
        assert np.isclose(pairs["bound_lhs"][r], np.sum((Pij - a * T[i]) ** 2), rtol=1e-8)


def test_exactly_closed_right_head_gives_F_and_rho_one():
    f = _layer(H=4, G=2, D=24, d=6, seed=8, closed=((1, 1.8),))
    cols, pairs = P1.heads_layer(f, "m", 0, PARAMS)
    r = [k for k in range(len(pairs["F"])) if pairs["head_i"][k] == 0 and pairs["head_j"][k] == 1][0]
    assert np.isclose(pairs["F"][r], 1.0, atol=1e-10) and np.isclose(pairs["rho"][r], 1.0, rtol=1e-10)
    assert abs(pairs["rho_ctrl"][r]) < 0.5
    # the bound is tight in the sense that both sides vanish at a = alpha_j
    T1 = f.W_O[1] @ f.W_V[0]
    assert abs(pairs["bound_rhs"][r]) < 1e-12 * np.sum((T1 @ T1) ** 2)


def test_product_law_general_with_a_shared_V_matches_explicit_operators():
    O_i, O_j, V = (rng.standard_normal((20, 5)) for _ in range(3))
    A_i, B = O_i.T @ O_i, V.T @ V
    F, beta, rho = P1.product_law_general(A_i, B, B, B, V.T @ O_j, 0.7)
    Ti, Tj = O_i @ V.T, O_j @ V.T
    P = Ti @ Tj
    beta_ex = np.sum(P * Ti) / np.sum(Ti**2)
    assert F == pytest.approx(1 - np.sum((P - 0.7 * Ti) ** 2) / np.sum(P**2), rel=1e-10)
    assert beta == pytest.approx(beta_ex, rel=1e-10) and rho == pytest.approx(beta_ex / 0.7, rel=1e-10)


def test_gamma_bound_violation_is_an_error(monkeypatch):
    real = P1.gamma_bound
    monkeypatch.setattr(P1.siblings, "gamma_bound", lambda A_i, A_j: 0.01 * real(A_i, A_j))
    with pytest.raises(AssertionError, match="gamma bound"):
        P1.heads_layer(_layer(H=4, G=2, seed=9), "m", 0, PARAMS)


def test_heads_layer_survives_degenerate_heads():
    f = _layer(H=4, G=2, seed=10)
    f.W_O[1] = 0.0
    f.W_O[2][:, -1] = f.W_O[2][:, 0]
    cols, pairs = P1.heads_layer(f, "m", 0, PARAMS)
    assert not cols["valid"][1] and not cols["valid"][2] and cols["valid"][0]
    assert np.isnan(cols["R_scramble"][1]) and np.isnan(cols["split_a"][2]) and np.isfinite(cols["R_scramble"][0])
    assert np.isnan(cols["I_factorial"][1]) and cols["retrieval_rank"][2] == -1
    bad = (pairs["head_i"] == 1) | (pairs["head_j"] == 1)
    assert np.isnan(pairs["F"][bad]).all()


# ------------------------------------------------------------------ aggregation helpers and tables


def test_auroc_against_brute_force():
    pos, neg = rng.standard_normal(7) + 1, rng.standard_normal(9)
    pos[0] = neg[0]  # a tie
    brute = np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg])
    assert np.isclose(stats.auroc(pos, neg), brute)
    assert stats.auroc([1, 2], [0]) == 1.0 and np.isnan(stats.auroc([], [1]))


def test_auroc_counting_equals_the_rank_sum_bit_for_bit():
    """The one AUROC (tie-group counting, core.stats.auroc_sorted) against the rank-sum formula the
    tables used before (scipy's average ranks, U = R_pos - n(n+1)/2): equal bits with ties, NaN and
    ±inf scores (dropped), one-element and empty classes, float32 input and large samples."""
    from scipy.stats import rankdata

    def rank_sum(pos, neg):
        pos, neg = np.asarray(pos, float), np.asarray(neg, float)
        pos, neg = pos[np.isfinite(pos)], neg[np.isfinite(neg)]
        if not pos.size or not neg.size:
            return np.nan
        r = rankdata(np.concatenate([pos, neg]))
        return float((r[: pos.size].sum() - pos.size * (pos.size + 1) / 2) / (pos.size * neg.size))

    r = np.random.default_rng(12)
    cases = [(np.round(r.uniform(0, 1, n), k), np.round(r.uniform(0, 1, m), k)) for n, m, k in
             ((7, 9, 1), (50, 3, 2), (1, 40, 1), (400, 611, 3), (3000, 2500, 12))]
    a, b = np.round(r.standard_normal(80), 1), np.round(r.standard_normal(60), 1)
    a[::7], b[::5], a[3], b[4] = np.nan, np.nan, np.inf, -np.inf
    cases += [(a, b), (np.float32([0.5, 0.25, 0.25]), np.float32([0.25, 0.125])), ([2.0], [2.0]), ([], [1.0]),
              ([np.nan], [1.0]), ([1.0, 1.0], [1.0, 1.0, 1.0])]
    for pos, neg in cases:
        got, want = stats.auroc(pos, neg), rank_sum(pos, neg)
        assert (np.isnan(got) and np.isnan(want)) or np.float64(got).tobytes() == np.float64(want).tobytes()
    assert stats.auroc([1.0, 1.0], [1.0, 1.0, 1.0]) == 0.5


def test_layer_groups_keep_the_bootstrap_order():
    """The clusters the bootstrap resamples by position: models in order of first appearance, each
    model's layers ascending (not in row order), rows as positions within the selection."""
    from headgeom.methods.paper1.common import layer_rows, model_layer_clusters

    cols = {"model": np.array(["b", "a", "b", "a", "b", "b"]), "layer": np.array([3, 1, 0, 1, 3, 2])}
    rows = np.array([True, True, True, True, True, False])
    got = [[r.tolist() for r in c] for c in model_layer_clusters(cols, rows)]
    assert got == [[[2], [0, 4]], [[1, 3]]]
    assert [(L, r.tolist()) for L, r in layer_rows([3, 1, 3, 0])] == [(0, [3]), (1, [1]), (3, [0, 2])]
    assert model_layer_clusters(cols, np.zeros(6, bool)) == [] and layer_rows([]) == []


def test_hierarchical_bootstrap():
    units = [[(np.array([1.0, 1.2]), np.array([0.1, 0.3])), (np.array([0.8]), np.array([0.2, 0.0]))]]
    a = stats.hierarchical_bootstrap(units, 200, rng_for("l", "c", -1, 0, "bootstrap"))
    b = stats.hierarchical_bootstrap(units, 200, rng_for("l", "c", -1, 0, "bootstrap"))
    assert a == b and a[1] <= a[0] <= a[2]
    assert np.isclose(a[0], np.mean([1.1 - 0.2, 0.8 - 0.1]))
    const = [[(np.array([1.0]), np.array([0.5]))] * 3]
    assert stats.hierarchical_bootstrap(const, 50, rng_for("x", 0, 0, 0, "b")) == (0.5, 0.5, 0.5)


def _cols_for(layers, model="m"):
    from headgeom.io.shards import read_shards  # noqa: F401  (same column layout as the shards)

    heads, pairs = {}, {}
    for L, f in enumerate(layers):
        h, p = P1.heads_layer(f, model, L, PARAMS)
        for dst, src in ((heads, h), (pairs, p)):
            n = len(next(iter(src.values())))
            src = {"model": np.array([model] * n, dtype=object), "layer": np.full(n, L), **src}
            for k, v in src.items():
                dst.setdefault(k, []).extend(list(v))
    return ({k: np.array(v, dtype=object if k in ("P_scramble", "P_haar", "flags", "model") else None)
             for k, v in heads.items()},
            {k: np.array(v) for k, v in pairs.items()})


def test_tables_on_planted_layers():
    layers = [_layer(H=4, G=2, D=30, d=5, seed=11, closed=((0, 1.5),)), _layer(H=4, G=2, D=30, d=5, seed=12, closed=((3, -0.8),))]
    heads, pairs = _cols_for(layers)
    t2 = p1_table2_strong_tail(heads, ["m"], 0.9, [0.75, 0.9, 0.975])
    row = t2.rows[0]
    assert row["strong"] == 2 and row["heads"] == 8 and row["neg_alpha"] == 0.5 and row["layers"] == 2
    t4 = p1_table4_sibling_law(pairs, ["m"], 0.9)
    assert t4.rows[0]["right"] == 2 and t4.rows[0]["comp"] == 2
    assert np.isclose(t4.rows[0]["F"], 1.0) and np.isclose(t4.rows[0]["rho"], 1.0)
    an = p1_anchors(pairs, heads, ["m"], 0.9).rows[0]
    assert an["rank1"] == "2/2" and np.isclose(an["anchor"], 1.0)
    sc = p1_orientation_scramble(heads, ["m"], 0.9).rows[0]
    assert sc["heads"] == 8 and sc["sv_max"] < 1e-12
    assert sc["draws"] == sum(int(np.isfinite(np.asarray(v, float)).sum()) for v in heads["P_scramble"]) > 8
    sw = p1_threshold_sweep(heads, ["m"], [0.75, 0.9])
    assert [r["t"] for r in sw.rows] == [0.75, 0.9]
    for tab in (t2, t4, sw, p1_orientation_layers(heads, ["m"], 0.9), p1_factorial(heads, ["m"]),
                p1_latent_closure(heads, ["m"], 0.9)):
        assert tab.name == "" and tab.caption == ""  # the registration names it, the docstring captions it
        md = tab.markdown()
        header = md.splitlines()[2]
        assert header.count("|") == len(tab.columns) + 1  # no stray pipes in headers
        tex = tab.latex()
        assert "^" not in tex.replace("$^2$", "").replace("$^", "")  # no bare carets outside math


# ------------------------------------------------------------------ configuration


def _merge(a, b):
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def test_paper_config_validates_and_its_lineages_exist(root):
    import re
    import textwrap

    import jsonschema
    import yaml

    schema = yaml.safe_load((root / "workflow/schemas/config.schema.yaml").read_text())
    base = yaml.safe_load((root / "config/config.yaml").read_text())
    paper_text = (root / "config/paper.yaml").read_text()
    paper = yaml.safe_load(paper_text)
    jsonschema.validate(base, schema)
    merged = _merge(base, paper)
    jsonschema.validate(merged, schema)
    assert merged["paper1"]["capacity"]["restarts"] > base["paper1"]["capacity"]["restarts"]
    assert np.allclose(merged["paper1"]["sweep"], [0.75 + 0.025 * k for k in range(10)])
    # the commented lineages: uncommented, with config/models.yaml, they validate and match its tags
    lines = paper_text.splitlines()
    start = next(k for k, ln in enumerate(lines) if ln.strip().startswith("# lineages:"))
    block = [re.sub(r"^(\s*)# ?", r"\1", ln) for ln in lines[start:] if ln.strip().startswith("#")]
    lineages = yaml.safe_load(textwrap.dedent("\n".join(block)))["lineages"]
    models = yaml.safe_load((root / "config/models.yaml").read_text())["models"]
    full = _merge(_merge(merged, {"models": models}), {"paper1": {"lineages": lineages}})
    jsonschema.validate(full, schema)
    assert len(lineages) == 3
    for name, members in lineages.items():
        assert len(members) == 4 and all(models[m].get("lineage", name) == name for m in members), name
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(_merge(base, {"paper1": {"capacity": {"restarts": 0}}}), schema)
