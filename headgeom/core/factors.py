"""Per-head factors of one attention layer (docs/methods.md §0).

Conventions (HF linear weights are (out, in)):
  W_Q[h]  d_qk x d_model   rows of the query projection for query head h
  W_K[g]  d_qk x d_model   rows of the key projection for KV group g
  W_V[g]  d_v  x d_model   rows of the value projection for KV group g
  W_O[h]  d_model x d_v    columns of the output projection for head h, kept where the checkpoint
                            stores them: W_O is the (H, D, d_v) heads of one C-ordered (D, H d_v)
                            matrix (``W_O_stacked``, o_proj.weight), a view, not a copy
  kv_group[h] = g(h)
Paper 1 factors: O_h = W_O[h], V_g = W_V[g].T (both d_model x d_v).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

NORM_TYPES = ("layernorm", "rmsnorm", "none")


@dataclass
class LayerFactors:
    W_Q: np.ndarray
    W_K: np.ndarray
    W_V: np.ndarray
    W_O: np.ndarray
    kv_group: np.ndarray
    # Effective multiplicative gain of the pre-attention norm (Gemma's 1+w already applied);
    # None when nothing is folded (post-norm models such as BERT).
    norm_gain: np.ndarray | None
    norm_type: str  # one of NORM_TYPES; "none" = nothing folded into reading spaces
    notes: dict = field(default_factory=dict)  # e.g. {"bias": [...], "qk_norm": True, "folded": "..."}

    def __post_init__(self):
        self.W_Q = np.ascontiguousarray(self.W_Q, dtype=np.float64)
        self.W_K = np.ascontiguousarray(self.W_K, dtype=np.float64)
        self.W_V = np.ascontiguousarray(self.W_V, dtype=np.float64)
        W_O = np.asarray(self.W_O)
        if W_O.ndim == 3 and W_O.shape[0]:  # the heads of one stacked matrix (W_O_stacked)
            self.W_O = heads_of(stacked_columns(W_O, np.float64), W_O.shape[0])
        else:  # no heads, or a shape validate() reports
            self.W_O = np.ascontiguousarray(W_O, dtype=np.float64)
        self.kv_group = np.asarray(self.kv_group, dtype=np.int64)
        if self.norm_gain is not None:
            self.norm_gain = np.asarray(self.norm_gain, dtype=np.float64)
        self.validate()

    @property
    def n_heads(self) -> int:
        return self.W_Q.shape[0]

    @property
    def n_kv(self) -> int:
        return self.W_K.shape[0]

    @property
    def d_model(self) -> int:
        return self.W_Q.shape[2]

    @property
    def d_head(self) -> int:
        return self.W_V.shape[1]

    @property
    def W_O_stacked(self) -> np.ndarray:
        """The layer's output projection [O_1 ... O_H] (D, H d_v), whose heads W_O is (no copy): one
        GEMM reads every head's columns at once."""
        return stacked_columns(self.W_O)

    def O(self, h: int) -> np.ndarray:
        return self.W_O[h]

    def V(self, g: int) -> np.ndarray:
        return self.W_V[g].T

    def validate(self) -> None:
        H, d_qk, D = self.W_Q.shape
        G = self.W_K.shape[0]
        problems = []
        if self.W_K.shape != (G, d_qk, D):
            problems.append(f"W_K shape {self.W_K.shape} != {(G, d_qk, D)}")
        if self.W_V.shape[0] != G or self.W_V.shape[2] != D:
            problems.append(f"W_V shape {self.W_V.shape} inconsistent with G={G}, d_model={D}")
        d_v = self.W_V.shape[1]
        if self.W_O.shape != (H, D, d_v):
            problems.append(f"W_O shape {self.W_O.shape} != {(H, D, d_v)}")
        if self.kv_group.shape != (H,) or (H and (self.kv_group.min() < 0 or self.kv_group.max() >= G)):
            problems.append(f"kv_group map {self.kv_group.tolist()} invalid for G={G}")
        if self.norm_type not in NORM_TYPES:
            problems.append(f"norm_type {self.norm_type!r} not in {NORM_TYPES}")
        if self.norm_gain is not None and self.norm_gain.shape != (D,):
            problems.append(f"norm_gain shape {self.norm_gain.shape} != ({D},)")
        if problems:
            raise ValueError("invalid LayerFactors: " + "; ".join(problems))

    def nonfinite(self) -> list[str]:
        """Names of factor arrays holding NaN or Inf (the run flags, never crashes)."""
        out = []
        for name in ("W_Q", "W_K", "W_V", "W_O", "norm_gain"):
            arr = getattr(self, name)
            if arr is not None and not np.all(np.isfinite(arr)):
                out.append(name)
        return out


def gqa_map(n_heads: int, n_kv: int) -> np.ndarray:
    """HF/llama.cpp convention: consecutive query heads share a KV group."""
    if n_kv <= 0 or n_heads % n_kv:
        raise ValueError(f"n_heads={n_heads} is not a multiple of n_kv_heads={n_kv}")
    return np.arange(n_heads) // (n_heads // n_kv)


def split_rows(W: np.ndarray, n: int) -> np.ndarray:
    """(n*d, D) projection -> (n, d, D) per-head row blocks."""
    rows, D = W.shape
    if rows % n:
        raise ValueError(f"{rows} rows do not split into {n} heads")
    return np.ascontiguousarray(W.reshape(n, rows // n, D))


def split_cols(W: np.ndarray, n: int) -> np.ndarray:
    """(D, n*d) output projection -> (n, D, d) per-head column blocks (``heads_of``: a view of W)."""
    D, cols = W.shape
    if cols % n:
        raise ValueError(f"{cols} columns do not split into {n} heads")
    return heads_of(W, n)


def heads_of(S: np.ndarray, n: int) -> np.ndarray:
    """(D, n d) stacked matrix -> its n heads as an (n, D, d) view (no copy; ``stacked_columns`` of
    the view is S again). Every product of a head reads it in place (BLAS takes the row stride), with
    the same bits as from a contiguous copy."""
    D, m = S.shape
    if m % n:
        raise ValueError(f"heads_of: {m} columns do not split into {n} heads")
    return S.reshape(D, n, m // n).swapaxes(0, 1)


def stacked_columns(U: np.ndarray, dtype=None) -> np.ndarray:
    """(n, D, d) per-head factors -> the C-ordered (D, n d) matrix [U_1 ... U_n] (in ``dtype``; None:
    U's): a copy, except for heads that already are ``heads_of`` such a matrix (a layer's W_O, what
    orthonormal_bases and the null draws return), whose matrix is returned as it is (read-only use: it
    shares their memory). A caller that pairs one set of heads with many others stacks it once and
    passes it to cross_blocks / cross_pairs (``Sa``, ``Sw``, ``SXw``)."""
    n, D, d = U.shape
    return np.ascontiguousarray(np.swapaxes(U, 0, 1).reshape(D, n * d), dtype=dtype)
