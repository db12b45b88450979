"""The L-BFGS capacity ascent (paper1.capacity.method: lbfgs): its tangent projection against the
orbit's tangent space built explicitly, its Riemannian gradient against finite differences along
curves on the orbit, and the search itself on a planted layer whose capacity is known, against
the gradient search, and under the shared stopping rule."""

import numpy as np
import pytest
from scipy.linalg import expm

from headgeom.core.seeds import rng_for
from headgeom.methods import paper1 as P1
from headgeom.methods.paper1 import capacity as CAP
from headgeom.methods.paper1.scramble import haar_orthogonal

from test_capacity_batch import PARAMS, _planted_layer, _starts


def _skew_basis(d):
    out = []
    for i in range(d):
        for j in range(i + 1, d):
            A = np.zeros((d, d))
            A[i, j], A[j, i] = 1.0, -1.0
            out.append(A)
    return out


def _explicit_tangent_projection(G, U, s, Wt):
    """Orthogonal projection of G onto span{U (A diag(s) - diag(s) B) W^T : A, B skew}, from
    the spanning set itself (least squares on its vectorised elements)."""
    d = len(s)
    S = np.diag(s)
    cols = [(U @ (A @ S) @ Wt).ravel() for A in _skew_basis(d)] + [(U @ (-S @ B) @ Wt).ravel() for B in _skew_basis(d)]
    M = np.array(cols).T
    coef, *_ = np.linalg.lstsq(M, G.ravel(), rcond=1e-10)
    return (M @ coef).reshape(d, d)


@pytest.mark.parametrize("s", [np.array([3.0, 2.0, 1.5, 0.7, 0.2]),      # distinct
                               np.array([2.0, 1.0, 1.0, 1.0, 0.5]),      # a tied triple
                               np.array([1.0, 1.0, 1.0, 1.0, 1.0]),      # orthogonal K (planted layers)
                               np.array([2.0, 1.0, 0.5, 0.0, 0.0])])     # two zero singular values
def test_tangent_projection_is_the_orthogonal_projection_onto_the_orbit_tangent_space(s):
    r = np.random.default_rng(len(set(s.tolist())))
    d = len(s)
    U, Wt = haar_orthogonal(r, d), haar_orthogonal(r, d)
    G = r.standard_normal((d, d))
    tie = CAP.sigma_ties(s[None])
    got = CAP.orbit_tangent(G[None], U[None], Wt[None], tie)[0]
    want = _explicit_tangent_projection(G, U, s, Wt)
    assert np.allclose(got, want, atol=1e-12 * np.abs(G).max())
    # idempotent, and what it removes is orthogonal to every tangent vector
    assert np.allclose(CAP.orbit_tangent(got[None], U[None], Wt[None], tie)[0], got, atol=1e-12)
    assert (tie is None) == (len(set(s.tolist())) == d)


def test_riemannian_gradient_is_the_derivative_along_curves_on_the_orbit():
    r = np.random.default_rng(4)
    d = 6
    s = np.sort(r.uniform(0.2, 3, d))[::-1]
    D = r.uniform(-1, 1, d)
    U, Wt = haar_orthogonal(r, d), haar_orthogonal(r, d)
    X = (U * s) @ Wt
    _, g = P1.logP_and_grad(X[None], D[None])
    gr = CAP.orbit_tangent(g, U[None], Wt[None])[0]
    for _ in range(3):
        A, B = (lambda M: M - M.T)(r.standard_normal((d, d))), (lambda M: M - M.T)(r.standard_normal((d, d)))
        curve = lambda t: (U @ expm(t * A) * s) @ (expm(t * B) @ Wt)  # noqa: E731 - U e^{tA} diag(s) e^{tB} W^T
        h = 1e-5
        fd = (P1.logP(curve(h)[None], D[None])[0] - P1.logP(curve(-h)[None], D[None])[0]) / (2 * h)
        xi = U @ (A @ np.diag(s) + np.diag(s) @ B) @ Wt  # the curve's velocity at t = 0
        assert np.isclose(np.sum(gr * xi), fd, rtol=1e-6, atol=1e-9)


def test_lbfgs_reaches_the_known_capacity_of_a_planted_layer():
    d, H = 5, 3
    cos = [np.array([0.95, 0.8, 0.6, 0.4, 0.2]), np.array([0.9, 0.85, 0.5, 0.3, 0.1]), np.array([0.7, 0.6, 0.55, 0.5, 0.45])]
    rots = [(haar_orthogonal(rng_for("u", 0, h, 0, "t"), d), haar_orthogonal(rng_for("w", 0, h, 0, "t"), d)) for h in range(H)]
    f = _planted_layer(cos, rots)
    st = {}
    out = P1.capacity_layer(f, f, "plant", "plant", 0, dict(PARAMS, restarts=4, iters=100, method="lbfgs",
                                                             sample_per_layer=H), stats=st)
    for r, h in enumerate(out["head"]):
        c = cos[h]
        cap_known = c.sum() ** 2 / (d * (c**2).sum())
        assert abs(out["cap_random"][r] - cap_known) < 1e-8 * cap_known, (h, out["cap_random"][r], cap_known)
        assert out["cap"][r] <= cap_known * (1 + 1e-12)
    assert np.all(out["sv_relerr"] < 1e-12)


def test_lbfgs_never_lowers_log_P_and_keeps_the_singular_values():
    Ks, Ds, sig = _starts(seed=11, n=5, d=12)
    st = {"trace": []}
    X, P = CAP.lbfgs_ascent(Ks, Ds, sig, 60, stats=st)
    F = np.array(st["trace"])
    assert F.shape == (61, 5) and np.all(np.diff(F, axis=0) >= 0) and np.all(F[-1] > F[0] + 1e-3)
    assert np.allclose(np.exp(F[-1]), P, rtol=1e-15)
    assert np.max(np.abs(np.linalg.svd(X, compute_uv=False) - sig) / sig.max(-1, keepdims=True)) < 1e-12
    assert np.allclose(P, np.exp(P1.logP(X, Ds)), rtol=1e-12)  # the returned P is the iterate's


def test_lbfgs_reaches_the_gradient_search_in_a_third_of_the_steps():
    # the reason it exists: on generic heads (d 16) 100 L-BFGS steps match or beat 300 gradient
    # steps from the same starts (a wrong two-loop recursion or sign falls far short)
    Ks, Ds, sig = _starts(seed=8, n=6, d=16)
    _, P_grad = CAP.projected_ascent(Ks, Ds, sig, 300)
    st = {}
    _, P_lbfgs = CAP.lbfgs_ascent(Ks, Ds, sig, 100, stats=st)
    assert np.all(P_lbfgs >= P_grad * (1 - 1e-6)), (P_lbfgs, P_grad)
    # L-BFGS's scaled step is accepted at once nearly every time: about one SVD per start and
    # step (the starts' frames included); an unscaled direction backtracks ~2.5x as often
    assert st["svd"] <= 1.1 * 101 * len(Ks), st["svd"]
    _, P_30 = CAP.lbfgs_ascent(Ks, Ds, sig, 30)
    _, P_g30 = CAP.projected_ascent(Ks, Ds, sig, 30)
    assert np.mean(P_30 - P_g30) > 0


def test_lbfgs_under_the_rule_stops_on_a_prefix_of_its_fixed_step_run():
    Ks, Ds, sig = _starts(seed=5, n=4, d=8)
    fixed = {"trace": []}
    CAP.lbfgs_ascent(Ks, Ds, sig, 300, stats=fixed)
    F = np.array(fixed["trace"])
    st = {}
    _, P = CAP.lbfgs_ascent(Ks, Ds, sig, 300, tol=1e-6, window=10, stats=st)
    steps = st["steps"]
    assert np.any(steps < 300) and np.all(steps >= 10)
    assert np.array_equal(P, np.exp(F[steps, np.arange(4)]))
    # where it stopped, the last 10 steps of the fixed run gained less than tol
    stopped = steps < 300
    assert np.all((F[steps, np.arange(4)] - F[steps - 10, np.arange(4)] < 1e-6)[stopped])


def test_an_unknown_ascent_is_an_error_naming_the_choices():
    Ks, Ds, _ = _starts(n=1)
    with pytest.raises(ValueError, match="gradient.*lbfgs"):
        P1.feasible_capacity_batch(Ks, Ds, "m", 0, [0], 2, 5, method="newton")


def test_the_cost_model_prices_the_lbfgs_step_and_its_memory():
    from headgeom.schedule import costs

    f = {"d_model": 4096, "d_head": 128, "n_heads": 64, "n_kv_heads": 4, "n_layers": 94}
    g = costs.paper1_resources("capacity", f, 8, 100, "gradient")
    lb = costs.paper1_resources("capacity", f, 8, 100, "lbfgs")
    starts = 64 * 8
    # 8 stored (s, y) pairs of 128 x 128 float64 per start
    assert lb["mem_mb"] - g["mem_mb"] == -(-2 * CAP.LBFGS_MEMORY * starts * 128**2 * 8 // 2**20)
    base = costs.paper1_resources("capacity", f, 8, 0, "gradient")["runtime"]
    assert (lb["runtime"] - base) >= costs.LBFGS_STEP_FACTOR * (g["runtime"] - base) - 1
