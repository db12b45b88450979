"""The capacity search batched across heads and restarts (headgeom.methods.paper1.capacity):
the same Cap_hat as the per-head loop it replaced (kept as the reference in tests/helpers/capacity_ref.py), and the
random-start capacity and its attainment on a planted layer where the capacity is known."""

import numpy as np
import pytest

from headgeom.core.factors import LayerFactors
from headgeom.core.seeds import rng_for
from headgeom.methods import paper1 as P1
from headgeom.methods.paper1.scramble import haar_orthogonal
from headgeom.outputs.paper1.capacity import p1_capacity
from capacity_ref import ref_capacity_layer as _ref_capacity_layer, ref_feasible_capacity as _ref_feasible_capacity

PARAMS = dict(scramble_draws=8, haar_draws=2, split_rtol=1e-8, sv_rtol=1e-12, identity_rtol=1e-10, rank_rtol=1e-6,
              strong_threshold=0.9, sample_per_layer=2)


def _layer(H, G, Dm, d, seed):
    r = np.random.default_rng(seed)
    return LayerFactors(W_Q=r.standard_normal((H, d, Dm)), W_K=r.standard_normal((G, d, Dm)),
                        W_V=r.standard_normal((G, d, Dm)), W_O=r.standard_normal((H, Dm, d)),
                        kv_group=np.arange(H) // (H // G), norm_gain=np.ones(Dm), norm_type="rmsnorm")


def _relerr(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    assert np.array_equal(np.isnan(a), np.isnan(b))
    ok = ~np.isnan(a)
    return float(np.max(np.abs(a[ok] - b[ok]) / np.abs(b[ok]))) if ok.any() else 0.0


# ------------------------------------------------------------------ same numbers as the loop


@pytest.mark.parametrize("H,G,d,restarts,iters,sample", [(8, 2, 6, 4, 60, 4), (6, 6, 5, 3, 40, 6), (4, 1, 8, 1, 30, 3)])
def test_batched_capacity_layer_equals_the_per_head_loop(H, G, d, restarts, iters, sample):
    f = _layer(H, G, 24, d, seed=H + d)
    prm = dict(PARAMS, restarts=restarts, iters=iters, sample_per_layer=sample)
    got = P1.capacity_layer(f, f, "m", "m", 3, prm)
    sel, ref = _ref_capacity_layer(f, "m", 3, prm)
    assert got["head"].tolist() == sel.tolist() and sel.size >= 3
    for k in ("P", "R", "cap", "cap_trained_start", "cap_random"):
        assert _relerr(got[k], ref[k]) <= 1e-12, k
    assert np.all(got["sv_relerr"] < 1e-12)


def test_batch_of_heads_equals_each_head_alone():
    # heads of different spectra and supports in one batch; a start that stops early (eta below
    # 1e-12) no longer changes while the others go on
    r = np.random.default_rng(7)
    Ks = r.standard_normal((5, 6, 6)) * r.uniform(0.2, 3, (5, 1, 1))
    Ds = np.sort(r.uniform(0.01, 1, (5, 6)), axis=-1)[:, ::-1]
    batch = P1.feasible_capacity_batch(Ks, Ds, "m", 2, [0, 3, 4, 7, 9], 3, 80)
    for i, h in enumerate([0, 3, 4, 7, 9]):
        ref = _ref_feasible_capacity(Ks[i], Ds[i], "m", 2, h, 3, 80)
        for k in ("cap", "cap_trained_start", "cap_random", "P_start"):
            assert abs(batch[i][k] - ref[k]) <= 1e-12 * abs(ref[k]), (i, k)


# ------------------------------------------------------------------ planted: the capacity is known


def _planted_layer(cosines, rotations, Dm=16):
    """MHA layer whose heads have orthonormal V_h = [I_d; 0] and orthonormal O_h with
    V_h^T O_h = U diag(c) W^T: then R_O = R_V = I, the principal cosines are c and K = W^T U is
    orthogonal (all singular values 1). On that orbit P_D(Q) = tr(D Q)^2 / (d ||D||^2), whose
    maximum over O(d) is (sum c)^2 / (d sum c^2) (Q = I); d odd puts a maximiser (I or -I) in
    both components of O(d), so every random start can reach it."""
    H, d = len(cosines), len(cosines[0])
    W_O = np.zeros((H, Dm, d))
    for h, (c, (U, W)) in enumerate(zip(cosines, rotations)):
        W_O[h, :d] = (U * c) @ W.T
        W_O[h, d:2 * d] = (np.eye(d) * np.sqrt(1 - c**2)) @ W.T  # E = the next d coordinates
    W_V = np.zeros((H, d, Dm))
    W_V[:, :, :d] = np.eye(d)
    r = np.random.default_rng(0)
    return LayerFactors(W_Q=r.standard_normal((H, d, Dm)), W_K=r.standard_normal((H, d, Dm)), W_V=W_V, W_O=W_O,
                        kv_group=np.arange(H), norm_gain=np.ones(Dm), norm_type="rmsnorm")


def test_random_start_capacity_and_E_on_a_planted_layer():
    d, H = 5, 3
    cos = [np.array([0.95, 0.8, 0.6, 0.4, 0.2]), np.array([0.9, 0.85, 0.5, 0.3, 0.1]), np.array([0.7, 0.6, 0.55, 0.5, 0.45])]
    rots = [(haar_orthogonal(rng_for("u", 0, h, 0, "t"), d), haar_orthogonal(rng_for("w", 0, h, 0, "t"), d)) for h in range(H)]
    f = _planted_layer(cos, rots)
    prm = dict(PARAMS, restarts=4, iters=400, sample_per_layer=H)
    out = P1.capacity_layer(f, f, "plant", "plant", 0, prm)
    assert sorted(out["head"].tolist()) == list(range(H))
    for r, h in enumerate(out["head"]):
        c = cos[h]
        U, W = rots[h]
        cap_known = c.sum() ** 2 / (d * (c**2).sum())
        # the trained closure from the explicit operator T = O V^T (d_model x d_model)
        T = f.W_O[h] @ f.W_V[h]
        T2 = T @ T
        P_known = np.sum(T2 * T) ** 2 / (np.sum(T2 * T2) * np.sum(T * T))
        assert np.isclose(P_known, np.trace(np.diag(c) @ W.T @ U) ** 2 / (d * (c**2).sum()), rtol=1e-12)
        assert np.isclose(out["P"][r], P_known, rtol=1e-10) and P_known < cap_known - 0.05
        assert abs(out["cap_random"][r] - cap_known) < 1e-8 * cap_known, (h, out["cap_random"][r], cap_known)
        assert out["cap_random"][r] <= cap_known * (1 + 1e-12) and out["cap"][r] <= cap_known * (1 + 1e-12)
        Rr = out["R"][r]
        assert np.isclose(out["E_random"][r], (P_known - Rr) / (cap_known - Rr), rtol=1e-6)
        assert np.isclose(out["E"][r], (P_known - Rr) / (out["cap"][r] - Rr), rtol=1e-12)


def test_random_start_capacity_can_fall_below_the_trained_start():
    # planted at the maximum (U = W): the trained K's start is the capacity and E = 1; a random
    # start with two steps stays below it, and E from the random starts alone says so
    d = 5
    c = np.array([0.95, 0.8, 0.6, 0.4, 0.2])
    U = haar_orthogonal(rng_for("u", 0, 0, 0, "t"), d)
    f = _planted_layer([c], [(U, U)])
    out = P1.capacity_layer(f, f, "plant", "plant", 0, dict(PARAMS, restarts=2, iters=2, sample_per_layer=1))
    cap_known = c.sum() ** 2 / (d * (c**2).sum())
    assert np.isclose(out["P"][0], cap_known, rtol=1e-12) and np.isclose(out["cap"][0], cap_known, rtol=1e-12)
    assert np.isclose(out["E"][0], 1.0, rtol=1e-12)
    Rr = out["R"][0]
    assert out["cap_random"][0] < cap_known - 0.1
    assert np.isclose(out["E_random"][0], (cap_known - Rr) / (out["cap_random"][0] - Rr), rtol=1e-12)
    assert not np.isclose(out["E_random"][0], 1.0)


def test_capacity_table_reports_random_start_columns():
    n = 6
    cap = {"model": np.array(["m"] * n, dtype=object), "layer": np.array([0, 0, 0, 1, 1, 1]),
           "P": np.array([0.95, 0.2, 0.5, 0.92, 0.3, 0.6]), "R": np.full(n, 0.1),
           "cap": np.array([0.97, 0.6, 0.7, 0.96, 0.5, 0.8]), "E": np.zeros(n),
           "cap_random": np.array([0.9, 0.55, 0.65, 0.8, 0.45, 0.7]),
           "E_random": np.array([1.1, 0.2, 0.3, 1.3, 0.4, 0.5]),
           "is_strong": np.array([1, 0, 0, 1, 0, 0], bool), "is_matched": np.array([0, 1, 0, 0, 1, 0], bool),
           "is_sample": np.array([0, 0, 1, 0, 0, 1], bool)}
    row = p1_capacity(cap, ["m"], 0.9).rows[0]
    assert np.isclose(row["cap_random_strong"], 0.85) and np.isclose(row["E_random_strong"], 1.2)
    assert np.isclose(row["cap_random_matched"], 0.5) and np.isclose(row["E_random_matched"], 0.3)
    assert np.isclose(row["cap_random_sample"], 0.675) and np.isclose(row["cap_strong"], 0.965)
    # shards written before these columns existed: the columns are NaN, the rest is unchanged
    old = {k: v for k, v in cap.items() if k not in ("cap_random", "E_random")}
    row_old = p1_capacity(old, ["m"], 0.9).rows[0]
    assert np.isnan(row_old["E_random_strong"]) and row_old["cap_strong"] == row["cap_strong"]


# ------------------------------------------------------------------ the convergence rule (tol over window, iters the cap)


def _starts(seed=3, n=4, d=6):
    r = np.random.default_rng(seed)
    Ks = r.standard_normal((n, d, d))
    Ds = np.sort(r.uniform(0.01, 1, (n, d)), axis=-1)[:, ::-1].copy()
    sig = np.linalg.svd(Ks, compute_uv=False)
    return Ks, Ds, sig


def test_rule_off_is_the_fixed_step_search_of_the_oracle():
    # tol = 0 (or window = 0): every start runs to the cap, the same numbers as the oracle
    Ks, Ds, sig = _starts()
    from capacity_ref import ref_projected_ascent
    _, P_ref = ref_projected_ascent(Ks, Ds, sig, 80)
    for tol, window in ((0.0, 20), (1e-6, 0)):
        st = {}
        _, P = P1.projected_ascent(Ks, Ds, sig, 80, tol=tol, window=window, stats=st)
        assert np.max(np.abs(P - P_ref) / P_ref) <= 1e-12 and st["svd"] == 80 * len(Ks)


def test_rule_is_a_prefix_of_the_oracle_within_tolerance():
    # a start that stops keeps the iterate of the fixed-step oracle at that step: Cap_hat never
    # rises above the oracle's, and falls below it by less than the stated tolerance here
    Ks, Ds, sig = _starts(seed=5)
    from capacity_ref import ref_projected_ascent
    _, P_ref = ref_projected_ascent(Ks, Ds, sig, 400)
    st = {}
    _, P = P1.projected_ascent(Ks, Ds, sig, 400, tol=1e-6, window=20, stats=st)
    assert np.all(P <= P_ref * (1 + 1e-12))
    assert np.max((P_ref - P) / P_ref) < 1e-4
    assert st["svd"] < 400 * len(Ks)


def test_log_P_never_decreases():
    Ks, Ds, sig = _starts(seed=11)
    st = {"trace": []}
    P1.projected_ascent(Ks, Ds, sig, 120, tol=1e-9, window=10, stats=st)
    F = np.array(st["trace"])
    assert F.shape[0] >= 2 and np.all(np.diff(F, axis=0) >= 0)


def test_stops_early_on_a_converged_planted_head_and_hits_the_cap_otherwise():
    # planted at its maximum (U = W): the trained start is the capacity, every trial step is
    # rejected, log P gains nothing, the start stops after `window` steps; a random start of a
    # generic head with a tight tol runs to the cap
    d = 5
    c = np.array([0.95, 0.8, 0.6, 0.4, 0.2])
    U = haar_orthogonal(rng_for("u", 0, 0, 0, "t"), d)
    f = _planted_layer([c], [(U, U)])
    st = {}
    out = P1.capacity_layer(f, f, "plant", "plant", 0, dict(PARAMS, restarts=1, iters=300, tol=1e-9, window=15,
                                                             sample_per_layer=1), stats=st)
    cap_known = c.sum() ** 2 / (d * (c**2).sum())
    assert np.isclose(out["cap"][0], cap_known, rtol=1e-12)
    assert st["svd"] == 15
    Ks, Ds, sig = _starts(seed=2, n=2)
    st = {}
    P1.projected_ascent(Ks, Ds, sig, 25, tol=1e-30 + 1e-300, window=20, stats=st)
    assert st["svd"] == 25 * 2 and st["steps"].tolist() == [25, 25]
