"""Tests that kill the surviving mutants of headgeom/methods/paper1/capacity.py and heads.py
(issue 11; the classification is in docs/mutation/paper1-capacity-heads.md). Each test checks the
code against an independent computation: explicit d_model x d_model operators, explicit
P_D formulas with diag(D), scipy's principal angles, sha256 orders computed here, finite
differences, or the per-head reference loop in tests/helpers/capacity_ref.py; on random
non-symmetric heads, GQA layouts and heads with a tiny (or exactly zero) singular value."""

import copy
import hashlib

import numpy as np
import pytest
import scipy.linalg

from headgeom.core.factors import LayerFactors
from headgeom.core.seeds import rng_for
from headgeom.methods import closure as C
from headgeom.methods import paper1 as P1
from headgeom.methods.grams import LayerGrams
from headgeom.methods.paper1 import capacity as CAP
from headgeom.methods.paper1 import heads as HEADS
from headgeom.methods.paper1.scramble import signed_permutation
from capacity_ref import ref_feasible_capacity, ref_projected_ascent

HEAD_PARAMS = dict(scramble_draws=8, haar_draws=2, split_rtol=1e-8, sv_rtol=1e-12, identity_rtol=1e-10,
                   rank_rtol=1e-6)
CAP_PARAMS = dict(strong_threshold=0.9, restarts=2, iters=6, sample_per_layer=8)


def _layer(H=4, G=2, Dm=20, d=4, seed=0, tiny=None):
    """Random GQA LayerFactors (non-symmetric heads). ``tiny`` = (head, ratio): that head's W_O
    gets singular values 1, ..., 1, ratio (orthonormal factors drawn here)."""
    r = np.random.default_rng(seed)
    W_O = r.standard_normal((H, Dm, d))
    if tiny is not None:
        h, ratio = tiny
        U, _ = np.linalg.qr(r.standard_normal((Dm, d)))
        W, _ = np.linalg.qr(r.standard_normal((d, d)))
        s = np.ones(d)
        s[-1] = ratio
        W_O[h] = (U * s) @ W.T
    return LayerFactors(W_Q=r.standard_normal((H, d, Dm)), W_K=r.standard_normal((G, d, Dm)),
                        W_V=r.standard_normal((G, d, Dm)), W_O=W_O, kv_group=np.arange(H) // (H // G),
                        norm_gain=np.ones(Dm), norm_type="rmsnorm")


def _P_explicit(K, D):
    """P_D(K) = <K diag(D) K, K>^2 / (||K diag(D) K||^2 ||K||^2), written out."""
    KDK = K @ np.diag(D) @ K
    return np.sum(KDK * K) ** 2 / (np.sum(KDK * KDK) * np.sum(K * K))


def _P_operator(O, V):
    """Closure of the explicit d_model x d_model operator T = O V^T (V: d_model x d)."""
    T = O @ V.T
    T2 = T @ T
    return np.sum(T2 * T) ** 2 / (np.sum(T2 * T2) * np.sum(T * T))


def _hash_sorted(model, layer, heads, purpose):
    """Heads sorted by sha256("model|layer|head|0|purpose") read as a little-endian 128-bit int."""
    def key(h):
        return int.from_bytes(hashlib.sha256(f"{model}|{layer}|{h}|0|{purpose}".encode()).digest()[:16], "little")
    return sorted((int(h) for h in heads), key=key)


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype == object or b.dtype == object:
        return a.shape == b.shape and all(x == y for x, y in zip(a.ravel().tolist(), b.ravel().tolist()))
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


# ================================================================ projected ascent


def _starts(n=3, d=5, seed=1):
    r = np.random.default_rng(seed)
    X0 = r.standard_normal((n, d, d))
    sigma = np.linalg.svd(X0, compute_uv=False)
    D = np.sort(r.uniform(0.05, 1.0, (n, d)), axis=-1)[:, ::-1].copy()
    return X0, D, sigma


def test_zero_iterations_return_the_start_and_its_P_and_a_degenerate_start_scores_zero():
    X0, D, sigma = _starts()
    X0[2] = 0.0  # log P undefined (0/0): scored -inf, P = 0, never +inf
    X, P = P1.projected_ascent(X0, D, sigma, 0)
    assert np.array_equal(X, X0)
    for i in range(2):
        assert np.isclose(P[i], _P_explicit(X0[i], D[i]), rtol=1e-12, atol=0)
    assert P[2] == 0.0


def test_ascent_does_not_write_into_the_callers_start():
    X0, D, sigma = _starts()
    keep = X0.copy()
    X, P = P1.projected_ascent(X0, D, sigma, 5)
    assert np.array_equal(X0, keep) and not np.array_equal(X, keep)
    # P never falls below the start's, and each returned P is P_D of the returned X
    for i in range(3):
        assert P[i] >= _P_explicit(keep[i], D[i]) * (1 - 1e-12)
        assert np.isclose(P[i], _P_explicit(X[i], D[i]), rtol=1e-10)


def test_integer_start_is_the_same_as_its_float_copy():
    r = np.random.default_rng(5)
    Xi = r.integers(-4, 5, (2, 4, 4))
    Xi[:, np.arange(4), np.arange(4)] += 7  # well away from singular
    sigma = np.linalg.svd(Xi.astype(float), compute_uv=False)
    D = np.array([[0.9, 0.6, 0.4, 0.1], [0.8, 0.7, 0.3, 0.2]])
    X1, P1_ = P1.projected_ascent(Xi, D, sigma, 8)
    X2, P2_ = P1.projected_ascent(Xi.astype(np.float64), D, sigma, 8)
    assert X1.dtype == np.float64 and np.array_equal(X1, X2) and np.array_equal(P1_, P2_)
    # the iterates move off the integer lattice (an integer X would truncate them)
    assert not np.array_equal(X1, np.round(X1))


def test_zero_gradient_takes_no_step():
    """At X = I with D = 1 (sigma = 1), P = 1 is the maximum and the gradient of log P is
    exactly 0 (checked here by central differences): the step is 0, never 0 * inf."""
    d = 4
    X0, D, sigma = np.eye(d)[None], np.ones((1, d)), np.ones((1, d))
    eps = 1e-6
    E = np.random.default_rng(0).standard_normal((d, d))
    fd = (np.log(_P_explicit(X0[0] + eps * E, D[0])) - np.log(_P_explicit(X0[0] - eps * E, D[0]))) / (2 * eps)
    assert abs(fd) < 1e-8
    X, P = P1.projected_ascent(X0, D, sigma, 3)
    assert np.all(np.isfinite(X)) and np.isclose(P[0], 1.0, rtol=1e-12)
    np.testing.assert_allclose(X[0] @ X[0].T, np.eye(d), atol=1e-12)


def test_undefined_gradient_takes_a_zero_step_to_the_retraction_of_the_start():
    """From X = 0 the gradient is NaN: the trial point is the retraction of X + 0 (numpy's SVD of
    the zero matrix, computed here), a finite log P above -inf, so it is accepted."""
    d = 4
    sigma = np.array([[2.0, 1.5, 0.7, 0.2]])
    D = np.array([[0.9, 0.5, 0.3, 0.1]])
    U, _, Wt = np.linalg.svd(np.zeros((d, d)))
    want = (U * sigma[0]) @ Wt
    X, P = P1.projected_ascent(np.zeros((1, d, d)), D, sigma, 1)
    assert np.array_equal(X[0], want)
    assert np.isclose(P[0], _P_explicit(want, D[0]), rtol=1e-12)


def test_a_step_at_the_floor_is_never_taken():
    """A start whose step is already 1e-12 (the floor) stops before its first step."""
    X0, D, sigma = _starts()
    X, P = P1.projected_ascent(X0, D, sigma, 10, step0=1e-12)
    assert np.array_equal(X, X0)
    X, P = P1.projected_ascent(X0, D, sigma, 10, step0=1e-11)  # above the floor: steps are taken
    assert not np.array_equal(X, X0)


def test_long_ascent_equals_the_reference_loop():
    """Run to the step floor: the batched ascent and the per-start reference loop (equal P only
    strictly raises; ties rejected) give the same iterates and P."""
    X0, D, sigma = _starts(n=4, d=4, seed=11)
    X, P = P1.projected_ascent(X0, D, sigma, 400)
    Xr, Pr = ref_projected_ascent(X0, D, sigma, 400)
    np.testing.assert_allclose(X, Xr, rtol=0, atol=1e-13)
    np.testing.assert_allclose(P, Pr, rtol=1e-14)


# ================================================================ feasible capacity


def test_float32_heads_are_computed_in_float64():
    r = np.random.default_rng(3)
    Ks = r.standard_normal((2, 5, 5)).astype(np.float32)
    Ds = np.sort(r.uniform(0.05, 1, (2, 5)), axis=-1)[:, ::-1].astype(np.float32)
    a = P1.feasible_capacity_batch(Ks, Ds, "m", 1, [0, 3], 2, 10)
    b = P1.feasible_capacity_batch(Ks.astype(np.float64), Ds.astype(np.float64), "m", 1, [0, 3], 2, 10)
    assert a == b
    assert np.isclose(a[1]["P_start"], _P_explicit(Ks[1].astype(np.float64), Ds[1].astype(np.float64)), rtol=1e-13)


def test_feasible_capacity_uses_the_heads_seeds():
    r = np.random.default_rng(4)
    K = r.standard_normal((5, 5))
    D = np.sort(r.uniform(0.05, 1, 5))[::-1].copy()
    got = P1.feasible_capacity(K, D, "mdl", 6, 2, 3, 25)
    ref = ref_feasible_capacity(K, D, "mdl", 6, 2, 3, 25)
    for k in ("cap", "cap_trained_start", "cap_random", "P_start"):
        assert abs(got[k] - ref[k]) <= 1e-12 * abs(ref[k]), k
    other = P1.feasible_capacity(K, D, "mdl", 7, 2, 3, 25)  # another layer: other random starts
    assert other["cap_random"] != got["cap_random"] and other["cap_trained_start"] == got["cap_trained_start"]


# ================================================================ selection and attainment


def test_hash_order_is_the_sha256_order():
    heads = list(range(16))
    for model, layer, purpose in (("fin", 3, "matched"), ("other", 3, "matched"), ("fin", 4, "sample")):
        want = _hash_sorted(model, layer, heads, purpose)
        assert want != heads
        assert P1.hash_order(model, layer, np.array(heads[::-1]), purpose) == want


def test_capacity_selection_against_hand_computed_groups():
    H = 14
    r = np.random.default_rng(8)
    P = r.uniform(0.0, 0.85, H)
    P[[1, 6, 9]] = [0.95, 0.5, 0.97]
    thr = 0.5  # head 6 sits exactly at the threshold: strong, never ordinary
    P[[2, 4]] = [0.3, 0.7]
    valid = np.ones(H, bool)
    valid[[3, 9]] = False  # invalid with a finite P (9 would be strong)
    P[11] = np.nan  # valid by flag, excluded by its NaN P
    ok = valid & np.isfinite(P)
    strong_want = ok & (P >= thr)
    ordinary = [h for h in range(H) if ok[h] and P[h] < thr]
    matched_want = np.isin(np.arange(H), _hash_sorted("fin", 2, ordinary, "matched")[: int(strong_want.sum())])
    sample_want = np.isin(np.arange(H), _hash_sorted("fin", 2, np.flatnonzero(ok), "sample")[:5])
    assert strong_want[6] and not matched_want[6]
    Plist = [None if np.isnan(x) else float(x) for x in P]  # a list with a missing value
    for Pin, vin in ((P, valid), (Plist, valid.astype(int))):
        st, mt, sm = P1.capacity_selection(Pin, vin, thr, "fin", 2, 5)
        assert st.dtype == bool and mt.dtype == bool and sm.dtype == bool
        assert np.array_equal(st, strong_want) and np.array_equal(mt, matched_want)
        assert np.array_equal(sm, sample_want)
    # two heads, one exactly at the threshold: it is strong, so the other is its matched head, in
    # a layer whose hash order (computed here) would put the threshold head first
    layer = next(L for L in range(100) if _hash_sorted("fin", L, [0, 1], "matched")[0] == 0)
    st, mt, _ = P1.capacity_selection([thr, 0.2], [True, True], thr, "fin", layer, 0)
    assert st.tolist() == [True, False] and mt.tolist() == [False, True]


def test_attainment_is_computed_in_float64():
    P = np.array([0.3, 0.71, 0.2], dtype=np.float32)
    R = np.array([0.1, 0.33, 0.2], dtype=np.float32)
    cap = np.array([0.7, 0.9, 0.2], dtype=np.float32)
    E = P1.attainment(P, R, cap)
    p, rr, c = (x.astype(np.float64) for x in (P, R, cap))
    assert E.dtype == np.float64
    assert np.array_equal(E[:2], (p[:2] - rr[:2]) / (c[:2] - rr[:2])) and np.isnan(E[2])


# ================================================================ capacity_layer

CAP_KEYS = {"head", "kv_group", "final_model", "P_final", "is_strong", "is_matched", "is_sample", "P", "R", "cap",
            "cap_trained_start", "cap_random", "E", "E_random", "sv_relerr", "restarts", "iters", "flags"}


def test_capacity_layer_columns_against_explicit_operators():
    f = _layer(H=6, G=2, Dm=18, d=4, seed=21)
    prm = dict(HEAD_PARAMS, **CAP_PARAMS)
    out = P1.capacity_layer(f, f, "mdl", "fin", 5, prm)
    assert set(out) == CAP_KEYS
    n = out["head"].size
    assert n == 6 and out["head"].dtype == np.int64 and out["kv_group"].dtype == np.int64
    assert out["kv_group"].tolist() == (out["head"] // 3).tolist()
    assert out["final_model"].dtype == object and out["final_model"].tolist() == ["fin"] * n
    assert out["restarts"].dtype == np.int64 and out["restarts"].tolist() == [2] * n
    assert out["iters"].dtype == np.int64 and out["iters"].tolist() == [6] * n
    assert out["flags"].dtype == object and out["flags"].tolist() == [""] * n  # object strings, as final_model
    for k in ("P", "R", "cap", "cap_trained_start", "cap_random", "E", "E_random", "sv_relerr", "P_final"):
        assert out[k].dtype == np.float64 and np.all(np.isfinite(out[k])), k
    for r, h in enumerate(out["head"]):
        Pt = _P_operator(f.W_O[h], f.W_V[f.kv_group[h]].T)
        assert np.isclose(out["P"][r], Pt, rtol=1e-10) and np.isclose(out["P_final"][r], Pt, rtol=1e-10)
        assert out["P"][r] <= out["cap_trained_start"][r] * (1 + 1e-12)
        assert np.isclose(out["E"][r], (out["P"][r] - out["R"][r]) / (out["cap"][r] - out["R"][r]), rtol=1e-12)


def test_capacity_layer_scramble_count_and_default():
    f = _layer(H=4, G=2, seed=22)
    geo = LayerGrams(f)
    for prm, n in ((dict(HEAD_PARAMS, **CAP_PARAMS, scramble_draws=3), 3),
                   ({k: v for k, v in dict(HEAD_PARAMS, **CAP_PARAMS).items() if k != "scramble_draws"}, 8)):
        out = P1.capacity_layer(f, f, "mdl", "mdl", 1, prm)
        for r, h in enumerate(out["head"]):
            Dh, Kh = P1.coords(geo, [h], [f.kv_group[h]])
            pp = []
            for j in range(n):  # the signed-permutation draws of docs/methods.md §1.5, P_D written out
                g = rng_for("mdl", 1, int(h), j, "scramble")
                PL, PR = signed_permutation(g, 4), signed_permutation(g, 4)
                pp.append(_P_explicit(PL @ Kh[0] @ PR, Dh[0]))
            assert np.isclose(out["R"][r], np.median(pp), rtol=1e-12), (n, h)


def test_capacity_layer_rank_tolerance_reaches_every_rank_decision():
    """Head 1's O has singular values (1, 1, 1, 1e-7): full rank at rank_rtol = 1e-9 (so selected
    and defined), rank-deficient at the default 1e-6 (not selected)."""
    f = _layer(H=4, G=2, seed=23, tiny=(1, 1e-7))
    s = np.linalg.svd(f.W_O[1], compute_uv=False)
    assert 1e-9 < s[-1] / s[0] < 1e-6
    prm = dict(HEAD_PARAMS, **CAP_PARAMS, rank_rtol=1e-9, sv_rtol=1e-9)
    for final in (f, copy.deepcopy(f)):  # the same object, or the final checkpoint apart
        out = P1.capacity_layer(f, final, "mdl", "fin", 0, prm)
        assert out["head"].tolist() == [0, 1, 2, 3] and out["flags"].tolist() == [""] * 4
        assert np.all(np.isfinite(out["cap"])) and np.isclose(
            out["P"][1], _P_operator(f.W_O[1], f.W_V[0].T), rtol=1e-6)
    dflt = {k: v for k, v in prm.items() if k != "rank_rtol"}
    for final in (f, copy.deepcopy(f)):
        out = P1.capacity_layer(f, final, "mdl", "fin", 0, dflt)
        assert out["head"].tolist() == [0, 2, 3]
        same = P1.capacity_layer(f, final, "mdl", "fin", 0, dict(dflt, rank_rtol=1e-6))
        assert set(out) == set(same) and all(_same(out[k], same[k]) for k in out)


def test_capacity_layer_head_undefined_at_this_checkpoint():
    final = _layer(H=4, G=2, seed=24)
    early = copy.deepcopy(final)
    early.W_O[2][:, -1] = early.W_O[2][:, 0]  # rank-deficient here, selected by the final checkpoint
    out = P1.capacity_layer(early, final, "early", "fin", 0, dict(HEAD_PARAMS, **CAP_PARAMS))
    assert out["head"].tolist() == [0, 1, 2, 3]
    assert out["flags"].tolist() == ["", "", "undefined_here", ""]
    for k in ("P", "R", "cap", "cap_trained_start", "cap_random", "E", "E_random", "sv_relerr"):
        assert out[k].dtype == np.float64 and np.isnan(out[k][2]) and np.all(np.isfinite(out[k][[0, 1, 3]])), k
    assert np.isfinite(out["P_final"][2])


def test_capacity_layer_shape_mismatch_is_reported():
    with pytest.raises(ValueError, match="mdl layer 3 has another shape than its lineage's final checkpoint fin"):
        P1.capacity_layer(_layer(H=4, G=2, d=4), _layer(H=4, G=2, d=5), "mdl", "fin", 3,
                          dict(HEAD_PARAMS, **CAP_PARAMS))


def test_capacity_layer_singular_value_check(monkeypatch):
    f = _layer(H=4, G=2, seed=25)
    prm = dict(HEAD_PARAMS, **CAP_PARAMS)
    with pytest.raises(AssertionError, match=r"capacity iterate lost the singular values of K \(head \d\): \d"):
        P1.capacity_layer(f, f, "m", "m", 0, dict(prm, sv_rtol=1e-300))
    dflt = {k: v for k, v in prm.items() if k != "sv_rtol"}
    P1.capacity_layer(f, f, "m", "m", 0, dflt)  # the default tolerance (1e-12) holds
    for err in (1e-11, 1e-12):  # the default is strict: an error equal to it fails
        monkeypatch.setattr(CAP, "sv_relerr", lambda K, Xs, e=err: np.full(len(Xs), e))
        with pytest.raises(AssertionError, match=r"head 0\): 1\.000e-1[12]"):
            P1.capacity_layer(f, f, "m", "m", 0, dflt)
    monkeypatch.setattr(CAP, "sv_relerr", lambda K, Xs: np.full(len(Xs), 1e-12))
    P1.capacity_layer(f, f, "m", "m", 0, dict(dflt, sv_rtol=1.0000001e-12))


# ================================================================ sv_ratio


def test_sv_ratio_float64_of_float32_factors_and_exact_zero_singular_value():
    r = np.random.default_rng(6)
    X = r.standard_normal((3, 12, 4)).astype(np.float32)
    X[1] *= np.array([1, 1, 1, 1e-4], dtype=np.float32)
    s = np.linalg.svd(X.astype(np.float64), compute_uv=False)
    np.testing.assert_allclose(HEADS.sv_ratio(X), s[:, -1] / s[:, 0], rtol=1e-12)
    Z = np.zeros((2, 6, 3))
    Z[0, 0, 0] = 2.0  # rank 1: exact zero singular values, ratio 0 (not undefined)
    out = HEADS.sv_ratio(Z)
    assert out[0] == 0.0 and np.isnan(out[1])


# ================================================================ heads_layer

HEAD_KEYS_OWN = {"valid", "P_D", "split_c", "split_s", "split_a", "split_b", "split_w2", "split_relerr", "P_scramble",
                 "R_scramble", "P_haar", "R_haar", "sv_relerr", "I_factorial", "I_factorial_ctrl", "I_factorial_row",
                 "I_factorial_column", "I_factorial_ctrl_row", "I_factorial_ctrl_column", "anchor_cos2",
                 "anchor_cos2_wrong_v", "oblique_share", "retrieval_rank", "n_value_candidates", "sv_ratio_O",
                 "sv_ratio_V"}


def test_heads_layer_columns_against_explicit_computations():
    f = _layer(H=6, G=3, Dm=16, d=4, seed=31)
    f.W_O[0] = 0.0  # an undefined head first: the heads after it are still computed
    cols, _ = P1.heads_layer(f, "mdl", 2, HEAD_PARAMS)
    base = C.closure_layer(f)
    assert set(cols) == HEAD_KEYS_OWN | set(base)
    assert cols["valid"].tolist() == [False] + [True] * 5
    for h in range(1, 6):
        O, V = f.W_O[h], f.W_V[f.kv_group[h]].T
        Pt = _P_operator(O, V)
        assert np.isclose(cols["P_D"][h], Pt, rtol=1e-10)
        cos = np.cos(scipy.linalg.subspace_angles(O, V))  # principal cosines
        assert np.isclose(cols["split_c"][h], cos.mean(), rtol=1e-10)
        assert 0 <= cols["split_s"][h] <= 1 and 0 <= cols["split_relerr"][h] <= 1e-8
        assert len(cols["P_scramble"][h]) == 8 and np.isclose(cols["R_scramble"][h], np.median(cols["P_scramble"][h]))
        assert len(cols["P_haar"][h]) == 2 and np.all(np.isfinite(cols["P_haar"][h]))
        assert cols["R_haar"][h] == np.median(cols["P_haar"][h])
    assert np.isnan(cols["P_D"][0]) and np.isnan(cols["R_scramble"][0]) and np.isnan(cols["R_haar"][0])
    assert np.isnan(cols["P_scramble"][0]).all() and len(cols["P_scramble"][0]) == 8


def test_heads_layer_params_and_their_defaults():
    f = _layer(H=4, G=2, seed=32)
    cols, _ = P1.heads_layer(f, "m", 0, dict(HEAD_PARAMS, scramble_draws=3, haar_draws=1))
    assert all(len(cols["P_scramble"][h]) == 3 and len(cols["P_haar"][h]) == 1 for h in range(4))
    dflt, _ = P1.heads_layer(f, "m", 0, {})
    full, _ = P1.heads_layer(f, "m", 0, HEAD_PARAMS)  # the documented defaults, spelled out
    assert set(dflt) == set(full) and all(_same(dflt[k], full[k]) for k in full)
    for k in ("identity_rtol", "split_rtol", "sv_rtol"):  # a zero-width tolerance always fails
        with pytest.raises(AssertionError):
            P1.heads_layer(f, "m", 0, dict(HEAD_PARAMS, **{k: 1e-300}))


def test_heads_layer_rank_tolerance():
    f = _layer(H=4, G=2, seed=33, tiny=(2, 1e-7))
    cols, _ = P1.heads_layer(f, "m", 0, dict(HEAD_PARAMS, rank_rtol=1e-9, sv_rtol=1e-9))
    assert cols["valid"].all() and np.isclose(cols["P_D"][2], _P_operator(f.W_O[2], f.W_V[1].T), rtol=1e-6)
    cols, _ = P1.heads_layer(f, "m", 0, {k: v for k, v in HEAD_PARAMS.items() if k != "rank_rtol"})
    assert cols["valid"].tolist() == [True, True, False, True]


def test_heads_layer_default_identity_tolerance(monkeypatch):
    real = C.P_of
    monkeypatch.setattr(C, "P_of", lambda K, D=None: real(K, D) * (1 + 1e-9))  # P_D(K) != P(T) by 1e-9
    f = _layer(H=4, G=2, seed=34)
    with pytest.raises(AssertionError):
        P1.heads_layer(f, "m", 0, {k: v for k, v in HEAD_PARAMS.items() if k != "identity_rtol"})


def test_heads_layer_split_check_default_boundary_and_head(monkeypatch):
    f = _layer(H=4, G=2, seed=35)
    prm = {k: v for k, v in HEAD_PARAMS.items() if k != "split_rtol"}
    real = HEADS.split_relerr
    monkeypatch.setattr(HEADS, "split_relerr", lambda sp, P: np.full(len(P), 1e-8))
    P1.heads_layer(f, "m", 0, prm)  # an error equal to the default tolerance passes
    monkeypatch.setattr(HEADS, "split_relerr", lambda sp, P: np.full(len(P), 2e-8))
    with pytest.raises(AssertionError, match="head 0"):
        P1.heads_layer(f, "m", 0, prm)
    monkeypatch.setattr(HEADS, "split_relerr", lambda sp, P: np.where(np.arange(len(P)) == 2, 1e-6, real(sp, P)))
    with pytest.raises(AssertionError, match="identity failed for head 2: rel. err 1.000e-06"):
        P1.heads_layer(f, "m", 0, HEAD_PARAMS)


def test_heads_layer_scramble_check_default_and_boundary(monkeypatch):
    f = _layer(H=4, G=2, seed=36)
    prm = {k: v for k, v in HEAD_PARAMS.items() if k != "sv_rtol"}
    real = HEADS.scramble_draws
    for err in (1e-11, 1e-12):  # strict: an error equal to the default tolerance fails
        monkeypatch.setattr(HEADS, "scramble_draws", lambda *a, e=err: real(*a)[:2] + (e,))
        with pytest.raises(AssertionError, match="singular values of K for head 0"):
            P1.heads_layer(f, "m", 0, prm)
