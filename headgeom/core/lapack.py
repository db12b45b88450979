"""The LAPACK and BLAS routines of a null draw: the rotation null's Householder QR (``xGEQRT``,
``xGEMQRT``), the bases' triangular inverse and products (``xTRTRI``, ``xTRMM``) and the Cholesky
factorization that certifies a bound on an eigenvalue (``xPOTRF``), called
without holding Python's GIL, so that a job's worker threads draw layers side by side.

scipy's own wrappers (``scipy.linalg.lapack.dgeqrt``) hold the GIL for the whole call: two threads
drawing two layers then take as long as one thread drawing both. These call the same LAPACK
functions (scipy's, through ``scipy.linalg.cython_lapack``'s and ``cython_blas``' exported pointers)
by ctypes, which releases the GIL for the call: the same routine on the same arrays, so the same
bits as scipy's wrappers (tests/unit/core/test_lapack.py). Arrays are Fortran-ordered, as LAPACK
reads them; ``trmm_heads`` passes BLAS a leading dimension, so it works on the heads of a stacked
matrix in place, where scipy's wrapper would copy each one in and out."""

from __future__ import annotations

import ctypes
import functools

import numpy as np

_INT = ctypes.POINTER(ctypes.c_int)
_PTR = ctypes.c_void_p
_CHAR = ctypes.c_char_p
_SIGNATURES = {  # cython_lapack's C signatures (every argument by pointer, as in Fortran)
    "geqrt": (_INT, _INT, _INT, _PTR, _INT, _PTR, _INT, _PTR, _INT),  # m n nb a lda t ldt work info
    # side trans m n k nb v ldv t ldt c ldc work info
    "gemqrt": (_CHAR, _CHAR, _INT, _INT, _INT, _INT, _PTR, _INT, _PTR, _INT, _PTR, _INT, _PTR, _INT),
    "trtri": (_CHAR, _CHAR, _INT, _PTR, _INT, _INT),  # uplo diag n a lda info
    "potrf": (_CHAR, _INT, _PTR, _INT, _INT),  # uplo n a lda info
    "trmm": (_CHAR, _CHAR, _CHAR, _CHAR, _INT, _INT, _PTR, _PTR, _INT, _PTR, _INT),  # side uplo transa diag m n alpha a lda b ldb
}
_BLAS = ("trmm",)  # from cython_blas; the others from cython_lapack
_PREFIX = {np.dtype(np.float64): "d", np.dtype(np.float32): "s"}


@functools.lru_cache(maxsize=None)
def _routine(name: str, dtype: np.dtype):
    import scipy.linalg.cython_blas as cython_blas
    import scipy.linalg.cython_lapack as cython_lapack

    capsule = (cython_blas if name in _BLAS else cython_lapack).__pyx_capi__[_PREFIX[np.dtype(dtype)] + name]
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return ctypes.CFUNCTYPE(None, *_SIGNATURES[name])(get_pointer(capsule, get_name(capsule)))


def _int(v: int):
    return ctypes.byref(ctypes.c_int(int(v)))


def _fortran(a: np.ndarray, what: str) -> None:
    if a.dtype not in _PREFIX or not a.flags.f_contiguous or not a.flags.writeable:
        raise ValueError(f"LAPACK {what}: needs a writeable Fortran-ordered float32/float64 array, "
                         f"got {a.dtype} (F-contiguous: {a.flags.f_contiguous})")


def geqrt(nb: int, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Blocked Householder QR of ``a`` (m x n, overwritten: R above the diagonal, the reflectors
    below) in compact WY form: (a, T (nb x min(m, n)), info), as scipy.linalg.lapack's geqrt."""
    _fortran(a, "geqrt")
    m, n = a.shape
    k = min(m, n)
    T = np.zeros((nb, k), dtype=a.dtype, order="F")
    work = np.empty(nb * n, dtype=a.dtype)
    info = ctypes.c_int(0)
    _routine("geqrt", a.dtype)(_int(m), _int(n), _int(nb), a.ctypes.data, _int(max(1, m)), T.ctypes.data,
                               _int(nb), work.ctypes.data, ctypes.byref(info))
    return a, T, info.value


def gemqrt(v: np.ndarray, t: np.ndarray, c: np.ndarray, side: str = "L", trans: str = "N") -> tuple[np.ndarray, int]:
    """``c`` (overwritten) multiplied by Q (``trans`` "T": Q^T) from the left (``side`` "L") or
    right, Q given by geqrt's reflectors ``v`` and ``t``: (c, info), as scipy.linalg.lapack's gemqrt."""
    _fortran(c, "gemqrt")
    if v.dtype != c.dtype or t.dtype != c.dtype or not (v.flags.f_contiguous and t.flags.f_contiguous):
        raise ValueError("LAPACK gemqrt: v, t and c must share a dtype, v and t Fortran-ordered")
    m, n = c.shape
    nb, k = t.shape
    work = np.empty(nb * (n if side == "L" else m), dtype=c.dtype)
    info = ctypes.c_int(0)
    _routine("gemqrt", c.dtype)(side.encode(), trans.encode(), _int(m), _int(n), _int(k), _int(nb), v.ctypes.data,
                                _int(max(1, v.shape[0])), t.ctypes.data, _int(nb), c.ctypes.data, _int(max(1, m)),
                                work.ctypes.data, ctypes.byref(info))
    return c, info.value


def lower_inverse_in_place(L: np.ndarray) -> int:
    """The inverse of the lower-triangular C-ordered (d, d) ``L``, written over it (its strict upper
    triangle is left as it is); LAPACK's info (k > 0: L[k-1, k-1] is zero, ``L`` then partly overwritten).
    L's bytes read in Fortran order are L^T, upper triangular, and (L^T)^-1 = (L^-1)^T: LAPACK inverts
    that in place, as scipy's ``trtri(L.T, lower=0)`` does on its copy."""
    if L.dtype not in _PREFIX or L.ndim != 2 or L.shape[0] != L.shape[1] or not L.flags.c_contiguous \
            or not L.flags.writeable:
        raise ValueError(f"LAPACK trtri: needs a writeable C-ordered square float32/float64 matrix, got {L.dtype} "
                         f"{L.shape}")
    d = L.shape[0]
    info = ctypes.c_int(0)
    _routine("trtri", L.dtype)(b"U", b"N", _int(d), L.ctypes.data, _int(max(1, d)), ctypes.byref(info))
    return info.value


def trmm_heads(S: np.ndarray, Linv: np.ndarray) -> np.ndarray:
    """X_h <- X_h Linv_h^T in place for each head X_h = S[:, h d:(h + 1) d] of the stacked C-ordered
    (D, n d) matrix ``S``, Linv (n, d, d) lower triangular (C-ordered; its strict upper triangle is not
    read): one BLAS trmm per head, half a GEMM's multiplications, on the head where it lies (S read in
    Fortran order is S^T, whose rows h d .. (h + 1) d are X_h^T with leading dimension n d, and
    X_h Linv^T = (Linv X_h^T)^T). Returns ``S``."""
    n, d, _ = Linv.shape
    D, m = S.shape
    if S.dtype not in _PREFIX or Linv.dtype != S.dtype or m != n * d or Linv.shape[2] != d \
            or not (S.flags.c_contiguous and S.flags.writeable and Linv.flags.c_contiguous):
        raise ValueError(f"BLAS trmm: needs a writeable C-ordered (D, n d) matrix and C-ordered (n, d, d) "
                         f"triangles of its dtype, got {S.dtype} {S.shape} and {Linv.dtype} {Linv.shape}")
    one = (ctypes.c_double if S.dtype == np.float64 else ctypes.c_float)(1.0)
    trmm = _routine("trmm", S.dtype)
    step = d * S.itemsize
    for h in range(n):
        # A = Linv_h read in Fortran order is Linv_h^T (upper); op(A) = A^T = Linv_h
        trmm(b"L", b"U", b"T", b"N", _int(d), _int(D), ctypes.byref(one), Linv[h].ctypes.data, _int(max(1, d)),
             S.ctypes.data + h * step, _int(max(1, m)))
    return S


def shifted_positive_definite(G: np.ndarray, mu: float, which) -> np.ndarray:
    """For each i of ``which``: whether mu I - G[i] is numerically positive definite, i.e. LAPACK's Cholesky
    factorization (potrf) of it runs to the end (a bool each). G (n, d, d): symmetric matrices, left as they
    are (each shifted copy is made in one d x d scratch matrix, so no (n, d, d) array is allocated). Success
    means L L^T = mu I - G[i] + E with |E| at most about (d + 1) eps |L| |L^T| (Demmel's backward error), so
    G[i]'s largest eigenvalue is below mu + d (d + 1) eps (|mu| + ||G[i]||_2)."""
    if G.dtype not in _PREFIX or G.ndim != 3 or G.shape[1] != G.shape[2]:
        raise ValueError(f"LAPACK potrf: needs (n, d, d) symmetric float32/float64 matrices, got {G.dtype} {G.shape}")
    d = G.shape[-1]
    potrf = _routine("potrf", G.dtype)
    scratch = np.empty((d, d), dtype=G.dtype)
    diagonal = scratch.reshape(-1)[:: d + 1]  # a view of the scratch matrix's diagonal
    which = np.asarray(which, dtype=np.int64).reshape(-1)
    out = np.empty(which.size, dtype=bool)
    info = ctypes.c_int(0)
    for k, i in enumerate(which):
        np.negative(G[i], out=scratch)
        diagonal += mu
        # a symmetric matrix is its own transpose: either triangle, either order
        potrf(b"U", _int(d), scratch.ctypes.data, _int(max(1, d)), ctypes.byref(info))
        out[k] = info.value == 0
    return out
