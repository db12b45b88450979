"""The two LAPACK routines of the rotation null's Householder QR (``xGEQRT``, ``xGEMQRT``), called
without holding Python's GIL, so that a job's worker threads draw layers side by side.

scipy's own wrappers (``scipy.linalg.lapack.dgeqrt``) hold the GIL for the whole call: two threads
drawing two layers then take as long as one thread drawing both. These call the same LAPACK
functions (scipy's, through ``scipy.linalg.cython_lapack``'s exported pointers) by ctypes, which
releases the GIL for the call: the same routine on the same arrays, so the same bits as scipy's
wrappers (tests/unit/core/test_lapack.py). Arrays are Fortran-ordered, as LAPACK reads them."""

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
}
_PREFIX = {np.dtype(np.float64): "d", np.dtype(np.float32): "s"}


@functools.lru_cache(maxsize=None)
def _routine(name: str, dtype: np.dtype):
    import scipy.linalg.cython_lapack as cython_lapack

    capsule = cython_lapack.__pyx_capi__[_PREFIX[np.dtype(dtype)] + name]
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
