"""headgeom.methods.overlap against independent computations, for the mutants that survived the
first mutation run (issue 11; classification in docs/mutation/pk.md).

Expected values come from full SVDs of the factors, explicit D x D projectors and their traces,
scipy.linalg.subspace_angles, np.linalg.matrix_rank, exact constructions (coordinate subspaces,
subspaces at a planted angle) and closed-form moments; never from the code under test. Heads
are random and non-symmetric, some rank-deficient, and the layers are GQA (several query heads
per KV group). Each test names the mutants it was written against (mutmut names, without the
``headgeom.methods.overlap.x_`` prefix)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg as sla
from scipy import stats as sps

from headgeom.core.backend import Backend
from headgeom.core.factors import LayerFactors
from headgeom.methods import overlap as PK
from recording_backend import RecordingBackend, ShapeRecordingBackend


def svd_proj(X: np.ndarray, rtol: float = 1e-6) -> tuple[np.ndarray, int]:
    """Orthogonal projector onto Im X (D x D) and the rank at rtol * s_max, from a full SVD."""
    U, s, _ = np.linalg.svd(X, full_matrices=False)
    r = int(np.sum(s > rtol * s[0])) if s.size and s[0] > 0 else 0
    return U[:, :r] @ U[:, :r].T, r


def heads_with_spectrum(rng, n: int, D: int, svals) -> np.ndarray:
    """n random non-symmetric D x d factors U diag(svals) V^T with Haar U, V."""
    d = len(svals)
    out = []
    for _ in range(n):
        U = np.linalg.qr(rng.standard_normal((D, d)))[0]
        V = np.linalg.qr(rng.standard_normal((d, d)))[0]
        out.append(U @ np.diag(svals) @ V.T)
    return np.stack(out)


# ------------------------------------------------------------------ orthonormal_bases


@pytest.mark.parametrize("first_pass", ["eigh", "cholesky"])
@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("cond", [5e5, 9e5])
def test_bases_orthonormal_to_rounding_near_cond_one_over_rtol(cond, backend, first_pass):
    """The docstring's promise: orthogonality to rounding even for cond(X) near 1/rank_rtol
    (the second, Cholesky pass applies L^{-T}, not L^{-1}), on either backend (the last
    product is written in place on numpy and assigned from the backend's product on torch).
    orthonormal_bases 116, 117, 118 (second run); 148, 149, 150 (fifth session)."""
    rng = np.random.default_rng(101)
    D, d = 200, 32
    X = heads_with_spectrum(rng, 2, D, np.logspace(0, -np.log10(cond), d))
    Q, r = PK.orthonormal_bases(X, backend=Backend(backend, "cpu"), first_pass=first_pass)
    assert r.tolist() == [d, d]
    for h in range(2):
        assert np.abs(Q[h].T @ Q[h] - np.eye(d)).max() < 1e-13
        np.testing.assert_allclose(Q[h] @ Q[h].T, svd_proj(X[h])[0], atol=1e-9)


@pytest.mark.parametrize("first_pass", ["eigh", "cholesky"])
@pytest.mark.parametrize("backend,calls", [("numpy", 3), ("torch", 4)])
def test_bases_last_product_is_written_in_place_on_numpy_and_run_on_the_torch_backend(backend, calls, first_pass):
    """The products of orthonormal_bases go through the backend (Gram, first pass, second-pass
    Gram), and so does the last one (Q1 L^{-T}) on torch; on numpy that one is np.matmul into
    the stacked output (BLAS writes each head in place), not a backend product and a copy.
    orthonormal_bases 118, 119, 120 (fifth session)."""
    bk = RecordingBackend(backend)
    X = np.random.default_rng(7).standard_normal((3, 20, 4))
    Q, _ = PK.orthonormal_bases(X, backend=bk, first_pass=first_pass)
    assert bk.calls == calls
    assert np.shares_memory(PK.stacked(Q), Q)
    ref = PK.orthonormal_bases(X)[0]
    if first_pass == "eigh":
        np.testing.assert_allclose(Q, ref, rtol=0, atol=1e-13)
    else:  # another orthonormal basis of the same space
        np.testing.assert_allclose(Q @ np.swapaxes(Q, -1, -2), ref @ np.swapaxes(ref, -1, -2), rtol=0, atol=1e-13)


@pytest.mark.parametrize("first_pass", ["eigh", "cholesky"])
@pytest.mark.parametrize("scale", [1e-90, 1e-3, 1e3, 1e90])
def test_bases_and_ranks_do_not_depend_on_the_scale_of_the_weights(scale, first_pass):
    """Spaces and the relative rank are scale-free, over the whole range where X^T X is a
    float64 (a full-rank head, an exactly rank-deficient one, one with a singular value
    1e-8 s_max). orthonormal_bases 50 (threshold rtol / s_max), 62 (multiplying by s)."""
    rng = np.random.default_rng(102)
    D = 24
    X = heads_with_spectrum(rng, 3, D, [3.0, 2.0, 1.0, 0.5, 0.25])
    X[1][:, 4] = X[1][:, 0] - X[1][:, 2]  # rank 4
    X[2] = heads_with_spectrum(rng, 1, D, [1.0, 0.9, 0.8, 0.7, 1e-8])[0]  # rank 4 at rtol 1e-6
    refs = [svd_proj(x) for x in X]
    Q, r = PK.orthonormal_bases(X * scale, first_pass=first_pass)
    assert r.tolist() == [ref[1] for ref in refs] == [5, 4, 4]
    for h in range(3):
        rh = r[h]
        np.testing.assert_allclose(Q[h][:, :rh].T @ Q[h][:, :rh], np.eye(rh), atol=1e-12)
        np.testing.assert_allclose(Q[h] @ Q[h].T, refs[h][0], atol=1e-8)


@pytest.mark.parametrize("first_pass", ["eigh", "cholesky"])
def test_columns_beyond_the_rank_are_exactly_zero_and_not_counted_in_pk(first_pass):
    """Dropped directions contribute nothing: the columns beyond the rank are exactly zero
    (docstring), also for a head whose dropped singular value is large in absolute terms
    (s_max = 1e6, dropped s = 0.5). orthonormal_bases 71 (inverse 1 for dropped columns)."""
    rng = np.random.default_rng(103)
    D, d = 18, 4
    X = rng.standard_normal((3, D, d))
    X[0][:, 3] = 2 * X[0][:, 1] + X[0][:, 0]  # exactly rank 3
    X[1] = heads_with_spectrum(rng, 1, D, [1e6, 5e5, 2e5, 0.5])[0]  # rank 3 at rtol 1e-6
    Q, r = PK.orthonormal_bases(X, first_pass=first_pass)
    assert r.tolist() == [3, 3, 4]
    assert np.all(Q[0][:, 3:] == 0.0) and np.all(Q[1][:, 3:] == 0.0)
    out = PK.pk_within(Q, r)
    for p, (i, j) in enumerate(zip(out["head_i"], out["head_j"])):
        (Pi, ri), (Pj, rj) = svd_proj(X[i]), svd_proj(X[j])
        assert out["pk"][p] == pytest.approx(np.trace(Pi @ Pj), rel=1e-9)
        assert out["rho"][p] == pytest.approx(np.trace(Pi @ Pj) / min(ri, rj), rel=1e-9)


@pytest.mark.parametrize("first_pass", ["eigh", "cholesky"])
def test_float32_heads_give_float32_bases_of_the_same_spaces(first_pass):
    """pk.nulls.precision float32: the bases stay float32 (the identity added for dropped
    columns takes X's dtype) and span the float64 spaces to float32 accuracy; the pair
    statistics are float64. orthonormal_bases 96, 98."""
    rng = np.random.default_rng(104)
    X = rng.standard_normal((3, 20, 4))
    X[2][:, 3] = X[2][:, 0]  # rank 3: the identity term is used
    Q32, r32 = PK.orthonormal_bases(X.astype(np.float32), first_pass=first_pass)
    assert Q32.dtype == np.float32 and r32.tolist() == [4, 4, 3]
    for h in range(3):
        np.testing.assert_allclose(Q32[h].astype(np.float64) @ Q32[h].T.astype(np.float64), svd_proj(X[h])[0], atol=2e-5)
    out = PK.pk_within(Q32, r32)
    assert out["pk"].dtype == np.float64 and out["rho"].dtype == np.float64


# ------------------------------------------------------------------ sigma_max and angles


def test_sigma_max_of_contractions_for_any_leading_shape():
    """Blocks U_i^T U_j of orthonormal bases have sigma_max < 1; the docstring's (..., a, b)
    includes a single 2-D block and extra leading axes. sigma_max 17, 18 (index errors on
    2-D), 38 (clipped below at 1)."""
    rng = np.random.default_rng(105)
    D = 12
    U = [np.linalg.qr(rng.standard_normal((D, k)))[0] for k in (3, 5, 4, 3)]
    one = U[0].T @ U[1]  # (3, 5), a single block
    assert PK.sigma_max(one) == pytest.approx(np.linalg.svd(one, compute_uv=False)[0], rel=1e-10)
    assert PK.sigma_max(one) < 1.0
    blocks = np.stack([np.stack([U[0].T @ U[3], U[3].T @ U[0]]), np.stack([U[3].T @ U[3] * 0.5, U[0].T @ U[0] * 0.1])])
    np.testing.assert_allclose(PK.sigma_max(blocks), np.linalg.svd(blocks, compute_uv=False)[..., 0], rtol=1e-10)
    assert blocks.shape == (2, 2, 3, 3) and np.all(PK.sigma_max(blocks) < 1.0)
    tall = np.stack([U[1].T @ U[2], U[2].T @ U[1]][:1])  # (1, 5, 4)
    np.testing.assert_allclose(PK.sigma_max(tall), np.linalg.svd(tall, compute_uv=False)[:, 0], rtol=1e-10)


def test_angles_of_mutually_orthogonal_heads_are_90_degrees_to_rounding():
    """Heads cut from one orthonormal matrix are mutually orthogonal: theta_1 = 90 degrees
    exactly, PK = 0. The arccos form gives 90 to ~1e-14 degrees; the sine form (meant for
    angles below 1 degree) loses ~1e-6 degrees there. pk_within 98, cross_pairs 103
    (arccos argument clipped to 1, every angle redone in sine form)."""
    rng = np.random.default_rng(106)
    D, d, n = 40, 4, 6
    Q = np.linalg.qr(rng.standard_normal((D, n * d)))[0]
    X = np.stack([Q[:, h * d:(h + 1) * d] @ rng.standard_normal((d, d)) for h in range(n)])
    assert np.all(sla.subspace_angles(X[0], X[1]) == pytest.approx(np.pi / 2, abs=1e-12))
    B, r = PK.orthonormal_bases(X)
    out = PK.pk_within(B, r)
    np.testing.assert_allclose(out["min_angle_deg"], 90.0, rtol=0, atol=1e-10)
    np.testing.assert_allclose(out["pk"], 0.0, atol=1e-24)
    cr = PK.cross_pairs(B[:3], r[:3], B[3:], r[3:])
    np.testing.assert_allclose(cr["min_angle_deg"], 90.0, rtol=0, atol=1e-10)


# ------------------------------------------------------------------ pk_within, cross_pairs, rho_matrix


def test_pk_within_of_one_head_has_the_schema_of_many():
    """One head: no pairs, but the same columns (names and dtypes) as a layer with pairs,
    so concatenation across kinds and layers keeps every column. pk_within 17-30."""
    rng = np.random.default_rng(107)
    B, r = PK.orthonormal_bases(rng.standard_normal((3, 10, 2)))
    many, one = PK.pk_within(B, r), PK.pk_within(B[:1], r[:1])
    assert list(one) == list(many)
    for k in many:
        assert len(one[k]) == 0 and one[k].dtype.kind == np.asarray(many[k]).dtype.kind, k


def test_rank_one_heads_are_defined_everywhere():
    """Rank-1 spaces (a rank-1 head, and d_head = 1) are ordinary: rho = PK = cos^2 theta_1,
    not NaN. pk_within 59, cross_pairs 33, rho_matrix 35 (undefined below rank 2)."""
    rng = np.random.default_rng(108)
    D, d = 14, 3
    X = rng.standard_normal((4, D, d))
    X[1] = np.outer(rng.standard_normal(D), rng.standard_normal(d))  # rank 1
    X[3] = np.outer(rng.standard_normal(D), rng.standard_normal(d))  # rank 1
    B, r = PK.orthonormal_bases(X)
    assert r.tolist() == [3, 1, 3, 1]
    out = PK.pk_within(B, r)
    for p, (i, j) in enumerate(zip(out["head_i"], out["head_j"])):
        (Pi, ri), (Pj, rj) = svd_proj(X[i]), svd_proj(X[j])
        assert out["rho"][p] == pytest.approx(np.trace(Pi @ Pj) / min(ri, rj), rel=1e-9)
        assert out["flags"][p] == ""
    v = rng.standard_normal((2, D, 1))  # d_head = 1 readers
    Bv, rv = PK.orthonormal_bases(v)
    cr = PK.cross_pairs(B, r, Bv, rv, Xw=X, Xr=v)
    M = PK.rho_matrix(B, r, Bv, rv)
    for i in range(4):
        for j in range(2):
            u = v[j][:, 0] / np.linalg.norm(v[j])
            expect = float(u @ svd_proj(X[i])[0] @ u)  # cos^2 of the angle between v_j and Im X_i
            assert cr["rho"][i * 2 + j] == pytest.approx(expect, rel=1e-9)
            assert M[i, j] == pytest.approx(expect, rel=1e-9)
            assert cr["min_angle_deg"][i * 2 + j] == pytest.approx(np.degrees(np.arccos(np.sqrt(expect))), abs=1e-7)


def test_zero_and_nonfinite_heads_are_undefined_in_cross_pairs_and_rho_matrix():
    """A zero head (rank 0) and a non-finite one (rank -1): PK, rho and theta_1 are NaN,
    never 0 or 90 degrees or -0. cross_pairs 32 (rank 0 defined), rho_matrix 34 (rank -1)."""
    rng = np.random.default_rng(109)
    X = rng.standard_normal((3, 10, 2))
    X[1] = 0.0
    X[2][3, 1] = np.nan
    B, r = PK.orthonormal_bases(X)
    assert r.tolist() == [2, 0, -1]
    Y = rng.standard_normal((2, 10, 2))
    By, ry = PK.orthonormal_bases(Y)
    cr = PK.cross_pairs(B, r, By, ry)
    bad = cr["head_w"] > 0
    for k in ("pk", "rho", "min_angle_deg"):
        assert np.all(np.isnan(cr[k][bad])) and np.all(np.isfinite(cr[k][~bad])), k
    M = PK.rho_matrix(B, r, By, ry)
    assert np.all(np.isnan(M[1:])) and np.all(np.isfinite(M[0]))
    Mt = PK.rho_matrix(By, ry, B, r)
    assert np.all(np.isnan(Mt[:, 1:])) and np.all(np.isfinite(Mt[:, 0]))


def test_cross_pairs_with_only_one_factor_stack_has_no_weighted_measure():
    """The weighted measure needs both raw factor stacks; one alone is ignored, not an
    error. cross_pairs 127 (``or``)."""
    rng = np.random.default_rng(110)
    Xw, Xr = rng.standard_normal((2, 9, 3)), rng.standard_normal((3, 9, 3))
    (Bw, rw), (Br, rr) = PK.orthonormal_bases(Xw), PK.orthonormal_bases(Xr)
    for kw in ({"Xw": Xw}, {"Xr": Xr}):
        out = PK.cross_pairs(Bw, rw, Br, rr, **kw)
        assert "weighted" not in out and len(out["rho"]) == 6


def test_gemms_run_on_the_backend_given():
    """backend: torch / device: cuda reach the big products: the pair-block GEMM of pk_within
    (one strip of heads here; on the numpy backend it is a syrk by numpy itself) and every GEMM
    of cross_pairs (bases, then raw factors) go through the backend passed in. pk_within 39,
    cross_pairs 15, 138."""
    rng = np.random.default_rng(111)
    X = rng.standard_normal((4, 12, 3))
    B, r = PK.orthonormal_bases(X)
    bk = RecordingBackend("torch")
    out = PK.pk_within(B, r, backend=bk)
    assert bk.calls == 1
    np.testing.assert_allclose(out["rho"], PK.pk_within(B, r)["rho"], rtol=1e-12)
    bk = RecordingBackend()
    PK.cross_pairs(B, r, B[:2], r[:2], Xw=X, Xr=X[:2], backend=bk)
    assert bk.calls == 2
    bk = RecordingBackend()
    PK.cross_pairs(B, r, B[:2], r[:2], backend=bk)
    assert bk.calls == 1


# ------------------------------------------------------------------ stacked_rank


def stack_rank_ref(X: np.ndarray, rtol: float = 1e-6) -> int:
    """dim(sum_i Im X_i): matrix_rank of the concatenated SVD bases at rtol * s_max."""
    cols = [np.linalg.svd(x, full_matrices=False)[0][:, :svd_proj(x, rtol)[1]] for x in X]
    S = np.concatenate(cols, axis=1)
    return int(np.linalg.matrix_rank(S, tol=rtol * np.linalg.svd(S, compute_uv=False)[0]))


@pytest.mark.parametrize("n_kv", [2, 3])
def test_stacked_rank_of_overlapping_gqa_heads(n_kv):
    """GQA-like layer: 6 heads whose spaces lie in sums of a few shared KV directions, some
    heads rank-deficient (zero basis columns); n d below and above D. stacked_rank 18, 19
    (stack built from the wrong axes), 42 (scale from a zero eigenvalue), 45 (guard on it)."""
    rng = np.random.default_rng(112 + n_kv)
    D = 20
    shared = rng.standard_normal((n_kv, D, 2))
    X = []
    for h in range(6):
        g = shared[h % n_kv]
        own = rng.standard_normal((D, 1)) if h % 3 == 0 else g @ rng.standard_normal((2, 1))  # rank 3 or 2
        X.append(np.c_[g @ rng.standard_normal((2, 2)), own])
    X = np.stack(X)
    B, r = PK.orthonormal_bases(X)
    assert sorted(set(r.tolist())) == [2, 3]
    expect = stack_rank_ref(X)
    assert expect < min(D, sum(r))  # the heads overlap
    assert PK.stacked_rank(B) == expect
    assert PK.stacked_rank(B[:3]) == stack_rank_ref(X[:3])  # n d = 9 < D


def test_stacked_rank_exact_cases():
    """Mutually orthogonal coordinate heads (Gram exactly I: top eigenvalue exactly 1),
    identical rank-1 spaces (one nonzero eigenvalue), no heads. stacked_rank 48 (top
    eigenvalue > 1 required), 46 (second eigenvalue > 0 required), 35 and 44 (empty stack)."""
    D, d = 12, 3
    E = np.eye(D)
    coord = np.stack([E[:, h * d:(h + 1) * d] for h in range(3)])
    B, r = PK.orthonormal_bases(coord)
    assert PK.stacked_rank(B) == 9 == np.linalg.matrix_rank(np.concatenate(list(coord), axis=1))
    assert PK.stacked_rank(coord) == 9
    rng = np.random.default_rng(114)
    u = rng.standard_normal(D)
    same = np.stack([np.outer(u, rng.standard_normal(d)) for _ in range(4)])
    B, r = PK.orthonormal_bases(same)
    assert r.tolist() == [1, 1, 1, 1] and PK.stacked_rank(B) == 1
    assert PK.stacked_rank(E[:, :1][None]) == 1  # one head of width 1: a 1 x 1 Gram
    assert PK.stacked_rank(np.c_[E[:, 4], np.zeros((D, 2))][None]) == 1  # Gram diag(1, 0, 0)
    assert PK.stacked_rank(np.zeros((0, D, d))) == 0
    assert PK.stacked_rank(np.zeros((3, D, 0))) == 0


def test_stacked_rank_threshold_is_relative_to_the_largest_singular_value_of_the_stack():
    """Eight one-dimensional heads, seven on a common direction and one tilted from it by eps:
    the stack's top singular value is ~sqrt(8), the tilt's ~eps, which lies between
    rtol / sqrt(8) and rtol * sqrt(8) for eps ~ rtol. The count must use rtol * s_max of the
    stack (np.linalg.matrix_rank with that tol). stacked_rank 40 (rtol / s_max), 43 (second
    largest eigenvalue as the scale)."""
    rng = np.random.default_rng(115)
    D, n, rtol = 16, 8, 1e-6
    Q = np.linalg.qr(rng.standard_normal((D, D)))[0]
    for eps in (0.5e-6, 1e-6, 2e-6, 4e-6):
        X = np.stack([Q[:, :1]] * (n - 1) + [(Q[:, 0] + eps * Q[:, 1])[:, None]])
        B, r = PK.orthonormal_bases(X)
        S = B[:, :, 0].T
        sv = np.linalg.svd(S, compute_uv=False)
        assert rtol / sv[0] < sv[1] < rtol * sv[0] or eps == 4e-6  # inside the window (4e-6: above it)
        assert PK.stacked_rank(B, rtol) == int(np.linalg.matrix_rank(S, tol=rtol * sv[0])) == (2 if eps == 4e-6 else 1)


# ------------------------------------------------------------------ pk_within_layer, layer_spaces


def gqa_layer(rng, H=6, G=2, D=16, d=4, weak=None) -> LayerFactors:
    """A random GQA layer (H query heads, G KV groups, RMSNorm gain). ``weak``: scale of the
    last singular value of every head of every kind (None: generic)."""
    def f(n, shape_T):
        W = rng.standard_normal((n, D, d))
        if weak is not None:
            W = heads_with_spectrum(rng, n, D, [2.0, 1.5, 1.0, weak])
        return W if not shape_T else np.swapaxes(W, 1, 2).copy()

    return LayerFactors(W_Q=f(H, True), W_K=f(G, True), W_V=f(G, True), W_O=f(H, False),
                        kv_group=np.arange(H) // (H // G), norm_gain=1 + rng.random(D), norm_type="rmsnorm")


def test_pk_within_layer_and_layer_spaces_use_the_rank_rtol_given():
    """rank_rtol = 1e-2 with a last singular value 1e-3 s_max: every head has rank 3, and the
    layer rank is that of the rank-3 spaces, both from SVDs at 1e-2. pk_within_layer 29 (spaces at
    the default tolerance), 49 (layer rank at the default), layer_spaces 12."""
    rng = np.random.default_rng(116)
    f = gqa_layer(rng, weak=2e-3)
    cols, facts, spaces = PK.pk_within_layer(f, rank_rtol=1e-2, return_spaces=True)
    for kind in PK.KINDS:
        X = PK.factor_stack(f, kind)
        ranks = [svd_proj(x, 1e-2)[1] for x in X]
        assert ranks == [3] * len(X)
        assert facts[kind]["ranks"] == ranks and spaces[kind][2].tolist() == ranks
        assert facts[kind]["layer_rank"] == stack_rank_ref(X, 1e-2) == min(16, 3 * len(X))  # not 4 per head
        assert facts[kind]["direct_sum_defect"] == sum(ranks) - stack_rank_ref(X, 1e-2)
    sel = np.asarray(cols["kind"]) == "O"
    Xo = PK.factor_stack(f, "O")
    for p in np.flatnonzero(sel):
        i, j = cols["head_i"][p], cols["head_j"][p]
        Pi, Pj = svd_proj(Xo[i], 1e-2)[0], svd_proj(Xo[j], 1e-2)[0]
        assert cols["rho"][p] == pytest.approx(np.trace(Pi @ Pj) / 3, rel=1e-9)
    ls = PK.layer_spaces(f, ("K",), 1e-2)
    assert ls["K"][2].tolist() == [3, 3]


def test_pk_within_layer_layer_rank_uses_the_rank_rtol_given():
    """Writers of full rank 4 (at 1e-2 and 1e-6) where head 1 repeats a direction of head 0
    up to a tilt of 1e-4: the sum of the spaces has one singular value ~1e-4 / s_max, so
    dim(sum) is 7 at rank_rtol 1e-2 and 8 at 1e-6 (from the SVD of the stacked SVD bases).
    pk_within_layer 49 (layer rank at the default tolerance)."""
    rng = np.random.default_rng(120)
    D, d = 16, 4
    O = rng.standard_normal((2, D, d))
    O[1][:, 0] = O[0][:, 1] + 1e-4 * rng.standard_normal(D)
    f = LayerFactors(W_Q=np.swapaxes(O, 1, 2), W_K=np.swapaxes(O, 1, 2), W_V=np.swapaxes(O, 1, 2), W_O=O,
                     kv_group=np.arange(2), norm_gain=None, norm_type="none")
    for rtol, expect in ((1e-2, 7), (1e-6, 8)):
        _, facts = PK.pk_within_layer(f, kinds=("O",), rank_rtol=rtol)
        assert facts["O"]["ranks"] == [svd_proj(x, rtol)[1] for x in O] == [4, 4]
        assert facts["O"]["layer_rank"] == stack_rank_ref(O, rtol) == expect
        assert facts["O"]["direct_sum_defect"] == 8 - expect


def test_layer_spaces_default_tolerance_keeps_full_rank_heads():
    """The default rank_rtol is 1e-6 (docs/methods.md §2.2): generic heads keep full rank. layer_spaces 1."""
    rng = np.random.default_rng(117)
    f = gqa_layer(rng)
    sp = PK.layer_spaces(f, ("O", "V"))
    assert sp["O"][2].tolist() == [4] * 6 and sp["V"][2].tolist() == [4, 4]
    X = heads_with_spectrum(rng, 2, 16, [1.0, 0.5, 0.1, 1e-7])
    f2 = LayerFactors(W_Q=np.swapaxes(X, 1, 2), W_K=np.swapaxes(X, 1, 2), W_V=np.swapaxes(X, 1, 2), W_O=X,
                      kv_group=np.arange(2), norm_gain=None, norm_type="none")
    assert PK.layer_spaces(f2, ("O",))["O"][2].tolist() == [3, 3]


def test_pk_within_layer_with_no_kinds_gives_empty_columns():
    """kinds = (): every column is an empty array and there are no facts. pk_within_layer 79, 81."""
    rng = np.random.default_rng(118)
    cols, facts = PK.pk_within_layer(gqa_layer(rng), kinds=())
    assert facts == {}
    assert set(cols) == {"kind", "head_i", "head_j", "pk", "rho", "min_angle_deg", "dim_i", "dim_j", "flags"}
    for v in cols.values():
        assert isinstance(v, np.ndarray) and v.shape == (0,)


# ------------------------------------------------------------------ reference values and statistics


@pytest.mark.parametrize("D", [2, 3, 7, 64, 768])
def test_isotropic_sd_exact_for_one_dimensional_spaces(D):
    """d = 1: rho = (u . v)^2 for independent uniform unit vectors, which is Beta(1/2, (D-1)/2)
    (scipy); its SD is the formula's at d = 1. D = 2: cos^2 of a uniform angle, variance 1/8.
    isotropic_sd 17 (D + 3)."""
    assert PK.isotropic_sd(1, D) == pytest.approx(sps.beta(0.5, (D - 1) / 2).std(), rel=1e-12)
    if D == 2:
        assert PK.isotropic_sd(1, 2) == pytest.approx(math.sqrt(1 / 8), rel=1e-12)


def test_layer_stats_without_pairs_is_all_nan_with_the_same_keys():
    """No finite rho: n_pairs 0 and every statistic NaN (a float), under the same keys as a
    layer with pairs. layer_stats 17 (None), 24-39 (key names)."""
    full = PK.layer_stats([0.1, 0.2], [10.0, 20.0], 0.1)
    for rho in ([], [np.nan, np.inf]):
        st = PK.layer_stats(rho, [], 0.1)
        assert list(st) == list(full) and st["n_pairs"] == 0
        for k, v in st.items():
            if k != "n_pairs":
                assert isinstance(v, float) and math.isnan(v), k


def test_layer_stats_with_pairs_but_no_angles():
    """pk_null_cross passes angles=NaN (angles not computed): min_angle_deg is NaN, the
    rho statistics are ordinary. layer_stats 69, 71, 72."""
    rho = np.array([0.3, 0.1, 0.05, 0.6])
    st = PK.layer_stats(rho, np.full(4, np.nan), 0.1)
    assert math.isnan(st["min_angle_deg"])
    assert st["n_pairs"] == 4 and st["mean"] == pytest.approx(np.mean(rho)) and st["max"] == 0.6
    assert math.isnan(PK.layer_stats(rho, [], 0.1)["min_angle_deg"])


def test_layer_stats_share_above_twice_iso_is_strict():
    """'Above 2x isotropic' is strict: rho exactly 2 iso (0.5 at iso 0.25, both exact in
    binary) is not above. layer_stats 78 (>=)."""
    st = PK.layer_stats([0.5, 0.75, 0.1, 0.125], [1.0] * 4, 0.25)
    assert st["share_above_2iso"] == 0.25
    assert st["share_below_half_iso"] == 0.25  # 0.1 < 0.125; 0.125 itself is not below


# ------------------------------------------------------------------ self-overlap test


def test_self_overlap_exactness_boundary_and_default_permutations():
    """Exact test iff n! - 1 <= n_perm (every non-identity permutation used); n_perm = n! - 2
    is not exact and draws n_perm random permutations; the default is 10 000 permutations
    (docs/methods.md §2.10; the PK paper, Appendix H). self_overlap_test 17, 19, 20 (boundary), 1 (default)."""
    rng = np.random.default_rng(119)
    rho = rng.random((3, 3))
    obs, null, p, exact = PK.self_overlap_test(rho, [0, 1, 2], np.random.default_rng(0), n_perm=5)
    assert exact and null.size == 5
    assert sorted(null) == pytest.approx(sorted(np.mean([rho[h, q[h]] for h in range(3)])
                                                for q in [(0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]))
    obs, null, p, exact = PK.self_overlap_test(rho, [0, 1, 2], np.random.default_rng(0), n_perm=4)
    assert not exact and null.size == 4
    rho8 = rng.random((8, 8))
    obs, null, p, exact = PK.self_overlap_test(rho8, np.arange(8), np.random.default_rng(1))
    assert not exact and null.size == 10_000
    k = int(np.sum(null >= obs - 1e-12 * abs(obs)))
    assert p == pytest.approx((k + 1) / (null.size + 1))


# ------------------------------------------------------------------ upper_blocks, cross_blocks (second run)


def per_head_blocks(B: np.ndarray) -> np.ndarray:
    """Reference for upper_blocks: U_i^T U_j for i < j in triu order, one explicit product each."""
    n = B.shape[0]
    return np.stack([B[i].T @ B[j] for i in range(n) for j in range(i + 1, n)])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("heads_per_strip", [1, 2, 3, 100])
def test_upper_blocks_in_several_strips_equal_the_per_head_products(heads_per_strip, dtype, monkeypatch):
    """Strips of heads (a > 0: the strip's own block, the part right of it, the rows of each
    head) give every U_i^T U_j, in float32 for float32 bases. upper_blocks 16, 18, 95, 97, 100,
    102, 103, 104, 105, 122, 123, 126, 145, 147 (all only reachable with more than one strip)."""
    rng = np.random.default_rng(131)
    n, D, d = 7, 20, 3
    B = rng.standard_normal((n, D, d)).astype(dtype)
    # budget for heads_per_strip heads of the (strip x all heads) Gram block, plus a little
    itemsize = np.dtype(dtype).itemsize
    monkeypatch.setattr(PK, "UPPER_STRIP_MB", (heads_per_strip + 0.5) * itemsize * n * d * d / 2**20)
    got = PK.upper_blocks(B)
    ref = per_head_blocks(B.astype(np.float64))
    assert got.dtype == dtype and got.shape == ref.shape == (n * (n - 1) // 2, d, d)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    assert np.max(np.abs(got - ref)) <= tol * np.max(np.abs(ref))


@pytest.mark.parametrize("heads_per_strip,itemsize", [(1, 8), (3, 8), (2, 4)])
def test_upper_blocks_strips_fit_the_memory_budget(heads_per_strip, itemsize, monkeypatch):
    """Each strip's Gram block (k heads x the heads from the strip on) holds at most
    UPPER_STRIP_MB MiB and is as large as that allows (k + 1 heads would not fit), one head at
    least: checked on the products the (torch-named) backend receives. upper_blocks 44, 52-57."""
    n, D, d = 9, 16, 2
    dtype = {8: np.float64, 4: np.float32}[itemsize]
    B = np.random.default_rng(137).standard_normal((n, D, d)).astype(dtype)
    per_head = itemsize * n * d * d  # bytes of one head's rows against all n heads
    budget = (heads_per_strip + 0.5) * per_head
    monkeypatch.setattr(PK, "UPPER_STRIP_MB", budget / 2**20)
    bk = ShapeRecordingBackend("torch")
    got = PK.upper_blocks(B, bk)
    rows = [a[0] for a, _ in bk.shapes]
    assert rows[0] == heads_per_strip * d  # the largest strip that fits
    assert rows[0] * n * d * itemsize <= budget < (rows[0] + d) * n * d * itemsize
    assert len(rows) == -(-(n - 1) // heads_per_strip)
    ref = per_head_blocks(B.astype(np.float64))
    assert np.max(np.abs(got - ref)) <= (1e-12 if itemsize == 8 else 1e-5) * np.max(np.abs(ref))


def test_upper_blocks_on_the_numpy_backend_is_numpys_own_product():
    """On the numpy backend the strips' products are numpy's own (the transposed strip view
    handed to BLAS without a copy), not Backend.matmul's: no product goes through it."""
    B = np.random.default_rng(139).standard_normal((5, 12, 3))
    bk = RecordingBackend("numpy")
    got = PK.upper_blocks(B, bk)
    assert bk.calls == 0
    np.testing.assert_allclose(got, per_head_blocks(B), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("heads_per_strip", [1, 2, 3, 4, 100])
def test_upper_blocks_compute_each_pair_once_on_numpy(heads_per_strip, monkeypatch):
    """On the numpy backend the products cover exactly the pairs' blocks: the strip against the heads
    right of it, and the strip's own pairs one head at a time (no block computed twice or left
    unused), every block bit for bit the per-head product."""
    rng = np.random.default_rng(151)
    n, D, d = 9, 30, 4
    B = PK.heads_of(rng.standard_normal((D, n * d)), n)
    monkeypatch.setattr(PK, "UPPER_STRIP_MB", (heads_per_strip + 0.5) * 8 * n * d * d / 2**20)
    entries = []

    class CountingNumpy:
        def __getattr__(self, name):
            return getattr(np, name)

        def matmul(self, a, b, out=None):
            entries.append(a.shape[0] * b.shape[1])
            return np.matmul(a, b, out=out)

    monkeypatch.setattr(PK, "np", CountingNumpy())
    got = PK.upper_blocks(B)
    assert sum(entries) == n * (n - 1) // 2 * d * d
    assert np.array_equal(got, per_head_blocks(B))


def test_prestacked_writers_are_used_not_restacked(monkeypatch):
    """cross_pairs(Sw=, SXw=) and cross_blocks(Sa=) take the stacked matrix given (a writer met
    by many readers is stacked once): only the readers are stacked per call, and the results
    equal explicit per-pair products. cross_blocks 5, cross_pairs 13, 17, 135, 139."""
    rng = np.random.default_rng(149)
    Xw, Xr = rng.standard_normal((3, 10, 2)), rng.standard_normal((2, 10, 2))
    (Bw, rw), (Br, rr) = PK.orthonormal_bases(Xw), PK.orthonormal_bases(Xr)
    Sw, SXw = PK.stacked(Bw), PK.stacked(Xw)
    np.testing.assert_array_equal(Sw, np.concatenate(list(Bw), axis=1))
    calls = []
    real = PK.stacked
    monkeypatch.setattr(PK, "stacked", lambda U: calls.append(U.shape) or real(U))
    out = PK.cross_pairs(Bw, rw, Br, rr, Xw=Xw, Xr=Xr, Sw=Sw, SXw=SXw)
    assert calls == [Br.shape, Xr.shape]
    pk_ref = [np.sum((Bw[i].T @ Br[j]) ** 2) for i in range(3) for j in range(2)]
    np.testing.assert_allclose(out["pk"], pk_ref, rtol=1e-12)
    w_ref = [10 * np.sum((Xr[j].T @ Xw[i]) ** 2) / (np.sum(Xw[i] ** 2) * np.sum(Xr[j] ** 2))
             for i in range(3) for j in range(2)]
    np.testing.assert_allclose(out["weighted"], w_ref, rtol=1e-12)
    calls.clear()
    C = PK.cross_blocks(Bw, Br, Sa=Sw)
    assert calls == [Br.shape]
    np.testing.assert_allclose(C[2, 1], Bw[2].T @ Br[1], rtol=1e-12, atol=1e-14)


def test_cross_blocks_rejects_a_prestacked_matrix_of_the_wrong_shape():
    """A stacked Ua of the wrong shape is a ValueError naming both shapes (D, na * da).
    cross_blocks 5, 10, 11."""
    rng = np.random.default_rng(151)
    Ua, Ub = rng.standard_normal((3, 8, 2)), rng.standard_normal((2, 8, 2))
    with pytest.raises(ValueError, match=r"cross_blocks: stacked Ua \(8, 4\) is not \(8, 6\)"):
        PK.cross_blocks(Ua, Ub, Sa=PK.stacked(Ua[:2]))


@pytest.mark.parametrize("d,heads", [(128, 4), (64, 8), (256, 2), (1024, 1), (3, 7)])
def test_upper_blocks_strips_are_about_strip_cols_wide(d, heads, monkeypatch):
    """With memory to spare, a strip is UPPER_STRIP_COLS // d heads (one at least, at most all):
    wide enough for a GEMM near the peak rate, narrow enough that the strip's own triangle, computed
    twice, is a small share. Checked on the products the (torch-named) backend receives."""
    n, D = 7, 16
    monkeypatch.setattr(PK, "UPPER_STRIP_COLS", 512)
    B = np.random.default_rng(151).standard_normal((n, D, d))
    bk = ShapeRecordingBackend("torch")
    got = PK.upper_blocks(B, bk)
    rows = [a[0] for a, _ in bk.shapes]
    assert rows[0] == min(heads, n) * d and len(rows) == -(-(n - 1) // min(heads, n))
    # each strip's GEMM starts right of its first head (no block of a head with itself there)
    k = min(heads, n)
    assert [b[1] for _, b in bk.shapes] == [(n - a - 1) * d for a in range(0, n - 1, k)]
    ref = per_head_blocks(B)
    assert np.max(np.abs(got - ref)) <= 1e-12 * np.max(np.abs(ref))
