"""The PK paper's read paths (§4.2, §5.4; docs/methods.md §3.3), float64.

A reader of kind X in layer l' sees N(x) = P_c x / sigma(x), sigma(x) = sqrt(mean((P_c x)^2) + eps)
(RMSNorm: P_c = I), through A_h = W_X^h diag(gamma). For a write u of head j (layer l < l') and
the residual x entering layer l' the first-order response is A J(x) u with

  J(x) u = P_c u / sigma  -  kappa * xhat (xhat^T P_c u) / sigma,   xhat = P_c x / ||P_c x||,
  kappa  = ||P_c x||^2 / (D sigma^2) = 1 - eps / sigma^2.

kappa keeps eps exactly as the model's norm does (the derivative of sqrt(mean((P_c x)^2) + eps));
``eps_exact: false`` sets kappa = 1 but keeps eps inside sigma: a hybrid, not the derivative of the
eps = 0 norm (which would also drop eps from sigma).
Linear term A P_c u / sigma, normalization term -kappa A xhat (xhat^T P_c u) / sigma, total their
sum. A reader without a pre-attention norm (post-LN BERT, whose write passes through the LayerNorms
after the residual adds; OLMo-2, whose q/k norms come after the projection) is not modelled here: its
``e_norm``, ``e_cross``, ``ratio_lin_tot``, ``rel_rms`` and ``cross_sign`` are NaN, the row's ``flags``
says why (``post_ln_read_path`` / ``no_pre_norm_read_path``), and ``e_tot`` is the linear term alone.

Writes *(choice, ``activation.read_paths.write_point``)*: ``residual`` (default) takes head j's write
as the model adds it to the residual. Where the architecture has a norm on the attention output before
the residual add (Gemma-2/3, OLMo-2) that is u_tj = gamma_post * P_c(O_j z_tj) / s_t, with s_t the
norm's per-token factor computed from the full attention output and gamma_post its gain (headgeom.io.forward:
``write_scale`` = 1 / s_t, ``write_gain``); the heads' writes then sum to the norm's output, and the
writing space is Im(diag(gamma_post) P_c O_j) (rho, ranks). ``pre_norm`` takes u_tj = O_j z_tj, the
output projection's per-head part, before that norm. Elsewhere both are O_j z_tj.

Everything per (writer j, reader h) comes from d x d matrices: with R_h = P_c diag(gamma) W_X^{hT}
(D x d, pk.reading_matrix) and M_hj = R_h^T O_j = A_h P_c O_j,
  E||lin||^2   = tr(M^T M S_j),                  S_j = mean_t z z^T / sigma^2
  E||norm||^2  = mean_t kappa^2 c_tj^2 ||a_th||^2 / sigma^2,  c_tj = xhat^T P_c O_j z_tj, a_th = R_h^T xhat
  E<lin,norm>  = -<M_hj, mean_t (kappa c_tj / sigma^2) a_th z_tj^T> = -<M_hj, R_h^T X_j> / N,
                 X_j = sum_t (kappa c_tj / sigma^2) xhat_t z_tj^T
Projected energy share tr(P_V C)/tr C, C = mean_t u u^T, u = O_j z (P_V: projector on Im R_h), as
||B_h^T O_j F_j||^2 / tr C with B_h an orthonormal basis of Im R_h and F_j F_j^T = mean_t z z^T.
The terms are computed where they vary: ``writer_terms`` once per writer layer (write factors, writing
bases, F_j, the composition's writer part), ``layer_pair_terms`` once per reader layer (norm statistics,
S_j, c_tj, X_j) and ``reader_rows`` per reader kind, each product one GEMM over the stacked heads of
both layers; ``read_path_pair`` chains the three for one (layer pair, kind).
Readers of K and V are KV groups (one space per group); Q readers are query heads.
Composition scores (Elhage et al. 2021) on unfolded weights, W_QK = W_Q^T W_K, W_OV = O W_V:
  Q: ||W_QK^T W_OV^j|| / (||W_QK|| ||W_OV^j||),  K: ||W_QK W_OV^j|| / (...),
  V: ||W_OV^h W_OV^j|| / (||W_OV^h|| ||W_OV^j||); for a K or V group reader *(choice)* the mean
  over the group's query heads (MHA: the head itself). From d x d pieces: e.g. for Q,
  ||W_QK^T W_OV^j||^2 = tr(Y^T W_K W_K^T Y W_V W_V^T) with Y = W_Q O_j.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headgeom.core.stats import finite_quantile, pearson, spearman

from .overlap import orthonormal_bases, reading_matrix, stacked

WRITE_POINTS = ("residual", "pre_norm")
#: the columns a reader without a pre-attention norm leaves undefined (NaN + flags)
NORM_COLUMNS = ("e_norm", "e_cross", "ratio_lin_tot", "rel_rms", "cross_sign")
#: what each computed column reads besides the weights, of what a choice switch can change:
#: ``acts`` (the forward pass: z, x and sigma) and ``eps_exact`` (kappa). rho and composition
#: come from the weights alone; share and e_lin from the activations but not kappa. A
#: recomputation that changes neither input of a column may take it as it is
#: (``reader_rows(given=)``; headgeom.verify.sensitivity).
COLUMN_READS = {
    "rho": (), "composition": (),
    "share": ("acts",), "e_lin": ("acts",),
    **{c: ("acts", "eps_exact") for c in ("e_norm", "e_cross", "e_tot", "ratio_lin_tot", "rel_rms", "cross_sign")},
}



# ------------------------------------------------------------------ the read-path shards' rows, grouped


def layer_pair_groups(wl: np.ndarray, rl: np.ndarray) -> list[tuple[int, int, np.ndarray]]:
    """(writer layer, reader layer, row indices) per layer pair, pairs in sorted order and each
    pair's rows in their order: what a mask (wl == a) & (rl == b) per pair selects, in one stable
    sort instead of a pass over every row per pair (a read-path family can hold tens of millions
    of rows)."""
    wl, rl = np.asarray(wl, np.int64), np.asarray(rl, np.int64)
    if not wl.size:
        return []
    key = (wl - wl.min()) * (int(rl.max() - rl.min()) + 1) + (rl - rl.min())
    order = np.argsort(key, kind="stable")
    cuts = np.flatnonzero(np.diff(key[order])) + 1
    return [(int(wl[g[0]]), int(rl[g[0]]), g) for g in np.split(order, cuts)]


def model_kind_rows(rp: dict, models, kinds=("Q", "K", "V")):
    """(model, kind, boolean row mask) per model and reading kind of the read-path columns,
    comparing the model column once per model."""
    for m in models:
        in_model = rp["model"] == m
        sub = np.flatnonzero(in_model)
        kind_sub = rp["kind"][sub]
        for kind in kinds:
            s = np.zeros(in_model.shape, bool)
            s[sub[kind_sub == kind]] = True
            yield m, kind, s


# ------------------------------------------------------------------ the read paths' statistics (§5.4, Figures 4-5)


def layer_pair_spearman(share, rho, writer_layer, reader_layer) -> np.ndarray:
    """Spearman(share, rho) per writer -> reader layer pair, pairs in layer_pair_groups' order; NaN
    for a pair with fewer than 3 finite points or a constant side (headgeom.core.stats.spearman)."""
    return np.array([spearman(share[t], rho[t]) for _, _, t in layer_pair_groups(writer_layer, reader_layer)])


def positive_share_ratio(share, rho) -> np.ndarray:
    """share / rho over the pairs where both are finite, keeping the finite positive ratios (what a
    log axis can show)."""
    ok = np.isfinite(rho) & np.isfinite(share)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = share[ok] / rho[ok]
    return ratio[(ratio > 0) & np.isfinite(ratio)]


def read_path_summary(rp: dict, s: np.ndarray) -> dict:
    """The §5.4 statistics of the read-path rows ``s`` (a boolean mask: one model and reading kind)
    of the read-path columns ``rp``: the linear / normalization split (quantiles of lin/tot and of
    the relative RMS error, energy ratios summed and per pair, positive cross terms), projected
    energy share against rho (Spearman, Pearson, quantiles of share/rho, Spearman per layer pair:
    median and count below 0), linear energy and composition against rho. Quantiles and medians
    over the finite values (headgeom.core.stats.finite_quantile)."""
    rho, share, lin = rp["rho"][s], rp["share"][s], rp["e_lin"][s]
    nrm, tot, cross = rp["e_norm"][s], rp["e_tot"][s], rp["e_cross"][s]
    ratio = share / rho
    lin_tot, rel_rms = rp["ratio_lin_tot"][s], rp["rel_rms"][s]
    per_pair = layer_pair_spearman(share, rho, rp["writer_layer"][s], rp["reader_layer"][s])
    return {
        "ratio_lin_tot_med": finite_quantile(lin_tot, 0.5), "ratio_lin_tot_p05": finite_quantile(lin_tot, 0.05),
        "ratio_lin_tot_p95": finite_quantile(lin_tot, 0.95), "rel_rms_med": finite_quantile(rel_rms, 0.5),
        "norm_over_lin_total": float(nrm.sum() / lin.sum()), "norm_over_lin_med": finite_quantile(nrm / lin, 0.5),
        "tot_over_lin_total": float(tot.sum() / lin.sum()), "cross_positive": int((cross > 0).sum()),
        "share_rho_spearman": spearman(share, rho), "share_rho_pearson": pearson(share, rho),
        "share_rho_ratio_med": finite_quantile(ratio, 0.5), "share_rho_ratio_p05": finite_quantile(ratio, 0.05),
        "share_rho_ratio_p95": finite_quantile(ratio, 0.95), "lin_rho_spearman": spearman(lin, rho),
        "layer_pairs": int(len(per_pair)), "layer_pair_spearman_med": finite_quantile(per_pair, 0.5),
        "layer_pairs_negative": int((per_pair < 0).sum()),
        "composition_rho_spearman": spearman(rp["composition"][s], rho),
        "composition_rho_pearson": pearson(rp["composition"][s], rho),
    }


def write_factors(W_O: np.ndarray, z: np.ndarray, arrays: dict, meta: dict, write_point: str = "residual"):
    """(O_w (H, D, d), z_w (N, H, d)): head j's write at token t is O_w[j] @ z_w[t, j] at
    ``write_point`` (module docstring), from one layer's activation shard (arrays, meta)."""
    if write_point not in WRITE_POINTS:
        raise ValueError(f"activation.read_paths.write_point must be one of {WRITE_POINTS}, not {write_point!r}")
    O = np.asarray(W_O, np.float64)
    z = np.asarray(z, np.float64)
    if write_point == "pre_norm" or "write_scale" not in arrays:
        return O, z
    if (meta.get("write") or {}).get("norm_type") == "layernorm":
        O = O - O.mean(axis=1, keepdims=True)
    O = np.asarray(arrays["write_gain"], np.float64)[None, :, None] * O
    return O, z * np.asarray(arrays["write_scale"], np.float64)[:, None, None]


def norm_stats(x: np.ndarray, norm_type: str, eps: float | None, eps_exact: bool = True):
    """(sigma (N,), xhat (N, D), kappa (N,)) for the residual x (N, D) entering the reader layer."""
    x = np.asarray(x, np.float64)
    N, D = x.shape
    if norm_type == "none":
        return np.ones(N), np.zeros_like(x), np.zeros(N)
    xc = x - x.mean(axis=1, keepdims=True) if norm_type == "layernorm" else x
    e = float(eps or 0.0)
    ss = np.einsum("td,td->t", xc, xc, optimize=True)
    sigma = np.sqrt(ss / D + e)
    nx = np.sqrt(ss)
    xhat = xc / np.where(nx > 0, nx, 1.0)[:, None]
    kappa = ss / (D * sigma**2) if eps_exact else np.ones(N)
    return sigma, xhat, kappa


def _readers(f, kind: str):
    """(R (n, D, d) folded reading factors, unfolded W (n, d, D), reader -> query heads)."""
    W = {"Q": f.W_Q, "K": f.W_K, "V": f.W_V}[kind]
    R = reading_matrix(W, f.norm_gain, f.norm_type)
    if kind == "Q":
        heads = [[h] for h in range(f.n_heads)]
    else:
        heads = [list(np.where(f.kv_group == g)[0]) for g in range(f.n_kv)]
    return R, W, heads


def _block_sums(P: np.ndarray, m: int) -> np.ndarray:
    """(m, n) sums over the (d, d) blocks of an (n d, m d) block matrix [P_ij], transposed."""
    n, d = P.shape[0] * m // P.shape[1], P.shape[1] // m
    return P.reshape(n, d, m, d).sum(axis=(1, 3)).T


def _quad(P: np.ndarray, S: np.ndarray) -> np.ndarray:
    """(m, n): tr(P_ij S_j P_ij^T) = sum((P_ij S_j) * P_ij) over the (d, d) blocks of the (n d, m d)
    block matrix P = [P_ij] and S (m, d, d)."""
    m, d = S.shape[0], S.shape[1]
    F = P.reshape(P.shape[0], m, d).transpose(1, 0, 2)  # (m, n d, d): column block j
    return (np.matmul(F, S) * F).reshape(m, -1, d, d).sum(axis=(2, 3))


def _gram_rows(W: np.ndarray) -> np.ndarray:
    """(n, d, d) W W^T of each (d, D) head."""
    return np.matmul(W, np.swapaxes(W, -1, -2))


def _psd_sqrt(G: np.ndarray) -> np.ndarray:
    """(n, d, d) F with F F^T = G for symmetric positive semidefinite G (eigenvalues clipped at 0):
    a trace tr(X G X^T) becomes the sum of squares of X F, one product instead of two."""
    w, V = np.linalg.eigh(G)
    return V * np.sqrt(np.clip(w, 0.0, None))[..., None, :]


# ------------------------------------------------------------------ composition (weights only)


@dataclass
class _CompWriter:
    """The writer layer's part of the composition scores: stacked O_j F_j (D, Hw d) with
    F_j F_j^T = G_j = W_V W_V^T of head j's group, and ||W_OV^j|| = sqrt(tr(O_j^T O_j G_j))."""
    SOF: np.ndarray
    nOV: np.ndarray


@dataclass
class _CompReader:
    """The reader layer's part shared by its kinds: G_Q (H, d, d), G_K (n_kv, d, d), ||W_QK^h||."""
    f: object
    GQ: np.ndarray
    GK: np.ndarray
    nQK: np.ndarray


def _comp_writer(fw) -> _CompWriter:
    O = fw.W_O
    Gv = _gram_rows(fw.W_V)[fw.kv_group]
    A = np.matmul(np.swapaxes(O, -1, -2), O)
    return _CompWriter(stacked(np.matmul(O, _psd_sqrt(Gv))), np.sqrt(np.maximum(np.einsum("jab,jba->j", A, Gv), 0.0)))


def _comp_reader(fr) -> _CompReader:
    GQ, GK = _gram_rows(fr.W_Q), _gram_rows(fr.W_K)
    nQK = np.sqrt(np.maximum(np.einsum("hab,hba->h", GQ, GK[fr.kv_group]), 0.0))
    return _CompReader(fr, GQ, GK, nQK)


def _composition(cw: _CompWriter, cr: _CompReader, kind: str) -> np.ndarray:
    """(Hw, H) composition scores: num_hj = tr(Y^T L_h Y G_j) = sum((L_h Y F_j) * Y F_j) with
    Y = W_r O_j from one GEMM over every (reader weight, writer) pair; Q: W_r = W_Q^h, L = G_K;
    K: W_K^g, L = G_Q^h; V: W_V^g, L = O_h^T O_h (g: head h's group)."""
    f = cr.f
    H, d, D = f.W_Q.shape
    Hw = cw.nOV.shape[0]
    if kind == "Q":
        W, sel, L, den = f.W_Q, np.arange(H), cr.GK[f.kv_group], cr.nQK
    elif kind == "K":
        W, sel, L, den = f.W_K, f.kv_group, cr.GQ, cr.nQK
    else:
        W, sel, L = f.W_V, f.kv_group, np.matmul(np.swapaxes(f.W_O, -1, -2), f.W_O)
        den = np.sqrt(np.maximum(np.einsum("hab,hba->h", L, _gram_rows(f.W_V)[sel]), 0.0))
    YF = (W.reshape(-1, D) @ cw.SOF).reshape(-1, d, Hw * d)[sel]  # (H, d, Hw d): W_r O_j F_j per query head
    num = _block_sums((np.matmul(L, YF) * YF).reshape(H * d, Hw * d), Hw)  # (Hw, H)
    den = cw.nOV[:, None] * den[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, np.sqrt(np.maximum(num, 0.0)) / np.where(den > 0, den, 1.0), np.nan)


def composition(fw, fr, kind: str) -> np.ndarray:
    """(Hw, n query heads) composition scores on unfolded weights (module docstring)."""
    return _composition(_comp_writer(fw), _comp_reader(fr), kind)


# ------------------------------------------------------------------ read paths


@dataclass
class WriterTerms:
    """What depends on the writer layer alone (one per job): the write factors stacked SO (D, Hw d),
    the value mixes zw (N, Hw, d) and per head zj (Hw, N, d), [U_j | O_j F_j] stacked (D, 2 Hw d)
    with U_j the writing space's basis (rank rU) and F_j F_j^T = Sig_j = mean z z^T,
    tr C_j = tr(O_j^T O_j Sig_j), the composition's writer part."""
    SO: np.ndarray
    zw: np.ndarray
    zj: np.ndarray
    SUF: np.ndarray
    rU: np.ndarray
    trC: np.ndarray
    comp: _CompWriter
    rank_rtol: float


@dataclass
class LayerPairTerms:
    """What depends on the writer and the reader layer but not on the reader kind: the reader's
    xhat, S_j = mean z z^T / sigma^2, [O_j | X_j] stacked (D, 2 Hw d) with
    X_j = sum_t w_tj xhat_t z_tj^T, w_tj = kappa c_tj / sigma^2 (c_tj = xhat^T P_c O_j z_tj),
    wn = kappa^2 c^2 / sigma^2 (N, Hw), the composition's reader part."""
    wt: WriterTerms
    fr: object
    xhat: np.ndarray
    inv_s2: np.ndarray
    SOX: np.ndarray
    wn: np.ndarray
    _S: np.ndarray | None = None
    _comp: _CompReader | None = None

    @property
    def comp(self) -> _CompReader:
        """The composition's reader part (weights only), made when first asked for."""
        if self._comp is None:
            self._comp = _comp_reader(self.fr)
        return self._comp

    @property
    def S(self) -> np.ndarray:
        """(Hw, d, d) S_j = mean_t z z^T / sigma^2, made when first asked for (e_lin's only term)."""
        if self._S is None:
            zj, N = self.wt.zj, self.wt.zj.shape[1]
            self._S = np.matmul(np.swapaxes(zj * self.inv_s2[None, :, None], 1, 2), zj) / N
        return self._S


def writer_terms(fw, zw: np.ndarray, write_O: np.ndarray | None = None, rank_rtol: float = 1e-6) -> WriterTerms:
    """The writer layer's terms (fw, zw, write_O as in ``read_path_pair``)."""
    zw = np.asarray(zw, np.float64)
    N = zw.shape[0]
    O = fw.W_O if write_O is None else np.asarray(write_O, np.float64)  # (Hw, D, d)
    zj = np.ascontiguousarray(zw.transpose(1, 0, 2))  # (Hw, N, d): each head's mixes, one GEMM operand
    U, rU = orthonormal_bases(O, rank_rtol)
    Sig = np.matmul(np.swapaxes(zj, 1, 2), zj) / N
    trC = np.einsum("jab,jba->j", np.matmul(np.swapaxes(O, 1, 2), O), Sig)
    SUF = np.concatenate([stacked(U), stacked(np.matmul(O, _psd_sqrt(Sig)))], axis=1)
    return WriterTerms(stacked(O), zw, zj, SUF, rU, trC, _comp_writer(fw), rank_rtol)


def layer_pair_terms(wt: WriterTerms, fr, x: np.ndarray, eps, eps_exact: bool = True,
                     norms: tuple | None = None) -> LayerPairTerms:
    """The (writer layer, reader layer) terms (fr, x, eps as in ``read_path_pair``); ``norms``:
    norm_stats(x, ...) of the reader layer when the caller keeps them (they do not depend on the writer)."""
    Hw, N, d = wt.zj.shape
    sigma, xhat, kappa = norm_stats(x, fr.norm_type, eps, eps_exact) if norms is None else norms
    inv_s2 = 1.0 / sigma**2
    r = (xhat @ wt.SO).reshape(N, Hw, d)  # O_j^T P_c xhat (xhat already centred)
    c = np.einsum("tja,tja->tj", r, wt.zw)
    kc = kappa[:, None] * c
    w = kc * inv_s2[:, None]  # (N, Hw)
    X = xhat.T @ (wt.zw * w[:, :, None]).reshape(N, Hw * d)  # (D, Hw d), over tokens once for all kinds
    return LayerPairTerms(wt, fr, xhat, inv_s2, np.concatenate([wt.SO, X], axis=1), kc**2 * inv_s2[:, None])


@dataclass
class ReaderTerms:
    """What depends on the reader layer and kind alone (weights only): the folded reading factors
    stacked, SR (D, Hr d), their orthonormal bases B (Hr, D, d) and ranks rB, the query heads of each
    reader. A caller that meets one reader layer for several writer layers may keep them."""
    SR: np.ndarray
    B: np.ndarray
    rB: np.ndarray
    heads: list


def reader_terms(fr, kind: str, rank_rtol: float = 1e-6) -> ReaderTerms:
    R, _, heads = _readers(fr, kind)  # (Hr, D, d)
    B, rB = orthonormal_bases(R, rank_rtol)
    return ReaderTerms(stacked(R), B, rB, heads)


def reader_response_sq(xhat: np.ndarray, rt: ReaderTerms) -> np.ndarray:
    """(N, Hr) ||a_th||^2 = ||A_h xhat_t||^2 of every token and reader: what E_norm reads of the
    reader layer alone (no writer), so a caller that meets the layer for several writers may keep it."""
    N, Hr = xhat.shape[0], rt.B.shape[0]
    a = (xhat @ rt.SR).reshape(N, Hr, -1)  # R_h^T xhat = A_h xhat
    return np.einsum("tha,tha->th", a, a)


def reader_rows(pt: LayerPairTerms, kind: str, no_norm_flag: str = "no_pre_norm_read_path",
                rt: ReaderTerms | None = None, a2: np.ndarray | None = None,
                given: dict | None = None) -> dict[str, np.ndarray]:
    """The rows of one reader kind for a layer pair (``read_path_pair``'s columns); ``rt``: the
    reader's ``reader_terms`` (made here when not given); ``a2``: its ``reader_response_sq`` for
    this pair's reader layer. ``given``: columns (flat, in this function's row order) known
    already, taken as they are instead of computed (COLUMN_READS says which a change of the
    activations or of eps_exact leaves as they were); the others are computed, those derived from
    e_lin from the given e_lin."""
    wt, fr = pt.wt, pt.fr
    Hw, N, d = wt.zj.shape
    Hd = Hw * d
    rt = reader_terms(fr, kind, wt.rank_rtol) if rt is None else rt
    SR, B, rB, heads = rt.SR, rt.B, rt.rB, rt.heads
    Hr = B.shape[0]
    given = given or {}
    shape = (Hw, Hr)

    def known(name):
        return np.asarray(given[name]).reshape(shape) if name in given else None

    # (Hr d, 2 Hw d) block matrices: [M_hj | R_h^T X_j] with M_hj = A_h P_c O_j; [B_h^T U_j | B_h^T O_j F_j]
    MX = SR.T @ pt.SOX
    M = MX[:, :Hd]
    SB = stacked(B).T
    rho, share = known("rho"), known("share")
    if rho is None and share is None:
        BUF = SB @ wt.SUF
        BU, BF = BUF[:, :Hd], BUF[:, Hd:]
    else:  # only the half not given (each entry the same dot product over d_model as in the whole product)
        BU = SB @ wt.SUF[:, :Hd] if rho is None else None
        BF = SB @ wt.SUF[:, Hd:] if share is None else None
    if rho is None:
        rho = _block_sums(BU**2, Hw) / np.minimum.outer(wt.rU, rB)
    if share is None:
        share = _block_sums(BF**2, Hw) / wt.trC[:, None]  # tr(P_V C) / tr C
    E_lin = known("e_lin")
    if E_lin is None:
        E_lin = _quad(M, pt.S)  # tr(M S_j M^T)
    a2 = reader_response_sq(pt.xhat, rt) if a2 is None else a2
    E_norm = (pt.wn.T @ a2) / N
    E_cross = -_block_sums(M * MX[:, Hd:], Hw) / N  # -<M_hj, mean_t w_tj a_th z_tj^T>
    E_tot = E_lin + E_norm + 2 * E_cross
    comp = known("composition")
    if comp is None:
        comp_h = _composition(wt.comp, pt.comp, kind)  # (Hw, H query heads)
        comp = np.stack([comp_h[:, hs].mean(axis=1) for hs in heads], axis=1)
    jj, hh = np.meshgrid(np.arange(Hw), np.arange(Hr), indexing="ij")
    with np.errstate(divide="ignore", invalid="ignore"):
        cols = {
            "writer": jj.ravel(), "reader": hh.ravel(),
            "rho": rho.ravel(), "share": share.ravel(),
            "e_lin": E_lin.ravel(), "e_norm": E_norm.ravel(), "e_cross": E_cross.ravel(), "e_tot": E_tot.ravel(),
            "ratio_lin_tot": (E_lin / E_tot).ravel(),
            "rel_rms": np.sqrt(E_norm / E_tot).ravel(),
            "cross_sign": np.sign(E_cross).ravel().astype(np.float64),
            "composition": comp.ravel(),
            "rank_writer": np.repeat(wt.rU, Hr), "rank_reader": np.tile(rB, Hw),
        }
    flag = no_norm_flag if fr.norm_type == "none" else ""
    if flag:  # no pre-attention norm: the normalization split is not measured here (module docstring)
        for k in NORM_COLUMNS:
            cols[k] = np.full(Hw * Hr, np.nan)
    cols["flags"] = np.array([flag] * (Hw * Hr), dtype=object)
    return cols


def read_path_pair(fw, zw: np.ndarray, fr, x: np.ndarray, eps, kind: str, rank_rtol: float = 1e-6,
                   eps_exact: bool = True, write_O: np.ndarray | None = None,
                   no_norm_flag: str = "no_pre_norm_read_path") -> dict[str, np.ndarray]:
    """All (writer j of layer l, reader of kind X of layer l') rows for one layer pair.

    fw, fr: LayerFactors of the writer and reader layers; zw (N, Hw, d) writer value mixes;
    x (N, D) residual entering the reader layer; eps: the reader norm's epsilon; write_O
    (Hw, D, d) and zw from ``write_factors`` when the writes are not O_j z_j (default: fw.W_O);
    no_norm_flag: the ``flags`` value of rows whose reader has no pre-attention norm.
    A caller with several reader layers or kinds keeps ``writer_terms`` / ``layer_pair_terms``."""
    pt = layer_pair_terms(writer_terms(fw, zw, write_O, rank_rtol), fr, x, eps, eps_exact)
    return reader_rows(pt, kind, no_norm_flag)
