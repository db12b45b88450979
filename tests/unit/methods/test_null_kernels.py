"""The restructured null kernels (issue 14) against the code path they replaced.

* rotation null: ``rotate_spectrum`` applies the Householder reflectors of the Gaussian's QR
  (LAPACK dgeqrt / dgemqrt, compact WY) instead of forming Q (np.linalg.qr = dgeqrf + dorgqr)
  and multiplying. The reference is the previous code: S @ haar_stiefel(m, m) (tall/square) and
  L @ haar_stiefel(m, D)^T (wide), haar_stiefel being the explicit sign-fixed QR of the same
  Gaussian. Not bit for bit (other LAPACK routines): the draw agrees to 1e-13 of its scale and
  every per-pair rho, min angle and layer statistic to 1e-12 relative.
* ``upper_blocks`` from strips of the stacked Gram (syrk + GEMM) against one GEMM per head
  against the heads after it (the previous code): 1e-12 relative, and bit for bit through
  pk_within for the same factors (the reassignment null), as with the pinned OpenBLAS each
  block entry is the same dot product and the output keeps the previous memory layout (which
  decides einsum's summation order).
* torch backend (float64, CPU) against numpy: the same draws to 1e-12 relative."""

from __future__ import annotations

import numpy as np
import pytest

from headgeom.core.backend import Backend
from headgeom.methods import nulls as N
from headgeom.methods import overlap

TORCH = Backend("torch", "cpu")


def _old_rotate(S, rng):
    """The rotation null before issue 14: form the Haar matrix, then one GEMM."""
    D, m = S.shape
    if m <= D:
        return S @ N.haar_stiefel(m, m, rng, S.dtype)
    L = np.linalg.qr(S.T, mode="r").T
    return L @ N.haar_stiefel(m, D, rng, S.dtype).T


def _old_upper_blocks(bases):
    n, D, d = bases.shape
    S = np.ascontiguousarray(np.swapaxes(bases, 0, 1).reshape(D, n * d))
    out = [(bases[i].T @ S[:, (i + 1) * d:]).reshape(d, n - i - 1, d).transpose(1, 0, 2) for i in range(n - 1)]
    return np.concatenate(out) if out else np.empty((0, d, d))


def _layer(n, D, d, seed, aniso=True):
    """Per-head factors (n, D, d) whose stacked matrix has a spread spectrum (cond ~ 1e3) like
    real weights, not the flat one of a Gaussian."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, D, d)) / np.sqrt(D)
    if aniso:
        S = N.stack(X)
        U, s, Vt = np.linalg.svd(S, full_matrices=False)
        X = N.unstack((U * (s * np.logspace(0, -3, s.size))) @ Vt, n)
    return X


def _rel(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))


# (D, n, d): tall (m < D), square (m = D), wide (m > D); m above the QR block size (several blocks,
# a partial last one) and below it
SHAPES = [(300, 4, 50), (160, 10, 16), (96, 6, 16), (64, 9, 12), (40, 3, 7)]


@pytest.mark.parametrize("D,n,d", SHAPES)
def test_rotation_draw_equals_the_formed_haar_product(D, n, d):
    S = N.stack(_layer(n, D, d, seed=D + n))
    new = N.rotate_spectrum(S, np.random.default_rng(7))
    old = _old_rotate(S, np.random.default_rng(7))
    assert new.shape == old.shape and new.flags.c_contiguous
    assert np.max(np.abs(new - old)) <= 1e-13 * np.max(np.abs(old))


@pytest.mark.parametrize("D,n,d", SHAPES)
def test_within_null_statistics_equal_the_previous_path(D, n, d):
    """What a pk_null_within row holds (layer statistics and the sorted rho), new path vs old."""
    X = _layer(n, D, d, seed=3 * D + n)
    iso = overlap.isotropic_rho(d, D)
    for null in ("rotation", "reassign"):
        Xn = N.null_factors(X, null, np.random.default_rng(11))
        if null == "rotation":
            Xo = N.unstack(_old_rotate(N.stack(X), np.random.default_rng(11)), n)
        else:
            Xo = N.null_factors(X, null, np.random.default_rng(11))
            np.testing.assert_array_equal(Xn, Xo)  # reassignment: unchanged, bit for bit
        Bn, rn = overlap.orthonormal_bases(Xn)
        Bo, ro = overlap.orthonormal_bases(Xo)
        np.testing.assert_array_equal(rn, ro)
        new = overlap.pk_within(Bn, rn)
        # the previous pk_within: blocks from one GEMM per head, sigma_max by the same eigvalsh
        C = _old_upper_blocks(Bo)
        pko = np.einsum("pij,pij->p", C, C)
        iu, ju = np.triu_indices(n, 1)
        rho_o = pko / np.minimum(ro[iu], ro[ju])
        ang_o = np.degrees(np.arccos(np.clip(overlap.sigma_max(C), -1, 1)))
        assert _rel(new["rho"], rho_o) <= 1e-12
        if null == "reassign" and d % 8 == 0:
            # same factors: the blocks and the pair sums add in the same order (einsum's SIMD order
            # also depends on the alignment of each block row; rows of 8k doubles, as every model's
            # d_head, leave only the base pointer, which numpy's large allocations share)
            np.testing.assert_array_equal(new["rho"], rho_o)
            np.testing.assert_array_equal(new["min_angle_deg"], np.degrees(np.arccos(np.clip(overlap.sigma_max(C), -1, 1))))
        # the angle through its cosine (sigma_max) to 1e-12; in degrees arccos near 1 magnifies the
        # last bits of sigma_max (relative 1/theta^2: about 1.4e-12 at 1.4 degrees, where the sine
        # form has not taken over), so degrees agree to 1e-11 absolute
        assert _rel(np.cos(np.radians(new["min_angle_deg"])), np.cos(np.radians(ang_o))) <= 1e-12
        assert np.max(np.abs(new["min_angle_deg"] - ang_o)) <= 1e-11
        sn, so = overlap.layer_stats(new["rho"], new["min_angle_deg"], iso), overlap.layer_stats(rho_o, ang_o, iso)
        for k in sn:
            tol = 1e-11 if k == "min_angle_deg" else 1e-12 * abs(so[k])
            assert abs(sn[k] - so[k]) <= tol, (null, k, sn[k], so[k])


@pytest.mark.parametrize("D,n,d", SHAPES[:3])
def test_cross_null_rho_equals_the_previous_path(D, n, d):
    """pk_null_cross: rotated writer and reader draws, then the stacked-basis cross blocks."""
    Xw, Xr = _layer(n, D, d, seed=5), _layer(max(2, n // 2), D, d, seed=6)
    rw_new = overlap.orthonormal_bases(N.null_factors(Xw, "rotation", np.random.default_rng(1)))
    rr_new = overlap.orthonormal_bases(N.null_factors(Xr, "rotation", np.random.default_rng(2)))
    rw_old = overlap.orthonormal_bases(N.unstack(_old_rotate(N.stack(Xw), np.random.default_rng(1)), n))
    rr_old = overlap.orthonormal_bases(N.unstack(_old_rotate(N.stack(Xr), np.random.default_rng(2)), Xr.shape[0]))
    a = overlap.cross_pairs(*rw_new, *rr_new, angles=False)
    b = overlap.cross_pairs(*rw_old, *rr_old, angles=False)
    assert _rel(a["rho"], b["rho"]) <= 1e-12


@pytest.mark.parametrize("n,D,d", [(2, 10, 3), (5, 40, 8), (9, 64, 16), (30, 96, 4)])
@pytest.mark.parametrize("strip_mb", [None, 1e-9])  # one strip; one head per strip
def test_upper_blocks_equal_one_gemm_per_head(n, D, d, strip_mb, monkeypatch):
    if strip_mb is not None:
        monkeypatch.setattr(overlap, "UPPER_STRIP_MB", strip_mb)
    B = np.random.default_rng(n * D).standard_normal((n, D, d))
    new, old = overlap.upper_blocks(B), _old_upper_blocks(B)
    assert new.shape == old.shape == (n * (n - 1) // 2, d, d)
    assert np.max(np.abs(new - old)) <= 1e-12 * np.max(np.abs(old))
    # and each block is U_i^T U_j, explicitly
    iu, ju = np.triu_indices(n, 1)
    for p in (0, len(iu) // 2, len(iu) - 1):
        np.testing.assert_allclose(new[p], B[iu[p]].T @ B[ju[p]], rtol=1e-12, atol=1e-12)
    t = overlap.upper_blocks(B, TORCH)
    assert np.max(np.abs(t - old)) <= 1e-12 * np.max(np.abs(old))


@pytest.mark.parametrize("D,n,d", SHAPES)
def test_torch_rotation_equals_numpy(D, n, d):
    X = _layer(n, D, d, seed=9)
    a = N.null_factors(X, "rotation", np.random.default_rng(4), backend=TORCH)
    b = N.null_factors(X, "rotation", np.random.default_rng(4))
    assert np.max(np.abs(a - b)) <= 1e-12 * np.max(np.abs(b))
    ra, rb = (overlap.pk_within(*overlap.orthonormal_bases(Y))["rho"] for Y in (a, b))
    assert _rel(ra, rb) <= 1e-12


def test_float32_rotation_is_the_float64_draw_to_float32_rounding():
    S = N.stack(_layer(6, 160, 16, seed=2))
    a = N.rotate_spectrum(S.astype(np.float32), np.random.default_rng(3))
    b = N.rotate_spectrum(S, np.random.default_rng(3))
    assert a.dtype == np.float32
    err = np.max(np.abs(a - b)) / np.max(np.abs(b))
    assert 1e-9 < err < 1e-5  # float32 work (not float64 in disguise), float32-accurate


def test_haar_apply_rejects_shapes_that_do_not_fit():
    bk = Backend()
    with pytest.raises(ValueError, match="do not fit"):
        bk.haar_apply(np.ones((4, 3)), np.ones((5, 5)))
    with pytest.raises(ValueError, match="do not fit"):
        bk.haar_apply(np.ones((4, 4)), np.ones((3, 4)), transpose=True)


def test_cross_pairs_with_a_prestacked_writer_is_the_same_computation():
    """pk_cross_job / pk_null_cross_job stack a writer once for all its readers; sigma_max runs on
    the strided (nw, nr, d, d) view instead of a reshaped copy. Bit for bit the previous call."""
    rng = np.random.default_rng(8)
    Xw, Xr = rng.standard_normal((5, 48, 6)), rng.standard_normal((3, 48, 6))
    Bw, rw = overlap.orthonormal_bases(Xw)
    Br, rr = overlap.orthonormal_bases(Xr)
    a = overlap.cross_pairs(Bw, rw, Br, rr, Xw=Xw, Xr=Xr, Sw=overlap.stacked(Bw), SXw=overlap.stacked(Xw))
    b = overlap.cross_pairs(Bw, rw, Br, rr, Xw=Xw, Xr=Xr)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    C = overlap.cross_blocks(Bw, Br)
    np.testing.assert_array_equal(overlap.sigma_max(C).ravel(), overlap.sigma_max(C.reshape(-1, 6, 6)))
    np.testing.assert_allclose(overlap.sigma_max(C)[1, 2], np.linalg.svd(Bw[1].T @ Br[2], compute_uv=False)[0], rtol=1e-12)
    with pytest.raises(ValueError, match="stacked Ua"):
        overlap.cross_blocks(Bw, Br, Sa=overlap.stacked(Br))


def test_reassignment_is_the_seeded_column_permutation_c_ordered():
    """reassign_columns deals S's columns in the order of the draw's permutation (the same values
    as S[:, perm], bit for bit) into a C-ordered copy: unstack then needs no reordering copy."""
    S = np.random.default_rng(3).standard_normal((12, 20))
    out = N.reassign_columns(S, np.random.default_rng(9))
    np.testing.assert_array_equal(out, S[:, np.random.default_rng(9).permutation(20)])
    assert out.flags["C_CONTIGUOUS"] and not np.shares_memory(out, S)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("backend", [None, TORCH])
def test_bases_are_the_heads_of_one_stacked_matrix_with_the_bits_of_contiguous_ones(backend, dtype):
    """orthonormal_bases writes its bases as the heads of one (D, n d) matrix (``heads_of``), so
    stacking them for the pair GEMMs (upper_blocks, cross_blocks) copies nothing; each head's
    values are the bits of the per-head products into a contiguous array (the previous output),
    also from input heads that are themselves views of a stacked matrix (the null draws). In
    float32 (the null mode) every step runs in float32 (orthonormal_bases 98, 100: a float64
    identity in the second pass would promote its Cholesky factor)."""
    X = _layer(7, 64, 8, seed=31).astype(dtype)
    bk = overlap.NUMPY if backend is None else backend
    B, r = overlap.orthonormal_bases(X, backend=bk)
    S = overlap.stacked(B)
    assert np.shares_memory(S, B) and S.flags["C_CONTIGUOUS"] and S.shape == (64, 56) and B.dtype == dtype
    # the reference: the same steps with the last product into a fresh contiguous array
    G = X.swapaxes(-1, -2) @ X
    w, W = np.linalg.eigh(G)
    w, W = w[..., ::-1], W[..., ::-1]
    s = np.sqrt(np.clip(w, 0.0, None))
    keep = s > 1e-6 * s[..., :1]
    Q1 = X @ (W * np.where(keep, 1.0 / np.where(keep, s, 1.0), 0.0)[..., None, :])
    L = np.linalg.cholesky(Q1.swapaxes(-1, -2) @ Q1 + np.eye(8, dtype=dtype) * (~keep)[..., None, :])
    ref = Q1 @ np.linalg.inv(L).swapaxes(-1, -2)
    assert ref.dtype == dtype
    if backend is None:
        np.testing.assert_array_equal(B, ref)
    else:
        np.testing.assert_allclose(B, ref, rtol=0, atol=1e-13 if dtype == np.float64 else 1e-5)
    np.testing.assert_array_equal(r, keep.sum(-1))
    Bv, rv = overlap.orthonormal_bases(N.unstack(N.stack(X), 7), backend=bk)  # view input: same bits
    np.testing.assert_array_equal(Bv, B)
    np.testing.assert_array_equal(rv, r)


def test_null_draws_are_heads_of_the_drawn_matrix_and_a_stacked_input_is_not_copied():
    """null_factors returns the draw's heads as views of the sampler's (D, n d) output (no
    unstacking copy), and stacks input heads that already are a stacked matrix's for free: a
    sampler sees the job's stacked matrix itself."""
    X = _layer(5, 40, 6, seed=7)
    S = N.stack(X)
    seen = []

    def spy(M, rng):
        seen.append(M)
        return M * 2.0

    N.register_null(N.NullModel("spy_stack", spy, "spy"))
    try:
        out = N.null_factors(N.unstack(S, 5), "spy_stack", np.random.default_rng(0))
    finally:
        del N.NULL_MODELS["spy_stack"]
    assert seen[0] is S or (np.shares_memory(seen[0], S) and seen[0].shape == S.shape)
    assert np.shares_memory(N.stack(out), out)
    np.testing.assert_array_equal(out, 2.0 * X)


def test_stacked_heads_are_a_stacked_copy_read_as_heads():
    """overlap.stacked_heads: the same values as the heads given, held as the heads of one new
    stacked (D, n d) matrix (stacking them again copies nothing; the input is not shared);
    overlap.heads_of refuses a width that does not split into the heads."""
    X = np.random.default_rng(4).standard_normal((3, 10, 4))
    H = overlap.stacked_heads(X)
    np.testing.assert_array_equal(H, X)
    S = overlap.stacked(H)
    assert np.shares_memory(S, H) and S.flags["C_CONTIGUOUS"] and S.shape == (10, 12)
    assert not np.shares_memory(H, X)
    np.testing.assert_array_equal(overlap.heads_of(S, 3), X)
    with pytest.raises(ValueError, match="12 columns do not split into 5 heads"):
        overlap.heads_of(S, 5)


@pytest.mark.parametrize("backend", [None, TORCH])
@pytest.mark.parametrize("shape", [(40, 3, 7), (96, 6, 16), (300, 4, 50)])
def test_every_sampler_leaves_the_shared_layer_matrix_as_it_was(shape, backend):
    """The null jobs hand every draw the same stacked matrix (overlap.stacked_heads), so no registered
    sampler may write into it: S is bitwise the same after a draw of each null model."""
    D, n, d = shape
    S = N.stack(_layer(n, D, d, seed=5))
    before = S.copy()
    for model in N.NULL_MODELS.values():
        kw = {"backend": backend or overlap.NUMPY} if model.uses_backend else {}
        out = model.sampler(S, np.random.default_rng(1), **kw)
        assert out.shape == S.shape and not np.shares_memory(out, S)
        np.testing.assert_array_equal(S, before)


def test_rotation_draws_share_the_lq_factor_of_a_wide_layer_matrix(monkeypatch):
    """A wide S (n d > D): every rotation draw needs S's LQ factor. With ``prepared`` it is computed
    once per (null, precision, key) and every draw has the bits of an unprepared draw; a budgeted
    store that declines to keep it (jobs.pk_paper._Prepared) recomputes it, with the same bits."""
    from headgeom.core.seeds import rng_for
    from headgeom.jobs.pk_paper import _Prepared
    from headgeom.methods import nulls
    from headgeom.methods.overlap import stacked_heads

    rng = np.random.default_rng(3)
    X = stacked_heads(rng.standard_normal((4, 24, 10)))  # 4 heads of 10 in D = 24: wide (40 > 24)
    calls = []
    real = nulls.lq_factor
    monkeypatch.setattr(nulls, "lq_factor", lambda S: calls.append(1) or real(S))
    plain = [nulls.null_factors(X, "rotation", rng_for("t", s)) for s in range(3)]
    assert len(calls) == 3
    calls.clear()
    prepared = {}
    shared = [nulls.null_factors(X, "rotation", rng_for("t", s), prepared=prepared, key=("O", 0)) for s in range(3)]
    assert len(calls) == 1 and list(prepared) == [("rotation", "float64", ("O", 0))]
    calls.clear()
    declined = _Prepared(budget_mb=0)
    again = [nulls.null_factors(X, "rotation", rng_for("t", s), prepared=declined, key=("O", 0)) for s in range(3)]
    assert len(calls) == 3 and not declined
    for a, b, c in zip(plain, shared, again):
        assert np.array_equal(a, b) and np.array_equal(a, c)
    # a square S has nothing to share; the reassignment null has no preparation
    Xsq = stacked_heads(rng.standard_normal((3, 24, 8)))
    prepared.clear()
    nulls.null_factors(Xsq, "rotation", rng_for("t", 0), prepared=prepared, key="sq")
    nulls.null_factors(X, "reassign", rng_for("t", 0), prepared=prepared, key="re")
    assert prepared == {("rotation", "float64", "sq"): {}}
