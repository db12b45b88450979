"""§2 null models for reading and writing spaces (the PK paper), as data: ``NULL_MODELS`` maps
a name (what ``pk.nulls.types`` lists) to its sampler ``sampler(S, rng) -> S'``.

* ``rotation``, spectrum-preserving rotation: S = U Σ V^T -> U Σ Q^T with Q Haar on the
  Stiefel manifold (all singular values and the left singular vectors kept, columns changed);
* ``reassign``, column reassignment: permute the columns of S before splitting it into heads.
S is the stacked layer matrix (D x n d): W_O^l for writing spaces, the stacked folded reading
matrix for reading spaces. Every draw comes from a seed derived from its names.

The null jobs draw every configured type; the reports loop over the configured types. Adding a
null model is one sampler function + one ``NullModel`` entry (docs/recipes.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from headgeom.methods.overlap import heads_of as unstack  # (D, n d) layer matrix -> (n, D, d) heads (a view)
from headgeom.methods.overlap import stacked as stack  # (n, D, d) per-head factors -> (D, n d) layer matrix


def haar_stiefel(m: int, r: int, rng: np.random.Generator, dtype=np.float64) -> np.ndarray:
    """m x r matrix with orthonormal columns, Haar distributed (QR of a Gaussian with the
    sign of R's diagonal fixed, Mezzadri 2007). The Gaussian is always drawn in float64 (the
    same stream whatever ``dtype``); the QR runs in ``dtype`` (float32 null mode).

    The rotation null does not form this matrix (``rotate_spectrum`` applies the same Q to S
    from its Householder reflectors); this is the explicit reference it is tested against."""
    Z = rng.standard_normal((m, r)).astype(dtype, copy=False)
    Q, R = np.linalg.qr(Z)
    return Q * np.sign(np.where(np.diag(R) == 0, 1.0, np.diag(R))).astype(dtype, copy=False)


def rotate_spectrum(S: np.ndarray, rng: np.random.Generator, backend=None, L: np.ndarray | None = None) -> np.ndarray:
    """U Σ V^T -> U Σ Q^T, Q Haar on the Stiefel manifold, computed as S O with O Haar
    (m x m): S O = U Σ (O^T V)^T and O^T V is Haar whatever V is. No SVD needed.

    Wide S (m > D): S = L Q_S (LQ), and Q_S O is a Haar D-frame in R^m, so S O has the law of
    L Y^T with Y Haar on the m x D Stiefel manifold: the same distribution for less work.
    ``L``: that factor (``rotation_prep``), computed once by a caller that draws many samples of
    the same S (the same bits as computing it here).

    O (resp. Y) is ``haar_stiefel``'s matrix for the same draw, the sign-fixed Q factor of the
    Gaussian Z; the backend (headgeom.core.backend) applies it without forming it: on numpy a
    blocked Householder QR of Z (LAPACK dgeqrt, compact WY) and the reflectors applied to S by
    dgemqrt, GEMM-rich, where forming Q (dorgqr) and multiplying cost twice the LAPACK work.
    The product equals S @ haar_stiefel(...) to rounding (tests: 1e-12 relative and below)."""
    from headgeom.core.backend import NUMPY

    bk = NUMPY if backend is None else backend
    D, m = S.shape
    if m <= D:
        return bk.haar_apply(S, rng.standard_normal((m, m)).astype(S.dtype, copy=False))
    L = lq_factor(S) if L is None else L
    return bk.haar_apply(L, rng.standard_normal((m, D)).astype(S.dtype, copy=False), transpose=True)


def lq_factor(S: np.ndarray) -> np.ndarray:
    """L of S = L Q (D x D lower triangular, S wide: D x m, m > D), from the QR of S^T."""
    return np.linalg.qr(S.T, mode="r").T  # S^T = Q R  ->  S = R^T Q^T


def rotation_prep(S: np.ndarray) -> dict:
    """What every rotation draw of one S shares: the LQ factor of a wide S (none otherwise)."""
    return {"L": lq_factor(S)} if S.shape[1] > S.shape[0] else {}


def reassign_columns(S: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The layer matrix's columns in a random order (the columns dealt to the heads anew).
    np.take gathers into a C-ordered copy about 4x faster than S[:, perm] (which numpy
    builds F-ordered); the same values."""
    return np.take(S, rng.permutation(S.shape[1]), axis=1)


@dataclass(frozen=True)
class NullModel:
    name: str
    # sampler(S, rng) -> one draw of the stacked layer matrix, same shape, as a new array: S is the job's
    # stacked matrix, shared by all its draws (pk.stacked_heads), so a sampler never writes into it
    sampler: Callable
    label: str  # how tables and figures name it ("rotation", "reassignment")
    uses_backend: bool = False  # sampler(S, rng, backend=...) runs its products on the job's backend
    # what a draw keeps, for the PK comparisons made against one kind of null: keeps_columns (each
    # column of S, dealt to the heads anew) -> the minimum-angle comparisons (PK Table 6, Figure 8);
    # keeps_spectrum (the singular values of S) -> the SD / null-mean ratio of PK Table 8
    keeps_columns: bool = False
    keeps_spectrum: bool = False
    # prepare(S) -> keyword arguments of the sampler that depend on S alone: computed once for the
    # draws of one S (null_factors' ``prepared``), they give every draw the same bits as without
    prepare: Callable | None = None


NULL_MODELS = {
    n.name: n
    for n in (
        NullModel("rotation", rotate_spectrum, "rotation", uses_backend=True, keeps_spectrum=True,
                  prepare=rotation_prep),
        NullModel("reassign", reassign_columns, "reassignment", keeps_columns=True),
    )
}


def register_null(model: NullModel) -> NullModel:
    """Add a null model (the pipeline's own are the entries above; tests add toy ones). Its sampler
    returns a new array and leaves S as it is (every draw of a job gets the same S)."""
    if model.name in NULL_MODELS:
        raise ValueError(f"null model {model.name!r} is already registered")
    NULL_MODELS[model.name] = model
    return model


def null_model(name: str) -> NullModel:
    try:
        return NULL_MODELS[name]
    except KeyError:
        raise ValueError(f"unknown null {name!r}; known: {tuple(NULL_MODELS)}") from None


PRECISIONS = {"float64": np.float64, "float32": np.float32}


def null_factors(X: np.ndarray, null: str, rng: np.random.Generator, precision: str = "float64",
                 backend=None, prepared: dict | None = None, key=None) -> np.ndarray:
    """One null draw of per-head factors (n, D, d), in ``precision`` (``pk.nulls.precision``:
    float32 draws, bases and products; the statistics are accumulated in float64 by pk).
    ``backend`` (headgeom.core.backend) is passed to samplers that take one (``uses_backend``).
    ``prepared``: a dict in which the null's ``prepare`` of this X is kept under (null, precision,
    ``key``), ``key`` naming X (the job's kind and layer): a job drawing many samples of one X
    computes it once."""
    try:
        dtype = PRECISIONS[precision]
    except KeyError:
        raise ValueError(f"unknown null precision {precision!r}; known: {tuple(PRECISIONS)}") from None
    model = null_model(null)
    S = stack(X).astype(dtype, copy=False)  # no copy when X is unstack(S) (the null jobs stack once)
    kw = {}
    if model.prepare is not None and prepared is not None:
        k = (null, precision, key)
        kw = prepared.get(k)
        if kw is None:
            kw = prepared[k] = model.prepare(S)  # a budgeted dict may decline to keep it
    out = model.sampler(S, rng, backend=backend, **kw) if model.uses_backend else model.sampler(S, rng, **kw)
    return unstack(out, X.shape[0])  # a view: orthonormal_bases reads the heads in place


NULL_BASES_FIRST_PASS = "cholesky"  # orthonormal_bases' first pass for every null draw (docs/methods.md §2.2)


def null_spaces(X: np.ndarray, null: str, rng: np.random.Generator, precision: str = "float64", backend=None,
                prepared: dict | None = None, key=None, rank_rtol: float = 1e-6):
    """One null draw's spaces: (orthonormal bases (n, D, d), ranks) of ``null_factors``' draw, by
    orthonormal_bases with the Cholesky first pass (NULL_BASES_FIRST_PASS: the same spaces as the
    eigenvector route, another basis of each, a fraction of its d x d work), computed in the draw's own
    memory. What the null jobs and the benches draw."""
    from headgeom.core.backend import NUMPY
    from headgeom.methods.overlap import orthonormal_bases

    bk = NUMPY if backend is None else backend
    draw = null_factors(X, null, rng, precision, backend, prepared, key)
    # the draw is this call's own array (a sampler returns a new one): its bases may be computed in its memory
    return orthonormal_bases(draw, rank_rtol, bk, first_pass=NULL_BASES_FIRST_PASS,
                             overwrite_x=not np.may_share_memory(draw, X))


def per_job(nulls: dict, which: str) -> int:
    """Samples per null job of ``which`` (within / cross) under a resolved ``pk.nulls`` block: the
    cross-layer nulls' own ``cross_samples_per_job`` where set (their parts redraw every layer they
    hold for each sample, so fewer samples a job let the fan-out take larger tiles: fewer draws in
    all), else ``samples_per_job``."""
    if which == "cross" and nulls.get("cross_samples_per_job") is not None:
        return int(nulls["cross_samples_per_job"])
    return int(nulls["samples_per_job"])


def precision_of(nulls: dict, which: str) -> str:
    """Arithmetic of the null jobs of ``which`` (within / cross) under a ``pk.nulls`` block (or a null job's
    params, which carry the same keys): the cross-layer nulls' own ``cross_precision`` where set (the PK
    paper ran Qwen2.5-7B's cross-layer comparison alone in float32), else ``precision``."""
    if which == "cross" and nulls.get("cross_precision") is not None:
        return str(nulls["cross_precision"])
    return str(nulls.get("precision") or "float64")


def sample_range(n_samples: int, block: int, per_job: int) -> range:
    return range(block * per_job, min((block + 1) * per_job, n_samples))


def n_blocks(n_samples: int, per_job: int) -> int:
    return -(-n_samples // per_job)
