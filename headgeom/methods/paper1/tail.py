"""The strong closure tail and latent closure over the per-head shard columns (``paper1_heads``):
the strong-tail statistics of paper 1's Table 2, the latent-closure and I_D AUROCs at a threshold
(every AUROC is headgeom.core.stats'), their model/layer-clustered bootstrap intervals, the
layer-matched ordinary heads of the large-endpoint design, and the nonradial response of
preserved and reduced cores."""

from __future__ import annotations

import numpy as np

from headgeom.core.groupby import row_groups
from headgeom.core.seeds import rng_for
from headgeom.core.stats import auroc, auroc_sorted, cluster_bootstrap, finite_max, finite_median, finite_min, tie_groups
from headgeom.methods.paper1.capacity import capacity_selection
from headgeom.methods.paper1.common import BOOTSTRAP, model_layer_clusters

NAN = float("nan")


def strong_tail(P, Pw, alpha, g, threshold: float) -> dict:
    """The per-model strong-tail statistics paper 1's Table 2 reports."""
    defined = np.isfinite(P)
    strong = defined & (P >= threshold)
    n_strong = int(strong.sum())
    return {
        "defined": defined, "strong_mask": strong, "n_defined": int(defined.sum()), "strong": n_strong,
        "wrong_v_median": finite_median(Pw),
        "wrong_v_max": finite_max(Pw),
        "neg_alpha_share": float(np.mean(alpha[strong] < 0)) if n_strong else NAN,
        "gT_median_strong": finite_median(g[strong]),
        "gT_min_strong": finite_min(g[strong]),
        "gT_median_all": finite_median(g),
    }


def latent_aurocs(P, PL, ID, t):
    """(AUROC of latent closure P_I, strong (P ≥ t) against ordinary heads; AUROC of I_D among heads
    with P_I ≥ t, preserved (P ≥ t) against reduced; #P_I ≥ t, #preserved, #reduced)."""
    defined = np.isfinite(P) & np.isfinite(PL)
    strong = defined & (P >= t)
    au_lat = auroc(PL[strong], PL[defined & ~strong])
    lat = defined & (PL >= t) & np.isfinite(ID)
    pres, red = lat & (P >= t), lat & (P < t)
    au_id = auroc(ID[pres], ID[red])
    return au_lat, au_id, int(lat.sum()), int(pres.sum()), int(red.sum())


def sweep_aurocs(P, PL, ID, ts) -> list[float]:
    """[AUROC P_I (t_0), AUROC I_D given P_I (t_0), AUROC P_I (t_1), ...]: the two AUROCs of
    ``latent_aurocs`` at every threshold, from one sort of each score (the bootstrap's statistic;
    sorting per threshold would sort 2 x len(ts) times per replicate)."""
    d = np.isfinite(P) & np.isfinite(PL)
    P, PL, ID = P[d], PL[d], ID[d]
    fid = np.isfinite(ID)
    by_latent = np.argsort(PL, kind="stable")
    by_id = np.argsort(np.where(fid, ID, np.inf), kind="stable")
    g_latent, g_id = tie_groups(PL[by_latent]), tie_groups(np.where(fid, ID, np.inf)[by_id])
    out = []
    for t in ts:
        pos = P >= t
        out.append(auroc_sorted(g_latent, pos[by_latent], ~pos[by_latent]))
        lat = (PL >= t) & fid
        out.append(auroc_sorted(g_id, (lat & pos)[by_id], (lat & ~pos)[by_id]))
    return out


def sweep_intervals(heads: dict, rows, label: str, P, PL, ID, ts: list[float], n_boot: int) -> dict:
    """{t: (lat_lo, lat_hi, id_lo, id_hi)}: model/layer-clustered percentile intervals of the two
    AUROCs at every threshold, all from the same replicates (resampling models, then complete
    layers within them; core.stats.cluster_bootstrap). ``rows``: the table row's heads (boolean)."""
    if not n_boot or not rows.any():
        return {t: (NAN,) * 4 for t in ts}
    lo, hi = cluster_bootstrap(lambda ix: sweep_aurocs(P[ix], PL[ix], ID[ix], ts), model_layer_clusters(heads, rows),
                               n_boot, rng_for(label, -1, -1, 0, BOOTSTRAP + "-sweep"))
    lo, hi = np.atleast_1d(lo), np.atleast_1d(hi)
    return {t: (lo[2 * k], hi[2 * k], lo[2 * k + 1], hi[2 * k + 1]) for k, t in enumerate(ts)}


def latent_intervals(heads: dict, rows, label: str, P, P_matched, PL, ID, t: float, n_boot: int) -> dict:
    """{"lat", "id", "lat_lm", "id_lm": (lo, hi)}: model/layer-clustered percentile intervals of the
    two AUROCs of ``latent_aurocs`` against all heads (P) and against the layer-matched ones
    (P_matched: P on strong + matched heads, NaN elsewhere), from one generator; {} without
    replicates or rows."""
    out = {}
    if not n_boot or not rows.any():
        return out
    clusters = model_layer_clusters(heads, rows)
    rng = rng_for(label, -1, -1, 0, BOOTSTRAP + "-latent")
    for key, pp in (("lat", P), ("lat_lm", P_matched)):
        lo, hi = cluster_bootstrap(lambda ix, pp=pp: latent_aurocs(pp[ix], PL[ix], ID[ix], t)[:2], clusters, n_boot, rng)
        out[key], out["id" + key[3:]] = (lo[0], hi[0]), (lo[1], hi[1])
    return out


def layer_matched(heads: dict, rows, threshold: float) -> np.ndarray:
    """Layer-matched ordinary heads of the selected rows: in every layer, as many heads with
    P < t as the layer has strong heads, hash-chosen exactly as the capacity job chooses them
    (methods.paper1.capacity.capacity_selection), so with no strong head a layer adds none."""
    idx = np.flatnonzero(rows)
    sel = {"model": np.asarray(heads["model"])[idx], "layer": np.asarray(heads["layer"]).astype(np.int64)[idx]}
    head = np.asarray(heads["head"]).astype(np.int64)[idx]
    P = np.asarray(heads["P"]).astype(float)[idx]
    PL = np.asarray(heads["P_latent"]).astype(float)[idx]
    out = np.zeros(idx.size, dtype=bool)
    for (model, layer), pos in row_groups(sel, ("model", "layer")).items():
        H = int(head[pos].max()) + 1
        Ph, valid = np.full(H, np.nan), np.zeros(H, dtype=bool)
        Ph[head[pos]] = P[pos]
        valid[head[pos]] = np.isfinite(P[pos]) & np.isfinite(PL[pos])
        _, matched, _ = capacity_selection(Ph, valid, threshold, model, layer, 0)
        out[pos] = matched[head[pos]]
    return out


def nonradial_response(PL, P, a, b, w2, pres, red) -> dict:
    """The nonradial response b² + ‖w‖² of preserved and reduced cores (medians, and reduced minus
    preserved), and the median share of a reduced core's closure loss P_I − P that its off-plane
    leakage w accounts for: (P_w=0 − P) / (P_I − P), P_w=0 the closure with w set to 0."""
    nr = b ** 2 + w2
    s = np.sqrt(np.clip(PL, 0.0, 1.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        p_nw = ((1 + a) * s + b * np.sqrt(1 - s ** 2)) ** 2 / ((1 + a) ** 2 + b ** 2)
        share = (p_nw - P) / (PL - P)
    return {"nonradial_pres": finite_median(nr[pres]), "nonradial_red": finite_median(nr[red]),
            "nonradial_diff": finite_median(nr[red]) - finite_median(nr[pres]),
            "leak_share_red": finite_median(share[red])}
