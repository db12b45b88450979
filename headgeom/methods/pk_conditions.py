"""The PK paper's conditions and their null comparison, from the PK shards' columns.

A condition is a layer's within-layer pairs of one kind, or a writer → reader layer pair of one
reading kind. Per condition: the observed statistics of ρ (``layer_stats``), the null samples'
statistics grouped by condition and null type, and the comparison of the two (r = SD / largest null
SD, empirical p of the SD, whether the mean lies below / above every null sample). Also the
random-subspace reference of Figure 2 and §5.3 (ρ of uniformly random subspaces, seeded by names)
and the layer Figure 2 shows."""

from __future__ import annotations

import numpy as np

from headgeom.core.groupby import row_groups
from headgeom.core.seeds import rng_for
from headgeom.core.stats import empirical_p
from headgeom.methods.nulls import NULL_MODELS, haar_stiefel
from headgeom.methods.overlap import isotropic_rho, layer_stats

#: the key columns of a condition in the within-layer and cross-layer null shards
WITHIN_KEY = ("model", "layer", "kind")
CROSS_KEY = ("model", "layer_w", "layer_r", "kind")
#: the per-sample statistics the null shards hold (those a family has are grouped)
NULL_SAMPLE_COLUMNS = ("mean", "sd", "min_angle_deg", "median", "p95", "rho", "sample")


def observed_within(pk: dict, fields: dict) -> dict:
    """(model, layer, kind) -> layer_stats of the within-layer pairs (+ their ρ), conditions in
    order of first appearance in the columns."""
    out = {}
    for (m, l, k), idx in row_groups(pk, WITHIN_KEY).items():
        iso = isotropic_rho(fields[m]["d_head"], fields[m]["d_model"])
        out[(m, l, k)] = layer_stats(pk["rho"][idx], pk["min_angle_deg"][idx], iso) | {"rho": np.asarray(pk["rho"][idx], float)}
    return out


def observed_cross(cross: dict, fields: dict) -> dict:
    """(model, layer_w, layer_r, kind) -> layer_stats (+ max weighted, lower-bound facts)."""
    out = {}
    for (m, lw, lr, k), idx in row_groups(cross, ("model", "layer", "layer_r", "kind")).items():
        f = fields[m]
        iso = isotropic_rho(f["d_head"], f["d_model"])
        st = layer_stats(cross["rho"][idx], cross["min_angle_deg"][idx], iso)
        rho = np.asarray(cross["rho"][idx], float)
        heads_r = np.asarray(cross["head_r"][idx])
        # per reader: max over writers of rho(R, U_i)  (PK Table 2)
        max_per_reader = np.array([np.nanmax(rho[heads_r == h]) for h in np.unique(heads_r)])
        st.update(max_weighted=float(np.nanmax(cross["weighted"][idx])),
                  mean_weighted=float(np.nanmean(cross["weighted"][idx])),
                  lambda_min_S=float(cross["lambda_min_S"][idx][0]),
                  min_reader_max_rho=float(max_per_reader.min()),
                  n_writers=int(np.unique(cross["head_w"][idx]).size),
                  angles=np.asarray(cross["min_angle_deg"][idx], float))
        out[(m, lw, lr, k)] = st
    return out


def null_groups(nulls: dict, key_cols: tuple) -> dict:
    """(key..., null) -> {statistic: list of its values over the samples} (mean, sd,
    min_angle_deg, median, p95, rho, sample: those the family has)."""
    cols = [c for c in NULL_SAMPLE_COLUMNS if c in nulls]
    return {key: {c: [nulls[c][i] for i in idx] for c in cols}
            for key, idx in row_groups(nulls, tuple(key_cols) + ("null",)).items()}


def compare(obs: dict, nulls: dict, types) -> dict:
    """One condition: observed stats against both nulls' samples."""
    sds = {t: np.asarray(nulls.get(t, {}).get("sd", []), float) for t in types}
    means = {t: np.asarray(nulls.get(t, {}).get("mean", []), float) for t in types}
    all_sd = np.concatenate([v for v in sds.values()]) if sds else np.array([])
    all_mean = np.concatenate([v for v in means.values()]) if means else np.array([])
    n = {t: int(sds[t].size) for t in types}
    res = {"obs_sd": obs["sd"], "obs_mean": obs["mean"], "n_samples": n}
    if all_sd.size == 0:
        return res | {"r": float("nan"), "exceeds_all": None, "mean_below_all": None, "mean_above_all": None}
    res.update(
        r=obs["sd"] / all_sd.max() if all_sd.max() > 0 else float("inf"),
        exceeds_all=bool(obs["sd"] > all_sd.max()),
        mean_below_all=bool(obs["mean"] < all_mean.min()),
        mean_above_all=bool(obs["mean"] > all_mean.max()),
        max_null_sd=float(all_sd.max()),
    )
    for t in types:
        if sds[t].size:
            res[f"p_sd_{t}"] = empirical_p(obs["sd"], sds[t], greater=True)
            res[f"ratio_mean_sd_{t}"] = obs["sd"] / sds[t].mean() if sds[t].mean() > 0 else float("inf")
            res[f"max_sd_{t}"] = float(sds[t].max())
    return res


def conditions(data: dict, fields: dict, types=None) -> list[dict]:
    """Every within-layer and cross-layer condition with its null comparison."""
    types = tuple(NULL_MODELS) if types is None else tuple(types)
    rows = []
    ow = observed_within(data.get("pk_within", {}), fields)
    nw = null_groups(data.get("pk_null_within", {}), WITHIN_KEY)
    for (m, l, k), st in sorted(ow.items()):
        nd = {t: nw.get((m, l, k, t), {}) for t in types}
        if not any(nd.values()):
            continue
        rows.append({"model": m, "scope": "within", "kind": k, "layer": l, "layer_r": None,
                     "obs_min_angle": st["min_angle_deg"],
                     **{f"null_min_angle_{t}": float(np.nanmin(nd[t]["min_angle_deg"])) if nd.get(t) else float("nan")
                        for t in types},
                     **compare(st, nd, types)})
    oc = observed_cross(data.get("pk_cross", {}), fields)
    nc = null_groups(data.get("pk_null_cross", {}), CROSS_KEY)
    for (m, lw, lr, k), st in sorted(oc.items()):
        nd = {t: nc.get((m, lw, lr, k, t), {}) for t in types}
        if not any(nd.values()):
            continue
        rows.append({"model": m, "scope": "cross", "kind": k, "layer": lw, "layer_r": lr, **compare(st, nd, types)})
    return rows


def angle_against_samples(obs: float, ang: np.ndarray) -> dict:
    """The observed minimum angle against the null samples' minimum angles: their smallest and
    largest, and whether the observed lies below / above every sample (None without samples)."""
    ang = ang[np.isfinite(ang)]
    if ang.size == 0:
        return {"min_angle_min": float("nan"), "min_angle_max": float("nan"), "angle_below_all": None,
                "angle_above_all": None}
    return {"min_angle_min": float(ang.min()), "min_angle_max": float(ang.max()),
            "angle_below_all": bool(obs < ang.min()), "angle_above_all": bool(obs > ang.max())}


# ------------------------------------------------------------------ Figure 2 and the random reference


def fig2_layer(ow: dict, model: str) -> int:
    """The layer at the upper median of per-layer writing-space dispersion (fixed in advance)."""
    sds = sorted((s["sd"], l) for (m, l, k), s in ow.items() if m == model and k == "O")
    return sds[len(sds) // 2][1]


def random_layer_rho(model: str, layer: int, sample: int, n_heads: int, d_model: int, d_head: int) -> np.ndarray:
    """ρ of every unordered pair among n_heads independent random d_head-dim subspaces of
    R^d_model: one sample of the random-subspace reference for a layer of that shape (seeded by
    model, layer, sample)."""
    rng = rng_for(model, layer, -1, sample, "pk_fig2_random")
    U = np.stack([haar_stiefel(d_model, d_head, rng) for _ in range(n_heads)])
    out = [np.sum((U[i].T @ U[i + 1:]) ** 2, axis=(1, 2)) / d_head for i in range(n_heads - 1)]
    return np.concatenate(out) if out else np.array([])


def random_reference(model: str, d_model: int, d_head: int, draws: int) -> np.ndarray:
    """ρ of ``draws`` independent pairs of random d_head-dim subspaces (PK §5.3: "0.0834 ± 0.0018,
    100 samples" at D = 768, d = 64); seeded by (model, draw)."""
    out = np.empty(draws)
    for k in range(draws):
        rng = rng_for(model, -1, -1, k, "pk_random_reference")
        U, V = haar_stiefel(d_model, d_head, rng), haar_stiefel(d_model, d_head, rng)
        out[k] = np.sum((U.T @ V) ** 2) / d_head
    return out


def matched_differences(base: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Matched values of two checkpoints (e.g. a base and its instruct model): |Δ| = |other − base|
    and |Δ| / base in % (NaN where base ≤ 0)."""
    d = np.abs(other - base)
    return d, np.where(base > 0, d / np.where(base > 0, base, 1.0), np.nan) * 100
