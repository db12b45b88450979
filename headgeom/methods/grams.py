"""The Grams of one layer's OV circuits, kept factored (docs/methods.md §1.1).

``LayerGrams`` plays the part TransformerLens' ``FactoredMatrix`` plays for ``model.OV``: the
d_model x d_model operators T_h = O_h V_g^T are never formed; everything the closure and the
paper-1 suite need comes from d_head x d_head Grams

    A_h = O_h^T O_h (per head),  B_g = V_g^T V_g (per KV group),  M_hg = V_g^T O_h,
    C_gg' = V_g^T V_g' (per pair of groups),

computed once per layer, each by one BLAS product, and cached with what is derived from them
(eigenvalues of A and B, ranks, condition numbers). ``headgeom.methods.closure.closure_layer``
and the paper-1 suite (headgeom.methods.paper1) share one object, so every value of a
layer comes from the same bits.

Cost: the closure needs A (H Grams), B (G), and M for the own and the cyclic wrong group (2H):
``M_pair`` computes both with one product per KV group, [V_g V_g+1]^T [O_h ...] over the group's
heads' columns of the stacked W_O (D, H d) (LayerFactors keeps W_O so: its heads are views of it).
The paper-1 suite needs M for every (head, group) and C (``M_full``, ``C``): one product
[V_1 ... V_G]^T W_O for the whole layer. One wide product instead of one per head runs near the
GEMM peak (docs/performance.md). Which product computes a block does not change its bits with the
BLAS this project pins (each entry is the same dot product over d_model); tests check that the
two routes agree."""

from __future__ import annotations

from functools import cached_property

import numpy as np

from headgeom.core.backend import NUMPY
from headgeom.core.factors import stacked_columns
from headgeom.methods.linalg import mT


def head_grams(O: np.ndarray, V: np.ndarray):
    """One head's Grams without a layer: A = O^T O, B = V^T V, M = V^T O for O, V of shape
    (..., d_model, d_head)."""
    return mT(O) @ O, mT(V) @ V, mT(V) @ O


def wrong_v_groups(kv_group: np.ndarray, n_kv: int) -> np.ndarray | None:
    """Cyclic wrong-V control: O_h pairs with V_{(g(h)+1) mod G} (MHA: g(h)=h, so V_{h+1}).
    None when G = 1 (undefined: NaN + flag)."""
    if n_kv < 2:
        return None
    return (np.asarray(kv_group) + 1) % n_kv


def _group_slices(kv_group: np.ndarray, G: int):
    """Per KV group, the heads in it: a slice when they are contiguous (GQA/MQA/MHA as
    adapters lay them out), else an index array."""
    out = []
    for g in range(G):
        hs = np.flatnonzero(kv_group == g)
        if hs.size and hs[-1] - hs[0] + 1 == hs.size:
            out.append(slice(int(hs[0]), int(hs[-1]) + 1))
        else:
            out.append(hs)
    return out


def _heads_blocks(R: np.ndarray, d: int) -> np.ndarray:
    """(r, n d) product with n heads' columns -> (n, r, d): head j's block R[:, j d:(j + 1) d] (a view)."""
    r, m = R.shape
    return R.reshape(r, m // d, d).swapaxes(0, 1)


class LayerGrams:
    """Grams of one layer (``f``: headgeom.core.factors.LayerFactors), computed on first use.

    Attributes: O (H, D, d) = W_O; W_V (G, d, D) (V_g = W_V[g]^T); A (H, d, d); B (G, d, d);
    M_own, M_wrong (H, d, d) = V_g(h)^T O_h, V_wrong(h)^T O_h; M_full (H, G, d, d); C (G, G, d, d);
    eig_A (H, d), eig_B (G, d) (ascending; non-finite Grams read as zero); rank_O (H,), rank_V (G,)
    (-1 where the Gram is not finite)."""

    def __init__(self, f, rank_rtol: float = 1e-6, backend=NUMPY):
        self.bk = backend  # headgeom.core.backend: where the products run
        self.O = f.W_O
        self.W_V = f.W_V
        self.H, self.D, self.d = self.O.shape
        self.G = self.W_V.shape[0]
        self.kv_group = np.asarray(f.kv_group)
        self.rank_rtol = rank_rtol
        self.wrong_group = wrong_v_groups(self.kv_group, self.G)

    # ------------------------------------------------------------ products

    @cached_property
    def A(self):
        return self.bk.matmul(mT(self.O), self.O)

    @cached_property
    def B(self):
        return self.bk.matmul(self.W_V, mT(self.W_V))

    @cached_property
    def _M_pair(self):
        """(M_own, M_wrong): one product per KV group, [V_g V_g+1]^T O_h for its heads (from
        M_full instead when that is already computed: the same bits, no second product)."""
        if "M_full" in self.__dict__:
            h = np.arange(self.H)
            own = self.M_full[h, self.kv_group]
            return own, (None if self.wrong_group is None else self.M_full[h, self.wrong_group])
        H, d, G = self.H, self.d, self.G
        own = np.empty((H, d, d))
        wrong = None if self.wrong_group is None else np.empty((H, d, d))
        for g, hs in enumerate(_group_slices(self.kv_group, G)):
            Wg = self.W_V[g] if wrong is None else np.concatenate([self.W_V[g], self.W_V[(g + 1) % G]])
            R = _heads_blocks(self.bk.matmul(Wg, self._O_cols(hs)), d)  # (n, d or 2d, d)
            own[hs] = R[:, :d]
            if wrong is not None:
                wrong[hs] = R[:, d:]
        return own, wrong

    @cached_property
    def _O_stacked(self):
        return stacked_columns(self.O)  # LayerFactors' W_O_stacked itself (no copy)

    def _O_cols(self, hs):
        """The stacked W_O's columns of heads ``hs`` (a slice: a view; an index array: a copy)."""
        S, d = self._O_stacked, self.d
        if isinstance(hs, slice):
            return S[:, hs.start * d:hs.stop * d]
        return S[:, (np.asarray(hs)[:, None] * d + np.arange(d)).ravel()]

    @property
    def M_own(self):
        return self._M_pair[0]

    @property
    def M_wrong(self):
        return self._M_pair[1]

    @cached_property
    def _W_all(self):
        return np.ascontiguousarray(self.W_V.reshape(self.G * self.d, self.D))  # rows: V_1^T ... V_G^T

    @cached_property
    def M_full(self):
        """M_full[h, g] = V_g^T O_h for every head and group."""
        if "_M_pair" in self.__dict__:  # keep one set of bits per block
            del self.__dict__["_M_pair"]
        return _heads_blocks(self.bk.matmul(self._W_all, self._O_stacked), self.d).reshape(self.H, self.G, self.d, self.d)

    @property
    def Vg(self):
        """V_g (G, D, d): the value factors as d_model x d_head matrices."""
        return mT(self.W_V)

    @cached_property
    def C(self):
        """C[g, g'] = V_g^T V_g'."""
        G, d = self.G, self.d
        return self.bk.matmul(self._W_all, self._W_all.T).reshape(G, d, G, d).transpose(0, 2, 1, 3)

    # ------------------------------------------------------------ spectra and ranks

    @cached_property
    def finite_A(self):
        return np.isfinite(self.A).all((-1, -2))

    @cached_property
    def finite_B(self):
        return np.isfinite(self.B).all((-1, -2))

    @cached_property
    def eig_A(self):
        return np.linalg.eigvalsh(np.where(self.finite_A[:, None, None], self.A, 0.0))

    @cached_property
    def eig_B(self):
        return np.linalg.eigvalsh(np.where(self.finite_B[:, None, None], self.B, 0.0))

    @staticmethod
    def _rank(ev, rtol):
        s = np.sqrt(np.clip(ev, 0, None))
        return np.sum(s > rtol * s[..., -1:], axis=-1)

    @cached_property
    def rank_O(self):
        return np.where(self.finite_A, self._rank(self.eig_A, self.rank_rtol), -1)

    @cached_property
    def rank_V(self):
        return np.where(self.finite_B, self._rank(self.eig_B, self.rank_rtol), -1)

    def cond(self, heads, groups):
        """cond(O_h) cond(V_g) from the cached spectra (singular values are sqrt of Gram eigenvalues)."""
        a, b = self.eig_A[heads], self.eig_B[groups]
        return np.sqrt(a[:, -1] / a[:, 0]) * np.sqrt(b[:, -1] / b[:, 0])

    def flops(self, which=("A", "B", "M_pair")) -> dict:
        """FLOPs (2 per multiply-add) of the products: what a stage cannot avoid. A, B and C are
        symmetric: a Gram X^T X needs D d (d + 1) (its upper triangle; numpy's matmul runs X.T @ X
        as a syrk), not the 2 D d^2 of a general product."""
        D, d, H, G = self.D, self.d, self.H, self.G
        per = {"A": D * d * (d + 1) * H, "B": D * d * (d + 1) * G,
               "M_pair": 2 * D * d * d * H * (1 if self.wrong_group is None else 2),
               "M_full": 2 * D * d * d * H * G, "C": D * (G * d) * (G * d + 1)}
        return {k: per[k] for k in which}
