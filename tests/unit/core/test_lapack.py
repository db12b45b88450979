"""headgeom.core.lapack: scipy's LAPACK QR routines called through ctypes give scipy's wrappers' bits,
serially and from worker threads. (That two threads' calls run at once is a speed, measured by
`make bench`'s null_cross_threads section, not here.)"""


import numpy as np
import pytest
from scipy.linalg import lapack as scipy_lapack

from headgeom.core import lapack


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape,nb", [((300, 300), 64), ((500, 200), 32), ((257, 130), 128)])
def test_geqrt_gemqrt_match_scipy_bit_for_bit(dtype, shape, nb):
    rng = np.random.default_rng(3)
    Z = rng.standard_normal(shape).astype(dtype)
    nb = min(nb, shape[1])
    ref_geqrt, ref_gemqrt = scipy_lapack.get_lapack_funcs(("geqrt", "gemqrt"), (Z,))
    a_ref, t_ref, info_ref = ref_geqrt(nb, np.array(Z, order="F"))
    a, t, info = lapack.geqrt(nb, np.array(Z, order="F"))
    assert info == info_ref == 0
    assert np.array_equal(a, a_ref) and np.array_equal(t, t_ref)
    C = rng.standard_normal((shape[0], 70)).astype(dtype)
    for trans in ("N", "T"):
        ref, _ = ref_gemqrt(a_ref, t_ref, np.array(C, order="F"), side="L", trans=trans)
        out, info = lapack.gemqrt(a, t, np.array(C, order="F"), side="L", trans=trans)
        assert info == 0
        assert np.array_equal(out, ref)
    # and the product is Q (resp. Q^T) times C: Q from numpy's QR up to the signs of R's diagonal
    Q, R = np.linalg.qr(Z.astype(np.float64), mode="complete")
    s = np.ones(shape[0])
    s[: shape[1]] = np.sign(np.diag(R)) * np.sign(np.diag(a)[: shape[1]])
    out, _ = lapack.gemqrt(a, t, np.array(C, order="F"), side="L", trans="N")
    tol = 1e-10 if dtype == np.float64 else 1e-3
    np.testing.assert_allclose(out, (Q * s) @ C, atol=tol * np.abs(C).max())


def test_refuses_c_ordered_or_read_only_arrays():
    Z = np.random.default_rng(0).standard_normal((20, 10))
    with pytest.raises(ValueError, match="Fortran-ordered"):
        lapack.geqrt(4, Z)  # C-ordered
    F = np.array(Z, order="F")
    F.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        lapack.geqrt(4, F)
    with pytest.raises(ValueError, match="float32/float64"):
        lapack.geqrt(4, np.array(Z.astype(np.complex128), order="F"))


def test_worker_threads_get_the_serial_bits():
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(2)
    Zs = [rng.standard_normal((400, 300)) for _ in range(4)]
    serial = [lapack.geqrt(64, np.array(Z, order="F"))[0] for Z in Zs]
    with ThreadPoolExecutor(2) as ex:
        threaded = list(ex.map(lambda Z: lapack.geqrt(64, np.array(Z, order="F"))[0], Zs))
    assert all(np.array_equal(a, b) for a, b in zip(serial, threaded))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_lower_inverse_in_place_is_scipys_trtri_and_the_inverse(dtype):
    rng = np.random.default_rng(7)
    L = np.tril(rng.standard_normal((40, 40))) + 8 * np.eye(40)
    L = L.astype(dtype)
    ref, info_ref = scipy_lapack.get_lapack_funcs("trtri", (L,))(L.T, lower=0)  # (L^T)^-1 = (L^-1)^T
    out = L.copy()
    assert lapack.lower_inverse_in_place(out) == info_ref == 0
    assert np.array_equal(out, ref.T)
    tol = 1e-12 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(out @ L.astype(np.float64), np.eye(40), atol=tol)
    assert np.array_equal(np.triu(out, 1), np.zeros((40, 40)))  # the strict upper triangle stays as it was
    singular = L.copy()
    singular[3, 3] = 0
    assert lapack.lower_inverse_in_place(singular) == 4
    with pytest.raises(ValueError, match="C-ordered"):
        lapack.lower_inverse_in_place(np.asfortranarray(L))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("D,n,d", [(50, 3, 7), (30, 4, 16), (200, 2, 64)])
def test_trmm_heads_multiplies_each_head_in_place_by_the_transposed_triangle(dtype, D, n, d):
    """X_h <- X_h L_h^T for the heads of a stacked matrix, L_h's strict upper triangle never read: against
    a float64 product of contiguous copies with the triangle made explicit, and bit for bit against numpy's
    GEMM with the explicit triangle (what orthonormal_bases' Cholesky route computed before)."""
    rng = np.random.default_rng(D + n + d)
    S = rng.standard_normal((D, n * d)).astype(dtype)
    L = rng.standard_normal((n, d, d)).astype(dtype)  # upper triangle: garbage trmm must not read
    Lt = np.tril(L)
    heads = [S[:, h * d:(h + 1) * d].astype(np.float64) for h in range(n)]
    want = np.concatenate([x @ lt.astype(np.float64).T for x, lt in zip(heads, Lt)], axis=1)
    gemm = np.matmul(S.reshape(D, n, d).swapaxes(0, 1), np.swapaxes(Lt, -1, -2))
    out = lapack.trmm_heads(S, L)
    assert out is S
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(S, want, rtol=tol, atol=tol * np.abs(want).max())
    assert np.array_equal(S.reshape(D, n, d).swapaxes(0, 1), gemm)
    with pytest.raises(ValueError, match="C-ordered"):
        lapack.trmm_heads(np.asfortranarray(S), L)
    with pytest.raises(ValueError, match="C-ordered"):
        lapack.trmm_heads(S, L[:, :, :-1])
