"""headgeom.methods.closure, headgeom.methods.nulls and headgeom.core.stats against independent
computations, for the mutants that survived the fresh mutation run of the three modules (issue 11;
classification in docs/mutation/closure-nulls-stats.md).

Expected values come from np.linalg.matrix_rank of the factors, explicit orthonormality checks,
explicit QR reconstructions, hand counts in float64, a brute-force pairwise AUROC, quantiles of
the replicate values recorded by the statistic itself, and exact constructions (a cluster design
whose every replicate has a known size); never from the code under test. Each test names the
mutants it was written against (mutmut names, without the ``headgeom.`` prefix)."""

from __future__ import annotations

import numpy as np
import pytest

from headgeom.core import stats as S
from headgeom.core.factors import LayerFactors
from headgeom.methods import closure as C
from headgeom.methods import nulls as N
from headgeom.methods.grams import LayerGrams

# ------------------------------------------------------------------------------- closure


def _gram_rank(G, rtol=1e-6):
    """The closure stage's rank of a factor X from its Gram X^T X (LayerGrams' rank of O and V)."""
    return LayerGrams._rank(np.linalg.eigvalsh(G), rtol)


def test_gram_rank_is_per_matrix_on_a_stack():
    """(sum over every axis): a stack of Grams gets one rank per matrix, the rank of each factor
    from its own SVD."""
    rng = np.random.default_rng(11)
    Xs = []
    for r in (5, 3, 1, 4):  # D=9 x d=5 factors of rank r
        Xs.append(rng.standard_normal((9, r)) @ rng.standard_normal((r, 5)))
    Xs = np.stack(Xs)
    G = np.swapaxes(Xs, -1, -2) @ Xs
    expected = [np.linalg.matrix_rank(X, tol=1e-6 * np.linalg.norm(X, 2)) for X in Xs]
    got = _gram_rank(G)
    assert np.shape(got) == (4,)
    assert got.tolist() == expected == [5, 3, 1, 4]


def test_gram_rank_of_a_zero_factor_is_zero():
    """(s >= rtol s_max): every singular value of a zero factor is 0 = rtol * s_max; the rank is 0,
    as np.linalg.matrix_rank says."""
    X = np.zeros((7, 4))
    assert np.linalg.matrix_rank(X) == 0
    assert int(_gram_rank(X.T @ X)) == 0
    assert _gram_rank(np.zeros((3, 4, 4))).tolist() == [0, 0, 0]


def _factors(H=4, G=2, D=16, d=4, seed=3):
    r = np.random.default_rng(seed)
    return LayerFactors(W_Q=r.standard_normal((H, d, D)), W_K=r.standard_normal((G, d, D)),
                        W_V=r.standard_normal((G, d, D)), W_O=r.standard_normal((H, D, d)),
                        kv_group=np.arange(H) // (H // G), norm_gain=np.ones(D), norm_type="rmsnorm")


def test_closure_layer_uses_the_shared_grams(monkeypatch):
    """methods.closure.x_closure_layer__mutmut_5 (LayerGrams always rebuilt): a caller's shared
    LayerGrams is used as given (no second eigendecomposition of the layer), and the columns are
    those of a standalone call."""
    f = _factors()
    shared = LayerGrams(f, 1e-6)
    ref = C.closure_layer(f)

    def no_rebuild(*a, **k):
        raise AssertionError("LayerGrams rebuilt although the caller shared one")

    monkeypatch.setattr(C, "LayerGrams", no_rebuild)
    out = C.closure_layer(f, grams=shared)
    for k in ("P", "alpha", "g_T", "P_wrong_v", "P_latent", "rank_O", "rank_V"):
        np.testing.assert_array_equal(out[k], ref[k])
    assert out["flags"].tolist() == ref["flags"].tolist()


# ------------------------------------------------------------------------------- nulls


def _orthonormal(Q, atol):
    return np.allclose(Q.T.astype(np.float64) @ Q.astype(np.float64), np.eye(Q.shape[1]), atol=atol)


def test_haar_stiefel_float32_mode_stays_float32():
    """methods.nulls.x_haar_stiefel__mutmut_2 (Gaussian left in float64), _11 (sign vector in
    float64): the float32 null mode returns float32 frames, orthonormal to float32 precision."""
    Q = N.haar_stiefel(12, 5, np.random.default_rng(0), np.float32)
    assert Q.dtype == np.float32 and Q.shape == (12, 5)
    assert _orthonormal(Q, 1e-5)
    Q64 = N.haar_stiefel(12, 5, np.random.default_rng(0))
    assert Q64.dtype == np.float64 and _orthonormal(Q64, 1e-12)
    # the same Gaussian stream: the float32 frame is the float64 one to float32 precision
    np.testing.assert_allclose(Q, Q64, atol=1e-5)


class _RankDeficientNormal:
    """An rng stand-in whose 'Gaussian' m x r draw has an exactly zero first column, so that R of
    its QR has an exact zero on the diagonal (the case the sign fix guards)."""

    def __init__(self, seed):
        self._g = np.random.default_rng(seed)
        self.Z = None

    def standard_normal(self, shape):
        Z = self._g.standard_normal(shape)
        Z[:, 0] = 0.0
        self.Z = Z
        return Z.copy()


def test_haar_stiefel_sign_fix_keeps_a_zero_diagonal_column():
    """methods.nulls.x_haar_stiefel__mutmut_16 (condition None), _17 (fallback None), _24 (fallback
    at R_jj == 1): where R_jj = 0 the column keeps sign +1, so the frame stays orthonormal and
    Q^T Z (the R of the fixed frame) is upper triangular with a non-negative diagonal."""
    rng = _RankDeficientNormal(5)
    Q = N.haar_stiefel(8, 4, rng)
    assert _orthonormal(Q, 1e-12)
    R = Q.T @ rng.Z
    np.testing.assert_allclose(np.tril(R, -1), 0.0, atol=1e-12)
    assert np.all(np.diag(R) >= -1e-12) and np.all(np.diag(R)[1:] > 0)
    np.testing.assert_allclose(Q @ R, rng.Z, atol=1e-12)  # Z = Q R reconstructed


@pytest.mark.parametrize("D,m", [(10, 6), (4, 9)], ids=["square-branch", "wide-branch"])
def test_rotate_spectrum_float32_mode_stays_float32(D, m):
    """methods.nulls.x_rotate_spectrum__mutmut_6, _10 (m <= D branch), _21, _25 (wide branch):
    a float32 layer matrix is rotated in float32, and its singular values survive (to float32
    precision; computed in float64 by np.linalg.svd)."""
    S0 = np.random.default_rng(1).standard_normal((D, m)).astype(np.float32)
    out = N.rotate_spectrum(S0, np.random.default_rng(2))
    assert out.dtype == np.float32 and out.shape == (D, m)
    sv_in = np.linalg.svd(S0.astype(np.float64), compute_uv=False)
    sv_out = np.linalg.svd(out.astype(np.float64), compute_uv=False)
    np.testing.assert_allclose(sv_out, sv_in, rtol=1e-5)


@pytest.mark.parametrize("null", ["rotation", "reassign"])
def test_null_factors_float32_precision(null):
    """methods.nulls.x_null_factors__mutmut_3 (dtype None), _16 (cast to None): precision float32
    returns float32 per-head factors; the reassignment draw is a column permutation of the
    float32-cast stacked matrix (checked by sorting columns)."""
    X = np.random.default_rng(4).standard_normal((3, 6, 2))
    out = N.null_factors(X, null, np.random.default_rng(7), precision="float32")
    assert out.dtype == np.float32 and out.shape == X.shape
    if null == "reassign":
        cols_in = np.swapaxes(X, 0, 1).reshape(6, 6).astype(np.float32)
        cols_out = np.swapaxes(out, 0, 1).reshape(6, 6)
        key = lambda M: M[:, np.lexsort(M[::-1])]
        np.testing.assert_array_equal(key(cols_out), key(cols_in))
    out64 = N.null_factors(X, null, np.random.default_rng(7))
    assert out64.dtype == np.float64


def test_null_factors_unknown_precision_message():
    """methods.nulls.x_null_factors__mutmut_4 (message None), _5 (tuple(None) -> TypeError)."""
    X = np.ones((2, 3, 1))
    with pytest.raises(ValueError, match=r"unknown null precision 'float16'; known: \('float64', 'float32'\)"):
        N.null_factors(X, "rotation", np.random.default_rng(0), precision="float16")


# ------------------------------------------------------------------------------- stats


def test_empirical_p_float32_samples_compared_in_float64():
    """core.stats.x_empirical_p__mutmut_4, _6 (samples kept float32): a float32 null sample is
    compared with the observed value at its exact (float64) value, not after rounding the
    observed value to float32. float32(0.1) = 0.100000001490116..., so it is below 0.1000000020
    and above 0.1000000010 by far more than the 1e-12 relative tie band: k = 0 both ways."""
    s32 = np.array([0.1], dtype=np.float32)
    s = float(s32[0])
    assert s < 0.1000000020 * (1 - 1e-9) and s > 0.1000000010 * (1 + 1e-9)
    assert np.float32(0.1000000020) == s32[0] == np.float32(0.1000000010)  # equal in float32
    assert S.empirical_p(0.1000000020, s32, greater=True) == 0.5  # (0 + 1) / (1 + 1)
    assert S.empirical_p(0.1000000010, s32, greater=False) == 0.5
    # and a float32 sample that is truly at least as extreme counts
    assert S.empirical_p(0.1, s32, greater=True) == 1.0


def _brute_auroc(pos, neg):
    pos = [p for p in pos if np.isfinite(p)]
    neg = [q for q in neg if np.isfinite(q)]
    wins = sum((p > q) + 0.5 * (p == q) for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


def test_hierarchical_bootstrap_point_of_float32_inputs_in_float64():
    """core.stats.x_hierarchical_bootstrap__mutmut_3, _5 (a kept float32), _7, _9 (b kept float32):
    the point estimate is the mean over layers of mean(a) - mean(b) of the values as float64
    (float32 accumulation differs at ~1e-8 relative)."""
    rng = np.random.default_rng(9)
    a1, b1 = rng.random(1000).astype(np.float32) + 1, rng.random(900).astype(np.float32) / 3
    a2, b2 = rng.random(700).astype(np.float32) * 7, rng.random(1100).astype(np.float32) + 2
    exp = np.mean([np.mean(a1.astype(np.float64)) - np.mean(b1.astype(np.float64)),
                   np.mean(a2.astype(np.float64)) - np.mean(b2.astype(np.float64))])
    point, _, _ = S.hierarchical_bootstrap([[(a1, b1)], [(a2, b2)]], 0, np.random.default_rng(0))
    assert point == pytest.approx(exp, rel=1e-14, abs=0)
    # each side alone: float32 a with float64 b and the reverse
    a64, b64 = a1.astype(np.float64), b1.astype(np.float64)
    for a, b in ((a1, b64), (a64, b1)):
        point, _, _ = S.hierarchical_bootstrap([[(a, b)]], 0, np.random.default_rng(0))
        assert point == pytest.approx(np.mean(a64) - np.mean(b64), rel=1e-14, abs=0)


def test_cluster_bootstrap_empty_inputs_give_nan_floats():
    """core.stats.x_cluster_bootstrap__mutmut_7, _9 (guard weakened: n_boot 0 reaches np.stack,
    no clusters reach np.concatenate), _11, _12, _14, _15 (float(None), float('XXnanXX'))."""
    stat = lambda ix: float(len(ix))
    for clusters, n_boot in (([], 10), ([[[]], []], 10), ([[np.arange(3)]], 0), ([[np.arange(3)]], -2)):
        lo, hi = S.cluster_bootstrap(stat, clusters, n_boot, np.random.default_rng(0))
        assert isinstance(lo, float) and isinstance(hi, float) and np.isnan(lo) and np.isnan(hi)


def test_cluster_bootstrap_single_replicate():
    """core.stats.x_cluster_bootstrap__mutmut_10 (n_boot <= 1 -> NaN): one replicate gives the
    interval (v, v). One cluster with one layer: every replicate is every row, v = stat(rows)."""
    rows = np.array([4, 1, 7])
    lo, hi = S.cluster_bootstrap(lambda ix: float(np.sum(ix)), [[rows]], 1, np.random.default_rng(0))
    assert (lo, hi) == (12.0, 12.0)


def test_cluster_bootstrap_keeps_every_drawn_cluster():
    """core.stats.x_cluster_bootstrap__mutmut_28 (parts overwritten per cluster): with two top
    clusters of one single-row layer each, every replicate has exactly 2 rows."""
    clusters = [[np.array([0])], [np.array([1])]]
    lo, hi = S.cluster_bootstrap(lambda ix: float(len(ix)), clusters, 20, np.random.default_rng(1))
    assert (lo, hi) == (2.0, 2.0)
    # three clusters of sizes 1, 2, 3 (one layer each): a replicate's size is a sum of 3 draws
    clusters = [[np.array([0])], [np.array([1, 2])], [np.array([3, 4, 5])]]
    seen = []
    S.cluster_bootstrap(lambda ix: seen.append(len(ix)) or 0.0, clusters, 200, np.random.default_rng(2))
    assert min(seen) >= 3 and max(seen) <= 9 and len(set(seen)) > 3


def test_cluster_bootstrap_float32_statistic_quantiles_in_float64():
    """The percentile interval is the float64 quantile of the replicate values the statistic
    returned (recorded here), for a scalar and a vector float32 statistic. (Written against
    core.stats.x_cluster_bootstrap__mutmut_40, _42, replicates kept float32; they are equivalent:
    np.quantile interpolates float32 input in float64, so this test does not kill them.)"""
    data = np.random.default_rng(3).random(40)
    clusters = [[np.arange(i, i + 4) for i in range(j, j + 20, 4)] for j in (0, 20)]
    for vector in (False, True):
        seen = []

        def stat(ix):
            v = np.float32(data[ix].mean() / 3.0)
            seen.append(float(v))
            return np.array([v, v * np.float32(7)], dtype=np.float32) if vector else v

        lo, hi = S.cluster_bootstrap(stat, clusters, 50, np.random.default_rng(4))
        exp = np.quantile(np.array(seen, dtype=np.float64), [0.025, 0.975])
        lo0, hi0 = (lo[0], hi[0]) if vector else (lo, hi)
        assert lo0 == exp[0] and hi0 == exp[1]


def test_cluster_bootstrap_all_undefined_is_nan():
    """core.stats.x_cluster_bootstrap__mutmut_49, _54 (np.full(..., None)): a statistic undefined
    in every replicate gives NaN bounds (floats for a scalar statistic, a float array per entry
    for a vector one), not None."""
    clusters = [[np.arange(2)], [np.arange(2, 5)]]
    lo, hi = S.cluster_bootstrap(lambda ix: np.nan, clusters, 5, np.random.default_rng(0))
    assert isinstance(lo, float) and isinstance(hi, float) and np.isnan(lo) and np.isnan(hi)
    lo, hi = S.cluster_bootstrap(lambda ix: [np.nan, float(len(ix))], clusters, 5, np.random.default_rng(0))
    assert lo.dtype == np.float64 and hi.dtype == np.float64 and np.isnan(lo[0]) and np.isnan(hi[0])


def test_cluster_bootstrap_scalar_statistic_returns_floats():
    """core.stats.x_cluster_bootstrap__mutmut_69 (always arrays): a scalar statistic gives two
    Python floats; a vector statistic gives two arrays."""
    clusters = [[np.arange(3)]]
    lo, hi = S.cluster_bootstrap(lambda ix: float(len(ix)), clusters, 4, np.random.default_rng(0))
    assert type(lo) is float and type(hi) is float and (lo, hi) == (3.0, 3.0)
    lo, hi = S.cluster_bootstrap(lambda ix: [1.0, 2.0], clusters, 4, np.random.default_rng(0))
    assert lo.tolist() == [1.0, 2.0] and hi.tolist() == [1.0, 2.0]


def test_auroc_brute_force_reference():
    """A brute-force pairwise check of auroc on integer-valued and float scores (the dtype mutants
    of auroc are equivalent on such inputs; this pins the values they share)."""
    pos, neg = [3, 1, 4, 1, 5, np.nan], [2, 7, 1, 8]
    assert S.auroc(pos, neg) == pytest.approx(_brute_auroc(pos, neg), abs=1e-15)
    assert S.auroc(np.float32([0.5, 0.25]), [0.25, 0.125]) == pytest.approx(_brute_auroc([0.5, 0.25], [0.25, 0.125]))


# ------------------------------------------------------------------ nulls: the backend (second run)


class HaarRecordingBackend:
    """The numpy backend (headgeom.core.backend.Backend), counting the Haar rotations through it."""

    def __init__(self):
        from headgeom.core.backend import Backend

        self._bk, self.calls = Backend("numpy", "cpu"), 0
        self.name, self.device = "numpy", "cpu"

    def matmul(self, a, b):
        return self._bk.matmul(a, b)

    def haar_apply(self, C, Z, transpose=False):
        self.calls += 1
        return self._bk.haar_apply(C, Z, transpose=transpose)


def _explicit_haar(Z):
    """The sign-fixed Q factor of Z by numpy's QR (dgeqrf + dorgqr), formed explicitly."""
    Q, R = np.linalg.qr(Z)
    return Q * np.sign(np.diag(R))


@pytest.mark.parametrize("D,n,d", [(12, 3, 4), (8, 4, 3)])  # square, wide
def test_rotation_null_runs_on_the_backend_given(D, n, d):
    """backend: torch / device: cuda reach the rotation null: rotate_spectrum and null_factors
    pass the backend to haar_apply (one call per draw), and the draw is S Q (square) or
    L Q^T (wide, S^T = Q_S L^T) for the explicitly formed sign-fixed Q of the same Gaussian.
    methods.nulls.x_rotate_spectrum__mutmut_3, x_null_factors__mutmut_16, _20, _23."""
    rng = np.random.default_rng(17)
    X = rng.standard_normal((n, D, d))
    S = N.stack(X)
    m = n * d
    Z = np.random.default_rng(5).standard_normal((m, m) if m <= D else (m, D))
    if m <= D:
        ref = S @ _explicit_haar(Z)
    else:
        ref = np.linalg.qr(S.T, mode="r").T @ _explicit_haar(Z).T
    bk = HaarRecordingBackend()
    out = N.rotate_spectrum(S, np.random.default_rng(5), backend=bk)
    assert bk.calls == 1
    assert np.max(np.abs(out - ref)) <= 1e-12 * np.max(np.abs(ref))
    bk = HaarRecordingBackend()
    Xn = N.null_factors(X, "rotation", np.random.default_rng(5), backend=bk)
    assert bk.calls == 1
    np.testing.assert_allclose(N.stack(Xn), ref, rtol=0, atol=1e-12 * np.max(np.abs(ref)))
    # the spectrum is kept: S S^T is unchanged by a right rotation
    np.testing.assert_allclose(N.stack(Xn) @ N.stack(Xn).T, S @ S.T, atol=1e-10)
