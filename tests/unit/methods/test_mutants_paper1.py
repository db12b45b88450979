"""Tests written to kill surviving mutants of the paper-1 modules other than capacity and heads
(split, siblings, factorial, scramble, common, anchors): issue 11, docs/mutation/paper1-other.md.

Every expected value is computed here, independently of headgeom: explicit d_model x d_model
operators T_h = O_h V_g^T, explicit projectors, SVDs of the factors, scipy's generalized
eigenvalues, brute-force definitions, or distributional facts (Haar measure, fair signs).
Layouts include GQA, MQA, MHA, unequal KV groups and rank-deficient heads; the transport cores
and M are non-symmetric."""

import numpy as np
import pytest
import scipy.linalg

from headgeom.core.factors import LayerFactors
from headgeom.core.seeds import rng_for
from headgeom.methods import closure as C
from headgeom.methods import paper1 as P1
from headgeom.methods.grams import LayerGrams


# ------------------------------------------------------------------ independent helpers


def _factors(W_O, W_V, kv, seed=0):
    r = np.random.default_rng(seed)
    H, D, d = W_O.shape
    G = W_V.shape[0]
    return LayerFactors(W_Q=r.standard_normal((H, d, D)), W_K=r.standard_normal((G, d, D)), W_V=W_V, W_O=W_O,
                        kv_group=np.asarray(kv), norm_gain=None, norm_type="none")


def _random_layer(kv, G, D=18, d=4, seed=0):
    r = np.random.default_rng(seed)
    kv = np.asarray(kv)
    return r.standard_normal((len(kv), D, d)), r.standard_normal((G, d, D))


def _with_spectrum(r, D, s):
    """A D x len(s) factor with singular values s (random orthonormal frames)."""
    U = np.linalg.qr(r.standard_normal((D, len(s))))[0]
    W = np.linalg.qr(r.standard_normal((len(s), len(s))))[0]
    return U @ np.diag(s) @ W.T


def _rank(X, rtol):
    s = np.linalg.svd(X, compute_uv=False)
    return int(np.sum(s > rtol * s[0])) if s[0] > 0 else 0


def _T(f, h, g=None):
    """The explicit d_model x d_model operator O_h V_g^T (g defaults to h's own KV group)."""
    g = f.kv_group[h] if g is None else g
    return f.W_O[h] @ f.W_V[g]


def _ip(X, Y):
    return float(np.trace(X.T @ Y))


def _P_D(K, D):
    """P_D(K) = <KDK, K>^2 / (||KDK||^2 ||K||^2) with an explicit diagonal matrix."""
    KDK = K @ np.diag(D) @ K
    return _ip(KDK, K) ** 2 / (_ip(KDK, KDK) * _ip(K, K))


# ------------------------------------------------------------------ common: LayerGrams ranks, valid_heads


def _deficient_layer(kv, G, ratio, bad_head=1, D=20, d=4, seed=11):
    """Random layer whose head ``bad_head`` has O with singular values (1, .7, .4, ratio)."""
    r = np.random.default_rng(seed)
    W_O, W_V = _random_layer(kv, G, D, d, seed)
    W_O[bad_head] = _with_spectrum(r, D, [1.0, 0.7, 0.4, ratio])
    return _factors(W_O, W_V, kv, seed)


def test_layer_grams_use_their_rank_tolerance():
    f = _deficient_layer([0, 0, 1, 1], 2, ratio=1e-4)
    assert _rank(f.W_O[1], 1e-6) == 4 and _rank(f.W_O[1], 1e-3) == 3  # independent SVD ranks
    assert LayerGrams(f).rank_O.tolist() == [4, 4, 4, 4]
    geo = LayerGrams(f, rank_rtol=1e-3)
    assert geo.rank_O.tolist() == [4, 3, 4, 4]
    # Vg: (G, D, d), the value factors V_g = W_V[g]^T themselves, B_g = V_g^T V_g
    assert geo.Vg.shape == (2, 20, 4)
    for gg in range(2):
        np.testing.assert_array_equal(geo.Vg[gg], f.W_V[gg].T)
        np.testing.assert_allclose(geo.Vg[gg].T @ geo.Vg[gg], f.W_V[gg] @ f.W_V[gg].T, rtol=1e-12)


def test_coords_of_no_heads_are_empty_with_the_right_shapes():
    f = _factors(*_random_layer([0, 0, 1, 1], 2, d=5), [0, 0, 1, 1])
    D, K = P1.coords(LayerGrams(f), [], [])
    assert D.shape == (0, 5) and K.shape == (0, 5, 5)


@pytest.mark.parametrize("kv,G", [pytest.param([0, 0, 1, 1], 2, id="GQA"), pytest.param([0, 0, 0, 0], 1, id="MQA")])
def test_valid_heads_excludes_a_head_flagged_by_the_closure_or_deficient_in_the_geometry(kv, G):
    """valid_heads takes the union of the closure's exclusions (its flags, also inside a
    comma-separated list such as MQA's 'rank_deficient,wrong_v_undefined_G1') and the
    geometry's ranks: a tolerance that differs between the two never lets a head through."""
    f = _deficient_layer(kv, G, ratio=1e-4)
    strict, loose = 1e-3, 1e-6  # head 1 is rank-deficient at 1e-3 only (independent SVD above)
    want = np.array([True, False, True, True])
    base_strict = C.closure_layer(f, rank_rtol=strict)
    assert "rank_deficient" in base_strict["flags"][1].split(",")
    assert np.isfinite(base_strict["P"][1])  # P itself is defined: only the flag excludes it
    np.testing.assert_array_equal(P1.valid_heads(base_strict, LayerGrams(f, loose)), want)
    base_loose = C.closure_layer(f, rank_rtol=loose)
    assert "rank_deficient" not in base_loose["flags"][1]
    np.testing.assert_array_equal(P1.valid_heads(base_loose, LayerGrams(f, strict)), want)
    np.testing.assert_array_equal(P1.valid_heads(base_loose, LayerGrams(f, loose)), np.ones(4, bool))


def test_valid_heads_of_a_layer_without_query_heads():
    r = np.random.default_rng(0)
    f = LayerFactors(W_Q=np.zeros((0, 4, 10)), W_K=r.standard_normal((1, 4, 10)), W_V=r.standard_normal((1, 4, 10)),
                     W_O=np.zeros((0, 10, 4)), kv_group=np.zeros(0, int), norm_gain=None, norm_type="none")
    v = P1.valid_heads(C.closure_layer(f), LayerGrams(f))
    assert v.dtype == bool and v.shape == (0,)


# ------------------------------------------------------------------ split


@pytest.mark.parametrize("delta", [1e-6, 1e-8])
@pytest.mark.parametrize("core", ["isotropic", "oblique_projector"])
def test_split_near_the_one_dimensional_case(core, delta):
    """y = sigma K/||K|| within ~delta of x = K^2/||K^2|| (K a near-closed core, non-symmetric):
    t = <u, y> must be the sine of the angle between x and y, computed here stably as
    ||y - x|| ||y + x|| / 2 (it only holds if u is orthogonal to x to machine precision), and the
    split must reproduce P_D(K) to rounding."""
    r = np.random.default_rng(3)
    d = 6
    if core == "isotropic":
        K0 = 1.3 * np.eye(d)
    else:  # c E, E an oblique (non-symmetric) projector of rank 4: E^2 = E
        S = r.standard_normal((d, d))
        K0 = -0.8 * S @ np.diag([1, 1, 1, 1, 0, 0.0]) @ np.linalg.inv(S)
    K = K0 + delta * r.standard_normal((d, d))
    D = r.uniform(0.1, 1.0, d)
    X = K @ K
    x = X / np.linalg.norm(X)
    y = np.sign(_ip(X, K)) * K / np.linalg.norm(K)
    t_ind = np.linalg.norm(y - x) * np.linalg.norm(y + x) / 2
    assert 1e-10 < t_ind < 1e-4  # the regime where u = (y - s x)/||.|| loses orthogonality easily
    sp = P1.perturbation_split(K, D)
    assert abs(sp["t"] - t_ind) <= 1e-6 * t_ind
    P = _P_D(K, D)
    assert abs(sp["P_split"] - P) <= 1e-12 * P
    assert P1.split_relerr(sp, P) < 1e-12


# ------------------------------------------------------------------ factorial


def _interaction_brute(S):
    n = S.shape[0]
    out = []
    for h in range(n):
        o = [i for i in range(n) if i != h]
        out.append(S[h, h] - np.mean(S[h, o]) - np.mean(S[o, h]) + np.mean(S[np.ix_(o, o)]))
    return np.array(out)


def test_interaction_and_contrasts_with_two_donors():
    S = np.array([[0.9, 0.2], [0.4, 0.7]])
    I = S[0, 0] - S[0, 1] - S[1, 0] + S[1, 1]  # n = 2: every mean is a single entry
    np.testing.assert_allclose(P1.interaction(S), [I, I], rtol=1e-14)
    c = P1.factorial.contrasts(S)
    np.testing.assert_allclose(c["interaction"], [I, I], rtol=1e-14)
    np.testing.assert_allclose(c["row"], [0.9 - 0.2, 0.7 - 0.4], rtol=1e-14)
    np.testing.assert_allclose(c["column"], [0.9 - 0.4, 0.7 - 0.2], rtol=1e-14)


def test_contrasts_of_a_single_donor_are_undefined():
    c = P1.factorial.contrasts(np.array([[0.5]]))
    assert set(c) == {"interaction", "row", "column"}
    for v in c.values():
        assert v.shape == (1,) and v.dtype == np.float64 and np.isnan(v).all()


def test_factorial_layer_on_gqa_donor_sets_of_two():
    """H = 4, two KV groups: donor sets {0, 2} and {1, 3}. The default return is the interaction
    array; S comes from an explicit P_D(K)."""
    r = np.random.default_rng(21)
    H, d = 4, 5
    Ks, Ds = r.standard_normal((H, d, d)), r.uniform(0.05, 1.0, (H, d))
    kv = np.array([0, 0, 1, 1])
    want = {k: np.full(H, np.nan) for k in ("interaction", "row", "column")}
    for dset in ([0, 2], [1, 3]):
        S = np.array([[_P_D(Ks[i], Ds[j]) for j in dset] for i in dset])
        want["interaction"][dset] = _interaction_brute(S)
        want["row"][dset] = np.diag(S) - (S.sum(1) - np.diag(S))
        want["column"][dset] = np.diag(S) - (S.sum(0) - np.diag(S))
    got = P1.factorial_layer(Ks, Ds, np.ones(H, bool), kv)
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, want["interaction"], rtol=1e-10)
    allc = P1.factorial_layer(Ks, Ds, np.ones(H, bool), kv, all_contrasts=True)
    for k in want:
        np.testing.assert_allclose(allc[k], want[k], rtol=1e-10)
    # an invalid head leaves its donor set with one member: undefined there, untouched elsewhere
    got = P1.factorial_layer(Ks, Ds, np.array([True, True, False, True]), kv)
    assert np.isnan(got[[0, 2]]).all()
    np.testing.assert_allclose(got[[1, 3]], want["interaction"][[1, 3]], rtol=1e-10)


# ------------------------------------------------------------------ scrambles


def test_signed_permutation_signs_are_fair_and_independent_per_entry():
    d, n = 8, 64
    mats = [P1.signed_permutation(rng_for("m", 1, 2, k, "scramble"), d) for k in range(n)]
    for P in mats:
        assert np.all(np.sum(P != 0, 0) == 1) and np.all(np.sum(P != 0, 1) == 1)
    signs = np.concatenate([P[P != 0] for P in mats])
    assert set(np.unique(signs)) == {-1.0, 1.0}
    assert 0.4 < np.mean(signs < 0) < 0.6  # 512 fair signs: sd 0.022
    # signs vary within one draw (not one global sign per matrix): P(all equal) = 2^-7 per draw
    assert sum(len(np.unique(P[P != 0])) == 2 for P in mats) >= n - 4


def test_haar_orthogonal_is_haar_distributed():
    """Under Haar measure Q and -Q (and Q with any column flipped) are equally likely: E[Q] = 0
    and Q[0, 0] is positive half the time. QR without the sign fix has Q[0, 0] < 0 always."""
    d, n = 4, 400
    Qs = np.stack([P1.haar_orthogonal(rng_for("h", 0, 0, k, "haar"), d) for k in range(n)])
    np.testing.assert_allclose(np.swapaxes(Qs, -1, -2) @ Qs, np.broadcast_to(np.eye(d), Qs.shape), atol=1e-13)
    assert 0.4 < np.mean(Qs[:, 0, 0] > 0) < 0.6
    assert np.abs(Qs.mean(0)).max() < 0.1  # entries have sd 1/2: the mean of 400 has sd 0.025
    assert abs(np.mean(np.trace(Qs, axis1=1, axis2=2))) < 0.25  # E tr Q = 0, sd of the mean 0.05


def test_sv_relerr_against_known_spectra():
    r = np.random.default_rng(9)
    d = 3

    def with_sv(s):
        return _with_spectrum(r, d, s)

    K = with_sv([3.0, 2.0, 1.0])
    Ks = np.stack([with_sv([3.0, 2.0, 1.5]), with_sv([3.3, 2.0, 1.0]), with_sv([3.0, 2.0, 1.0])])
    got = P1.sv_relerr(K, Ks)
    assert got.shape == (3,)
    np.testing.assert_allclose(got, [0.5 / 3, 0.3 / 3, 0.0], atol=1e-14)
    stack = np.stack([Ks, Ks[::-1]])  # (2, 3, d, d): one value per K'
    np.testing.assert_allclose(P1.sv_relerr(K, stack), [[0.5 / 3, 0.3 / 3, 0.0], [0.0, 0.3 / 3, 0.5 / 3]], atol=1e-14)


def test_scramble_draws_with_no_draws():
    r = np.random.default_rng(1)
    pp, ph, err = P1.scramble_draws(r.standard_normal((4, 4)), r.uniform(0.1, 1, 4), "m", 0, 0, 0, 0)
    assert pp.shape == (0,) and ph.shape == (0,) and err == 0.0


# ------------------------------------------------------------------ anchors


def test_anchor_scores_against_explicit_projectors_with_a_rank_deficient_value_group():
    """G = 3, V of group 0 rank-deficient: its score is NaN, the later groups' scores are the
    explicit squared cosines <T_h, P_V>^2 / (||T_h||^2 ||P_V||^2); with or without a cache."""
    kv = [0, 0, 1, 1, 2, 2]
    W_O, W_V = _random_layer(kv, 3, D=16, d=4, seed=5)
    W_V[0][-1] = W_V[0][0]  # a repeated row of W_V: V_0 has rank 3
    f = _factors(W_O, W_V, kv)
    geo = LayerGrams(f)
    assert geo.rank_V.tolist() == [3, 4, 4]
    proj = [None] + [f.W_V[g].T @ np.linalg.inv(f.W_V[g] @ f.W_V[g].T) @ f.W_V[g] for g in (1, 2)]
    cache = {}
    for h in (2, 5, 3):
        T = _T(f, h)
        want = [np.nan] + [_ip(T, Pv) ** 2 / (_ip(T, T) * _ip(Pv, Pv)) for Pv in proj[1:]]
        np.testing.assert_allclose(P1.anchor_scores(geo, h, _ip(T, T)), want, rtol=1e-9)
        np.testing.assert_allclose(P1.anchor_scores(geo, h, _ip(T, T), cache), want, rtol=1e-9)
    # the caller's cache holds B_g^{-1} C[g, g'] for every full-rank candidate g and used g'
    assert set(cache) == {(g, g0) for g in (1, 2) for g0 in (1, 2)}
    for (g, g0), X in cache.items():
        np.testing.assert_allclose(X, scipy.linalg.solve(f.W_V[g] @ f.W_V[g].T, f.W_V[g] @ f.W_V[g0].T), rtol=1e-9, atol=1e-12)


def test_retrieval_rank_of_an_undefined_own_score():
    assert P1.retrieval_rank(np.array([0.3, np.nan, 0.9]), 1) == -1
    assert P1.retrieval_rank(np.array([np.nan, 0.5, 0.2, 0.7]), 2) == 3  # NaN candidates do not count


# ------------------------------------------------------------------ siblings


def _pair_expect(f, i, j, a, ic):
    """F, beta, F_ctrl, beta_ctrl from explicit operators (ic = -1: no control)."""
    Ti, Tj = _T(f, i), _T(f, j)
    Pij = Ti @ Tj
    F = 1 - np.sum((Pij - a * Ti) ** 2) / np.sum(Pij**2)
    beta = _ip(Pij, Ti) / _ip(Ti, Ti)
    if ic < 0:
        return F, beta, np.nan, np.nan
    Tc = _T(f, ic)  # O_ic with its own (next) group's V
    Pc = Tc @ Tj
    return F, beta, 1 - np.sum((Pc - a * Tc) ** 2) / np.sum(Pc**2), _ip(Pc, Tc) / _ip(Tc, Tc)


def _valid_independent(f, rtol=1e-6):
    d = f.W_O.shape[-1]
    return np.array([_rank(f.W_O[h], rtol) == d and _rank(f.W_V[f.kv_group[h]].T, rtol) == d for h in range(len(f.kv_group))])


def test_pair_rows_on_unequal_kv_groups_with_deficient_heads():
    """G = 3 with groups of 1, 3 and 2 heads (LayerFactors accepts any map into range(G)): a
    one-head group has no pairs but later groups do; the control is the same slot of group
    g + 1 (not g - 1), -1 where that group has no such slot; a pair with an invalid head keeps
    its control head; a rank-deficient control head gives NaN control columns."""
    kv = [0, 1, 1, 1, 2, 2]
    W_O, W_V = _random_layer(kv, 3, D=18, d=4, seed=13)
    W_O[2][:, -1] = W_O[2][:, 0]  # head 2 (group 1, slot 1) rank-deficient
    W_O[0][:, -1] = 2 * W_O[0][:, 1]  # head 0 (group 0, slot 0; control of group 2's slot 0) too
    f = _factors(W_O, W_V, kv)
    valid = _valid_independent(f)
    assert valid.tolist() == [False, True, False, True, True, True]
    alpha = np.array([0.3, -1.2, 0.8, 1.7, -0.6, 2.1])  # any gains: F uses alpha_j as given
    P = np.linspace(0.1, 0.6, 6)
    pr = P1.pair_rows(LayerGrams(f), P, alpha, valid)
    ctrl = {1: 4, 2: 5, 3: -1, 4: 0, 5: -1}  # group 1 -> group 2 = [4, 5]; group 2 -> group 0 = [0]
    pairs = [(i, j) for grp in ([1, 2, 3], [4, 5]) for i in grp for j in grp if i != j]
    assert list(zip(pr["head_i"].tolist(), pr["head_j"].tolist())) == pairs
    for r, (i, j) in enumerate(pairs):
        assert pr["ctrl_head"][r] == ctrl[i]
        assert pr["kv_group"][r] == kv[i] and pr["alpha_j"][r] == alpha[j] and pr["P_i"][r] == P[i]
        if not (valid[i] and valid[j]):
            for k in ("F", "beta", "rho", "F_ctrl", "beta_ctrl", "rho_ctrl", "gamma"):
                assert np.isnan(pr[k][r]), (i, j, k)
            continue
        ic = ctrl[i] if ctrl[i] >= 0 and valid[ctrl[i]] else -1
        F, beta, Fc, bc = _pair_expect(f, i, j, alpha[j], ic)
        np.testing.assert_allclose([pr["F"][r], pr["beta"][r], pr["rho"][r]], [F, beta, beta / alpha[j]], rtol=1e-8)
        if ic < 0:
            assert np.isnan([pr["F_ctrl"][r], pr["beta_ctrl"][r], pr["rho_ctrl"][r]]).all(), (i, j)
        else:
            np.testing.assert_allclose([pr["F_ctrl"][r], pr["beta_ctrl"][r], pr["rho_ctrl"][r]],
                                       [Fc, bc, bc / alpha[j]], rtol=1e-8)
    # the rank-deficient control (head 0) was reached: group 2's slot-0 rows exist and are NaN
    assert np.isnan(pr["F_ctrl"][(pr["head_i"] == 4)]).all() and (pr["ctrl_head"][pr["head_i"] == 4] == 0).all()


def test_pair_rows_control_is_the_next_group_for_three_groups():
    kv = [0, 0, 1, 1, 2, 2]
    W_O, W_V = _random_layer(kv, 3, D=18, d=4, seed=17)
    f = _factors(W_O, W_V, kv)
    alpha = np.array([1.1, -0.7, 0.9, 1.4, -1.3, 0.6])
    pr = P1.pair_rows(LayerGrams(f), np.zeros(6), alpha, np.ones(6, bool))
    for r in range(len(pr["F"])):
        i, j, ic = int(pr["head_i"][r]), int(pr["head_j"][r]), int(pr["ctrl_head"][r])
        assert kv[ic] == (kv[i] + 1) % 3 and ic % 2 == i % 2
        F, beta, Fc, bc = _pair_expect(f, i, j, alpha[j], ic)
        np.testing.assert_allclose([pr["F_ctrl"][r], pr["beta_ctrl"][r]], [Fc, bc], rtol=1e-8)


def test_pair_rows_mqa_has_no_control_and_survives_an_invalid_head():
    kv = [0, 0, 0]
    W_O, W_V = _random_layer(kv, 1, D=14, d=3, seed=19)
    W_O[1] = 0.0
    f = _factors(W_O, W_V, kv)
    valid = _valid_independent(f)
    assert valid.tolist() == [True, False, True]
    pr = P1.pair_rows(LayerGrams(f), np.zeros(3), np.ones(3), valid)
    assert len(pr["F"]) == 6 and (pr["ctrl_head"] == -1).all() and np.isnan(pr["F_ctrl"]).all()
    ok = (pr["head_i"] != 1) & (pr["head_j"] != 1)
    assert np.isfinite(pr["F"][ok]).all() and np.isnan(pr["F"][~ok]).all()


def test_pair_rows_column_dtypes_also_when_there_are_no_pairs():
    ints = ("kv_group", "head_i", "head_j", "ctrl_head")
    for kv, G in (([0, 0, 1, 1], 2), ([0, 1, 2], 3)):  # GQA; MHA (no sibling pairs)
        f = _factors(*_random_layer(kv, G, d=3, seed=23), kv)
        pr = P1.pair_rows(LayerGrams(f), np.zeros(len(kv)), np.ones(len(kv)), np.ones(len(kv), bool))
        n = 4 if G == 2 else 0
        for k, v in pr.items():
            assert v.shape == (n,)
            assert v.dtype == (np.int64 if k in ints else np.float64), (k, v.dtype)


def _guard_layer():
    """MQA, two heads whose M = V^T O is 2I plus a non-symmetric part, plus a component outside
    span(V): <T_i T_j, T_i> > 0 for both ordered pairs."""
    r = np.random.default_rng(0)
    D, d = 16, 4
    W_V = r.standard_normal((1, d, D))
    V = W_V[0].T
    W_O = np.stack([V @ np.linalg.inv(V.T @ V) @ (2 * np.eye(d) + r.standard_normal((d, d))) + 0.3 * r.standard_normal((D, d))
                    for _ in range(2)])
    return _factors(W_O, W_V, [0, 0])


def _guard_ratios(f, alpha, gamma_scale=1.0):
    """(lhs - gamma rhs) / scale at a in {alpha_j, beta_ij, 0} for both ordered pairs, where
    lhs = ||T_iT_j - a T_i||^2, rhs = ||T_j^2 - a T_j||^2 and scale is the size of their terms:
    ||T_iT_j||^2 + 2|a <T_iT_j, T_i>| + a^2 ||T_i||^2 + gamma (the same for j)."""
    out = {}
    for i, j in ((0, 1), (1, 0)):
        Ti, Tj = _T(f, i), _T(f, j)
        Ai, Aj = f.W_O[i].T @ f.W_O[i], f.W_O[j].T @ f.W_O[j]
        g = gamma_scale * scipy.linalg.eigh(Ai, Aj, eigvals_only=True)[-1]
        X, Y = Ti @ Tj, Tj @ Tj
        t1, t3, t4, u1, u3, u4 = _ip(X, X), _ip(X, Ti), _ip(Ti, Ti), _ip(Y, Y), _ip(Y, Tj), _ip(Tj, Tj)
        for name, a in (("alpha", alpha[j]), ("beta", t3 / t4), ("zero", 0.0)):
            lhs, rhs = np.sum((X - a * Ti) ** 2), np.sum((Y - a * Tj) ** 2)
            scale = t1 + 2 * abs(a * t3) + a * a * t4 + g * (u1 + 2 * abs(a * u3) + a * a * u4)
            out[(i, j, name)] = (lhs - g * rhs) / scale
    return out


def test_gamma_bound_guard_fires_exactly_above_its_tolerance():
    """The guard raises iff lhs > gamma rhs + bound_rtol * scale at some checked a. With the true
    gamma the bound holds, so every ratio is <= 0 and the guard's threshold is a negative
    bound_rtol: just below the largest ratio it raises, just above it does not. The largest ratio
    is at a = alpha_j (not 0, 1 or 2), so every term of scale counts."""
    f = _guard_layer()
    alpha = np.array([2.5, 2.5])
    rat = _guard_ratios(f, alpha)
    key = max(rat, key=rat.get)
    top = rat[key]
    assert key[2] == "alpha" and -0.5 < top < -0.01
    assert sorted(rat.values())[-2] < top - 1e-3
    geo = LayerGrams(f)
    P1.pair_rows(geo, np.zeros(2), alpha, np.ones(2, bool), bound_rtol=top + 1e-9)
    with pytest.raises(AssertionError, match="gamma bound"):
        P1.pair_rows(geo, np.zeros(2), alpha, np.ones(2, bool), bound_rtol=top - 1e-9)


def test_gamma_bound_guard_checks_a_equal_zero(monkeypatch):
    """With gamma replaced by 0 the ratio at a = 0 is exactly 1 (lhs = ||T_iT_j||^2 = scale) and
    below 1 at every a with a <T_iT_j, T_i> > 0 (here alpha_j, beta_ij and 1): bound_rtol = 1 - 1e-6
    raises only because a = 0 is among the checked gains."""
    f = _guard_layer()
    alpha = np.array([2.5, 2.5])
    rat = _guard_ratios(f, alpha, gamma_scale=0.0)
    for (i, j, name), v in rat.items():
        assert (v == pytest.approx(1.0, abs=1e-12)) if name == "zero" else v < 0.9
    one = _guard_ratios(f, np.array([1.0, 1.0]), gamma_scale=0.0)
    assert max(v for (i, j, name), v in one.items() if name == "alpha") < 0.9  # a = 1 would not fire
    monkeypatch.setattr(P1.siblings, "gamma_bound", lambda A_i, A_j: np.zeros(len(A_i)))
    geo = LayerGrams(f)
    P1.pair_rows(geo, np.zeros(2), alpha, np.ones(2, bool), bound_rtol=1 + 1e-6)
    with pytest.raises(AssertionError, match="gamma bound"):
        P1.pair_rows(geo, np.zeros(2), alpha, np.ones(2, bool), bound_rtol=1 - 1e-6)
