"""The PK paper's read paths (§4.2, §5.4; docs/methods.md §3.3), float64.

A reader of kind X in layer l' sees N(x) = P_c x / sigma(x), sigma(x) = sqrt(mean((P_c x)^2) + eps)
(RMSNorm: P_c = I), through A_h = W_X^h diag(gamma). For a write u of head j (layer l < l') and
the residual x entering layer l' the first-order response is A J(x) u with

  J(x) u = P_c u / sigma  -  kappa * xhat (xhat^T P_c u) / sigma,   xhat = P_c x / ||P_c x||,
  kappa  = ||P_c x||^2 / (D sigma^2) = 1 - eps / sigma^2.

The eps = 0 form has kappa = 1; kappa keeps eps exactly as the model's norm does
(the derivative of sqrt(mean((P_c x)^2) + eps)); ``eps_exact: false`` drops it (kappa = 1).
Linear term A P_c u / sigma, normalization term -kappa A xhat (xhat^T P_c u) / sigma, total their
sum. A reader without a pre-attention norm (post-LN BERT, whose write passes through the LayerNorms
after the residual adds; OLMo-2, whose q/k norms come after the projection) is not modelled here: its
``e_norm``, ``e_cross``, ``ratio_lin_tot``, ``rel_rms`` and ``cross_sign`` are NaN, the row's ``flags``
says why (``post_ln_read_path`` / ``no_pre_norm_read_path``), and ``e_tot`` is the linear term alone.

Writes *(choice, ``activation.read_paths.write_point``)*: ``residual`` (default) takes head j's write
as the model adds it to the residual. Where the family has a norm on the attention output before
the residual add (Gemma-2/3, OLMo-2) that is u_tj = gamma_post * P_c(O_j z_tj) / s_t, with s_t the
norm's per-token factor computed from the full attention output and gamma_post its gain (headgeom.io.forward:
``write_scale`` = 1 / s_t, ``write_gain``); the heads' writes then sum to the norm's output, and the
writing space is Im(diag(gamma_post) P_c O_j) (rho, ranks). ``pre_norm`` takes u_tj = O_j z_tj, the
output projection's per-head part, before that norm. Elsewhere both are O_j z_tj.

Everything per (writer j, reader h) comes from d x d matrices: with R_h = P_c diag(gamma) W_X^{hT}
(D x d, pk.reading_matrix) and M_hj = R_h^T O_j = A_h P_c O_j,
  E||lin||^2   = tr(M^T M S_j),                  S_j = mean_t z z^T / sigma^2
  E||norm||^2  = mean_t kappa^2 c_tj^2 ||a_th||^2 / sigma^2,  c_tj = xhat^T P_c O_j z_tj, a_th = R_h^T xhat
  E<lin,norm>  = -<M_hj, mean_t (kappa c_tj / sigma^2) a_th z_tj^T>
Projected energy share tr(P_V C)/tr C, C = mean_t u u^T, u = O_j z (P_V: projector on Im R_h).
Readers of K and V are KV groups (one space per group); Q readers are query heads.
Composition scores (Elhage et al. 2021) on unfolded weights, W_QK = W_Q^T W_K, W_OV = O W_V:
  Q: ||W_QK^T W_OV^j|| / (||W_QK|| ||W_OV^j||),  K: ||W_QK W_OV^j|| / (...),
  V: ||W_OV^h W_OV^j|| / (||W_OV^h|| ||W_OV^j||); for a K or V group reader *(choice)* the mean
  over the group's query heads (MHA: the head itself).
"""

from __future__ import annotations

import numpy as np

from .pk import orthonormal_bases, reading_matrix

WRITE_POINTS = ("residual", "pre_norm")
#: the columns a reader without a pre-attention norm leaves undefined (NaN + flags)
NORM_COLUMNS = ("e_norm", "e_cross", "ratio_lin_tot", "rel_rms", "cross_sign")


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


def head_writes(W_O: np.ndarray, z: np.ndarray, arrays: dict, meta: dict, write_point: str = "residual"):
    """(N, H, D) every head's write at every token (tests; small use)."""
    O, zw = write_factors(W_O, z, arrays, meta, write_point)
    return np.einsum("hDd,thd->thD", O, zw, optimize=True)


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


def jvp(x: np.ndarray, u: np.ndarray, gain, norm_type: str, eps: float, eps_exact: bool = True):
    """(linear, normalization) parts of diag(gamma) J(x) u for single vectors (tests, small use)."""
    x = np.asarray(x, np.float64)[None]
    u = np.asarray(u, np.float64)
    sigma, xhat, kappa = norm_stats(x, norm_type, eps, eps_exact)
    pu = u - u.mean() if norm_type == "layernorm" else u
    g = np.ones_like(u) if gain is None else np.asarray(gain, np.float64)
    lin = g * pu / sigma[0]
    nrm = -g * kappa[0] * xhat[0] * (xhat[0] @ pu) / sigma[0]
    return lin, nrm


def _readers(f, kind: str):
    """(R (n, D, d) folded reading factors, unfolded W (n, d, D), reader -> query heads)."""
    W = {"Q": f.W_Q, "K": f.W_K, "V": f.W_V}[kind]
    R = reading_matrix(W, f.norm_gain, f.norm_type)
    if kind == "Q":
        heads = [[h] for h in range(f.n_heads)]
    else:
        heads = [list(np.where(f.kv_group == g)[0]) for g in range(f.n_kv)]
    return R, W, heads


def composition(fw, fr, kind: str) -> np.ndarray:
    """(Hw, n_readers) composition scores on unfolded weights (module docstring)."""
    O = fw.W_O  # (Hw, D, d)
    OV_j_G = [fw.W_V[fw.kv_group[j]] @ fw.W_V[fw.kv_group[j]].T for j in range(fw.n_heads)]  # W_V W_V^T
    A_j = np.einsum("jDa,jDb->jab", O, O, optimize=True)
    nOV_j = np.array([np.sqrt(max(np.trace(A_j[j] @ OV_j_G[j]), 0.0)) for j in range(fw.n_heads)])
    Hr = fr.n_heads
    out = np.zeros((fw.n_heads, Hr))
    for h in range(Hr):
        WQ, WK = fr.W_Q[h], fr.W_K[fr.kv_group[h]]
        WVh, Oh = fr.W_V[fr.kv_group[h]], fr.W_O[h]
        GQ, GK = WQ @ WQ.T, WK @ WK.T
        nQK = np.sqrt(max(np.trace(GQ @ GK), 0.0))
        if kind == "V":
            nOVh = np.sqrt(max(np.trace((Oh.T @ Oh) @ (WVh @ WVh.T)), 0.0))
            Ah = Oh.T @ Oh
        for j in range(fw.n_heads):
            Gv = OV_j_G[j]
            if kind == "Q":  # ||W_K^T (W_Q O_j) W_V||^2 = tr(X^T G_K X G_V), X = W_Q O_j
                X = WQ @ O[j]
                num = np.trace(X.T @ GK @ X @ Gv)
                den = nQK * nOV_j[j]
            elif kind == "K":  # ||W_Q^T (W_K O_j) W_V||^2
                Y = WK @ O[j]
                num = np.trace(Y.T @ GQ @ Y @ Gv)
                den = nQK * nOV_j[j]
            else:  # ||O_h (W_Vh O_j) W_Vj||^2
                Zm = WVh @ O[j]
                num = np.trace(Zm.T @ Ah @ Zm @ Gv)
                den = nOVh * nOV_j[j]
            out[j, h] = np.sqrt(max(num, 0.0)) / den if den > 0 else np.nan
    return out


def read_path_pair(fw, zw: np.ndarray, fr, x: np.ndarray, eps, kind: str, rank_rtol: float = 1e-6,
                   eps_exact: bool = True, write_O: np.ndarray | None = None,
                   no_norm_flag: str = "no_pre_norm_read_path") -> dict[str, np.ndarray]:
    """All (writer j of layer l, reader of kind X of layer l') rows for one layer pair.

    fw, fr: LayerFactors of the writer and reader layers; zw (N, Hw, d) writer value mixes;
    x (N, D) residual entering the reader layer; eps: the reader norm's epsilon; write_O
    (Hw, D, d) and zw from ``write_factors`` when the writes are not O_j z_j (default: fw.W_O);
    no_norm_flag: the ``flags`` value of rows whose reader has no pre-attention norm."""
    zw = np.asarray(zw, np.float64)
    N = zw.shape[0]
    O = fw.W_O if write_O is None else np.asarray(write_O, np.float64)  # (Hw, D, d)
    Hw = O.shape[0]
    sigma, xhat, kappa = norm_stats(x, fr.norm_type, eps, eps_exact)
    R, _, heads = _readers(fr, kind)  # (Hr, D, d)
    Hr, D, d = R.shape
    # weight-side pieces
    M = np.einsum("hDa,jDb->hjab", R, O, optimize=True)  # A_h P_c O_j
    B, rB = orthonormal_bases(R, rank_rtol)
    U, rU = orthonormal_bases(O, rank_rtol)
    UB = np.einsum("jDa,hDb->jhab", U, B, optimize=True)
    rho = (UB**2).sum(axis=(2, 3)) / np.minimum.outer(rU, rB)
    # activation-side pieces
    inv_s2 = 1.0 / sigma**2
    S = np.einsum("t,tja,tjb->jab", inv_s2, zw, zw, optimize=True) / N  # mean z z^T / sigma^2
    E_lin = np.einsum("hjab,hjac,jbc->jh", M, M, S, optimize=True)
    r = np.einsum("tD,jDa->tja", xhat, O, optimize=True)  # O_j^T P_c xhat (xhat already centred)
    c = np.einsum("tja,tja->tj", r, zw, optimize=True)  # xhat^T P_c O_j z
    a = np.einsum("tD,hDa->tha", xhat, R, optimize=True)  # R_h^T xhat = A_h xhat
    a2 = np.einsum("tha,tha->th", a, a, optimize=True)
    E_norm = np.einsum("tj,th->jh", (kappa[:, None] * c) ** 2 * inv_s2[:, None], a2, optimize=True) / N
    w = kappa[:, None] * c * inv_s2[:, None]  # (N, Hw)
    Rm = np.einsum("tj,tha,tjb->hjab", w, a, zw, optimize=True) / N
    E_cross = -np.einsum("hjab,hjab->jh", M, Rm, optimize=True)
    E_tot = E_lin + E_norm + 2 * E_cross
    # projected energy share of the actual writes
    Sig = np.einsum("tja,tjb->jab", zw, zw, optimize=True) / N
    BO = np.einsum("hDa,jDb->jhab", B, O, optimize=True)  # B_h^T O_j
    trPC = np.einsum("jhab,jhac,jbc->jh", BO, BO, Sig, optimize=True)
    AO = np.einsum("jDa,jDb->jab", O, O, optimize=True)
    trC = np.einsum("jab,jba->j", AO, Sig, optimize=True)
    share = trPC / trC[:, None]
    comp_h = composition(fw, fr, kind)  # (Hw, H query heads)
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
            "rank_writer": np.repeat(rU, Hr), "rank_reader": np.tile(rB, Hw),
        }
    flag = no_norm_flag if fr.norm_type == "none" else ""
    if flag:  # no pre-attention norm: the normalization split is not measured here (module docstring)
        for k in NORM_COLUMNS:
            cols[k] = np.full(Hw * Hr, np.nan)
    cols["flags"] = np.array([flag] * (Hw * Hr), dtype=object)
    return cols


def pair_terms_direct(O_j, z, R_h, x, norm_type, eps, eps_exact=True):
    """Per-token linear and normalization terms for one (writer, reader) pair, materialized
    token by token (tests; independent of the trace formulas above)."""
    lin, nrm = [], []
    for t in range(z.shape[0]):
        u = O_j @ z[t]
        sigma, xhat, kappa = norm_stats(x[t][None], norm_type, eps, eps_exact)
        pu = u - u.mean() if norm_type == "layernorm" else u
        lin.append(R_h.T @ pu / sigma[0])
        nrm.append(-kappa[0] * (R_h.T @ xhat[0]) * (xhat[0] @ pu) / sigma[0])
    return np.array(lin), np.array(nrm)
