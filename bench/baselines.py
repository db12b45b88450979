"""Pieces of ``make bench`` (bench/run.py): the baselines headgeom is compared against, FLOP
counts, interleaved timing for a shared, noisy machine, and the thread settings in effect.

Every speed figure the bench reports is a ratio of two timings taken in the same process,
interleaved round-robin (so both sides see the same load), each side's best of its repeats.
All math is float64.

Baselines for the closure stage (docs/methods.md §1, per head: P, alpha*, g_T with the head's own V
and P with the cyclic wrong-V):

* ``naive_closure``: materializes the d_model x d_model operators T = O V^T and T^2 = T T
  and takes Frobenius inner products of them;
* ``FactoredMatrix``: a numpy port of TransformerLens ``FactoredMatrix`` (A @ B kept as its
  (d_model x d_head)(d_head x d_model) factors; ``svd`` from the SVDs of both factors and of
  the d_head x d_head middle; ``norm`` = sqrt of the sum of squared singular values; products
  of factored matrices by its ``__matmul__`` rules), used the way a TransformerLens user
  would (``factored_closure``): ||T|| = T.norm(), ||T^2|| = (T @ T).norm(),
  <T^2, T> = tr(((T @ T).T @ T).BA), batched over heads (leading dims) like ``model.OV``.
"""

from __future__ import annotations

import ctypes
import glob
import os
import platform
import time
from functools import cached_property
from pathlib import Path
from typing import Callable

import numpy as np

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "GOTO_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")

# Layer shapes (d_model, d_head, query heads, KV heads, layers)
QWEN3_235B = dict(d_model=4096, d_head=128, n_heads=64, n_kv=4, n_layers=94)
QWEN25_7B = dict(d_model=3584, d_head=128, n_heads=28, n_kv=4, n_layers=28)


# ---------------------------------------------------------------- environment


def _openblas_runtime(libdir: Path, suffix: str) -> dict | None:
    """Ask the OpenBLAS that numpy / scipy loaded for its thread count and core type."""
    libs = sorted(glob.glob(str(libdir / "libscipy_openblas*.so*")))
    if not libs:
        return None
    try:
        lib = ctypes.CDLL(libs[0])  # already loaded by the import: the same handle
        out = {"library": Path(libs[0]).name}
        for name, key, restype in (("get_num_threads", "threads", ctypes.c_int),
                                   ("get_corename", "corename", ctypes.c_char_p),
                                   ("get_config", "config", ctypes.c_char_p)):
            fn = getattr(lib, f"scipy_openblas_{name}{suffix}", None)
            if fn is not None:
                fn.restype = restype
                v = fn()
                out[key] = v.decode() if isinstance(v, bytes) else v
        return out
    except OSError as e:
        return {"library": Path(libs[0]).name, "error": str(e)}


def thread_settings() -> dict:
    """Thread-related environment, CPU count and affinity, and the BLAS numpy and scipy use."""
    import scipy
    import scipy.linalg  # noqa: F401  (loads scipy's own OpenBLAS)

    cfg = np.show_config(mode="dicts")
    blas = cfg.get("Build Dependencies", {}).get("blas", {})
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        affinity = None
    np_dir = Path(np.__file__).resolve().parent.parent / "numpy.libs"
    sp_dir = Path(scipy.__file__).resolve().parent.parent / "scipy.libs"
    return {
        "env": {k: os.environ.get(k) for k in THREAD_VARS},
        "cpu_count": os.cpu_count(),
        "affinity_cpus": affinity,
        "loadavg_1m": os.getloadavg()[0],
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "numpy_blas": {k: blas.get(k) for k in ("name", "version", "openblas configuration")},
        "numpy_openblas_runtime": _openblas_runtime(np_dir, "64_"),
        "scipy_openblas_runtime": _openblas_runtime(sp_dir, ""),
        "simd": cfg.get("SIMD Extensions", {}),
        "dtype": "float64",
    }


# ---------------------------------------------------------------- timing


def interleaved(fns: dict[str, Callable[[], object]], repeat: int, warmup: bool = True,
                clock: str = "wall") -> dict[str, list[float]]:
    """Times of each function, run round-robin ``repeat`` times (after one untimed warm-up
    round when ``warmup``), so all of them see the same background load. ``clock``: "wall"
    (time.perf_counter) or "cpu" (time.process_time, this process's CPU seconds: with one BLAS
    thread, the time the work got the core, which other processes' load changes far less)."""
    if clock not in ("wall", "cpu"):
        raise ValueError(f"clock {clock!r} is not 'wall' or 'cpu'")
    now = time.perf_counter if clock == "wall" else time.process_time
    if warmup:
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t0 = now()
            fn()
            times[k].append(now() - t0)
    return times


def summary(ts: list[float]) -> dict:
    return {"best_s": float(min(ts)), "median_s": float(np.median(ts)), "n": len(ts), "all_s": [float(t) for t in ts]}


# ---------------------------------------------------------------- synthetic layers


def synthetic_layer(d_model: int, d_head: int, n_heads: int, n_kv: int, seed: int = 0, **_):
    """LayerFactors of one Llama-style layer with Gaussian weights (scale 1/sqrt(d_model))."""
    from headgeom.core.factors import LayerFactors, gqa_map

    rng = np.random.default_rng(seed)
    s = 1.0 / np.sqrt(d_model)
    return LayerFactors(
        W_Q=rng.standard_normal((n_heads, d_head, d_model)) * s,
        W_K=rng.standard_normal((n_kv, d_head, d_model)) * s,
        W_V=rng.standard_normal((n_kv, d_head, d_model)) * s,
        W_O=rng.standard_normal((n_heads, d_model, d_head)) * s,
        kv_group=gqa_map(n_heads, n_kv),
        norm_gain=1.0 + 0.1 * rng.standard_normal(d_model),
        norm_type="rmsnorm",
    )


# ---------------------------------------------------------------- closure baselines


def _from_terms(nT2, ip, nT4):
    """P, alpha*, g_T from ||T||^2, <T^2,T>, ||T^2||^2 (docs/methods.md §1)."""
    return ip**2 / (nT4 * nT2), ip / nT2, np.sqrt(nT4 / nT2)


def naive_closure(O: np.ndarray, V: np.ndarray):
    """One head, materializing T = O V^T and T^2 = T T (d_model x d_model each)."""
    T = O @ V.T
    T2 = T @ T
    t, t2 = T.ravel(), T2.ravel()
    return _from_terms(np.dot(t, t), np.dot(t2, t), np.dot(t2, t2))


def _tr(X):
    return np.swapaxes(X, -1, -2)


class FactoredMatrix:
    """numpy port of transformer_lens.FactoredMatrix (the parts the closure needs): the
    matrix A @ B kept as factors A (..., ldim, mdim) and B (..., mdim, rdim)."""

    def __init__(self, A: np.ndarray, B: np.ndarray):
        assert A.shape[-1] == B.shape[-2], (A.shape, B.shape)
        self.ldim, self.mdim, self.rdim = A.shape[-2], B.shape[-2], B.shape[-1]
        lead = np.broadcast_shapes(A.shape[:-2], B.shape[:-2])
        self.shape = lead + (self.ldim, self.rdim)
        self.A = np.broadcast_to(A, lead + (self.ldim, self.mdim))
        self.B = np.broadcast_to(B, lead + (self.mdim, self.rdim))

    def __matmul__(self, other):
        if isinstance(other, FactoredMatrix):
            return (self @ other.A) @ other.B
        assert other.shape[-2] == self.rdim
        if self.rdim > self.mdim:
            return FactoredMatrix(self.A, self.B @ other)
        return FactoredMatrix(self.AB, other)

    @property
    def AB(self):
        return self.A @ self.B

    @property
    def BA(self):
        assert self.rdim == self.ldim
        return self.B @ self.A

    @property
    def T(self):
        return FactoredMatrix(_tr(self.B), _tr(self.A))

    @cached_property
    def _svd(self):
        # torch.svd(X) returns (U, S, V) with X = U diag(S) V^T; numpy returns V^T.
        Ua, Sa, VhA = np.linalg.svd(self.A, full_matrices=False)
        Ub, Sb, VhB = np.linalg.svd(self.B, full_matrices=False)
        middle = (Sa[..., :, None] * VhA) @ Ub * Sb[..., None, :]
        Um, Sm, VhM = np.linalg.svd(middle)
        U = Ua @ Um
        Vh = _tr(VhB) @ _tr(VhM)  # TransformerLens's "Vh" is V (rdim x mdim)
        return U, Sm, Vh

    def svd(self):
        return self._svd

    @property
    def S(self):
        return self._svd[1]

    def norm(self):
        return np.sqrt((self.S**2).sum(-1))


def factored_closure(O: np.ndarray, V: np.ndarray):
    """All heads at once (leading dims), the way a TransformerLens user computes P."""
    T = FactoredMatrix(O, _tr(V))
    T2 = T @ T
    nT, nT2 = T.norm(), T2.norm()
    ip = np.trace((T2.T @ T).BA, axis1=-2, axis2=-1)  # <T^2, T>_F = tr((T^2)^T T)
    return _from_terms(nT**2, ip, nT2**2)


def gram_core(f):
    """headgeom's closure core as closure_layer runs it: the layer's LayerGrams (A per head,
    B per KV group, M for the own and the wrong group) and (P, alpha, g_T) with the own V and
    P with the cyclic wrong-V, from d_head x d_head Grams only. Returns (P, alpha, g, P_wrong, grams)."""
    from headgeom.methods.closure import closure_from_terms
    from headgeom.methods.grams import LayerGrams

    gr = LayerGrams(f)
    own, wrong = gram_core_terms(gr)
    P, alpha, g, _ = closure_from_terms(*own)
    P_wrong = closure_from_terms(*wrong)[0] if wrong is not None else None
    return P, alpha, g, P_wrong, gr


def gram_core_terms(gr):
    """The closure terms (||T||^2, <T^2,T>, ||T^2||^2) of a LayerGrams' heads with their own V and with the
    cyclic wrong V (None without a wrong group): gram_core's d^3 part, after the layer's products."""
    from headgeom.methods.closure import closure_terms

    own = closure_terms(gr.A, gr.B[gr.kv_group], gr.M_own)
    wv = gr.wrong_group
    return own, (closure_terms(gr.A, gr.B[wv], gr.M_wrong) if wv is not None else None)


def closure_flops(d_model: int, d_head: int, n_heads: int) -> dict:
    """Nominal multiply-add FLOPs per (head, V) evaluation of each method."""
    D, d = d_model, d_head
    return {
        "naive": 2 * D * D * d + 2 * D**3 + 6 * D * D,
        "gram_core": 3 * 2 * D * d * d + 4 * 2 * d**3,
    }


# ---------------------------------------------------------------- PK FLOP counts


def cross_pairs_flops(D: int, nw: int, nr: int, d: int, weighted: bool = True, angles: bool = True) -> dict:
    """Nominal FLOPs of pk.cross_pairs for nw writer and nr reader heads of width d: the
    stacked-basis GEMM (2 D (nw d)(nr d)), the PK sums, and per pair for the minimum angle
    the d x d Gram (2 d^3) plus the symmetric tridiagonal reduction of eigvalsh (4/3 d^3,
    LAPACK dsytrd's count; its eigenvalue iteration is O(d^2) and not counted). With
    ``weighted`` the same again on the raw factors for the spectral-weighted measure."""
    pairs = nw * nr
    gemm = 2 * D * (nw * d) * (nr * d)
    out = {"gemm": gemm, "pk": 2 * pairs * d * d}
    if angles:
        out["sigma_max"] = pairs * (2 * d**3 + (4 * d**3) // 3)
    if weighted:
        out["weighted_gemm"] = gemm
        out["weighted_sums"] = 2 * pairs * d * d + 2 * (nw + nr) * D * d
    out["total"] = sum(out.values())
    return out


def rho_from_angles(theta: np.ndarray, dim: int) -> float:
    """rho = sum cos^2 theta_i / min(dim) from principal angles (radians)."""
    return float(np.sum(np.cos(theta) ** 2) / dim)


def random_bases(n: int, D: int, d: int, seed: int, dtype=np.float64) -> np.ndarray:
    """n orthonormal bases of random d-dim subspaces of R^D, as heads of one stacked matrix."""
    from headgeom.methods.overlap import orthonormal_bases

    X = np.random.default_rng(seed).standard_normal((n, D, d))
    B, _ = orthonormal_bases(X)
    return B.astype(dtype, copy=False)
