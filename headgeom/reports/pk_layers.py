"""PK paper: per-layer and per-layer-pair tables of what the paper prints beside Tables 1-9.

Each builder reads shards that the PK jobs already write (``pk``, ``pk_cross``, ``pk_self``,
``pk_null_within``, ``pk_null_cross``); the claims ledger reads ranges, counts and lists over
their rows (``reduce`` with ``over_rows``, headgeom.reports.claims)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from headgeom.methods.pk import isotropic_rho, isotropic_sd
from headgeom.reports.pk import conditions, null_groups, observed_cross, observed_within
from headgeom.reports.tables import Column, Table

_F4, _F2 = "{:.4f}", "{:.2f}"


def _key_cols(scope):
    return ("model", "layer", "kind") if scope == "within" else ("model", "layer_w", "layer_r", "kind")


def _angle_cols(obs: float, ang: np.ndarray) -> dict:
    ang = ang[np.isfinite(ang)]
    if ang.size == 0:
        return {"min_angle_min": float("nan"), "min_angle_max": float("nan"), "angle_below_all": None,
                "angle_above_all": None}
    return {"min_angle_min": float(ang.min()), "min_angle_max": float(ang.max()),
            "angle_below_all": bool(obs < ang.min()), "angle_above_all": bool(obs > ang.max())}


def table_null_samples(data, fields, models, types) -> Table:
    """One row per condition (layer, or writer -> reader layer pair) and null model: the null
    samples' SD, mean and minimum angle (smallest, mean, largest over samples) beside the
    observed values."""
    rows = []
    for scope, fam, obs in (("within", "pk_null_within", observed_within(data.get("pk", {}), fields)),
                            ("cross", "pk_null_cross", observed_cross(data.get("pk_cross", {}), fields))):
        ng = null_groups(data.get(fam, {}), _key_cols(scope))
        for key, st in sorted(obs.items()):
            if key[0] not in models:
                continue
            m, layer = key[0], key[1]
            layer_r, kind = (None, key[2]) if scope == "within" else (key[2], key[3])
            for t in types:
                g = ng.get(tuple(key) + (t,))
                if not g:
                    continue
                sd, mean = np.asarray(g["sd"], float), np.asarray(g["mean"], float)
                ang = np.asarray(g["min_angle_deg"], float)
                rows.append({
                    "model": m, "scope": scope, "kind": kind, "layer": layer, "layer_r": layer_r, "null": t,
                    "n_samples": int(sd.size), "obs_sd": st["sd"], "sd_min": float(sd.min()),
                    "sd_mean": float(sd.mean()), "sd_max": float(sd.max()),
                    "sd_above_all": bool(st["sd"] > sd.max()),
                    "sd_over_null_mean_sd": st["sd"] / float(sd.mean()) if sd.mean() > 0 else float("inf"),
                    "obs_mean": st["mean"], "mean_min": float(mean.min()), "mean_mean": float(mean.mean()),
                    "mean_max": float(mean.max()), "obs_min_angle": st["min_angle_deg"],
                    **_angle_cols(st["min_angle_deg"], ang),
                })
    cols = [Column("model", "Model"), Column("scope", "Scope"), Column("kind", "Kind"), Column("layer", "Layer"),
            Column("layer_r", "Reader layer"), Column("null", "Null"), Column("n_samples", "Samples"),
            Column("obs_sd", "SD", _F4), Column("sd_min", "Null SD min", _F4), Column("sd_mean", "Null SD mean", _F4),
            Column("sd_max", "Null SD max", _F4), Column("sd_above_all", "SD above all"),
            Column("sd_over_null_mean_sd", "SD / null mean SD", _F2),
            Column("obs_mean", "Mean ρ", _F4), Column("mean_min", "Null mean min", _F4),
            Column("mean_mean", "Null mean mean", _F4), Column("mean_max", "Null mean max", _F4),
            Column("obs_min_angle", "Min angle (°)", _F2), Column("min_angle_min", "Null min angle min (°)", _F2),
            Column("min_angle_max", "Null min angle max (°)", _F2), Column("angle_below_all", "Angle below all"),
            Column("angle_above_all", "Angle above all")]
    return Table("pk_null_samples", "Per condition and null model: the null samples' SD, mean and minimum angle "
                 "(min, mean, max over samples) beside the observed values.", cols, rows)


def table_layer_stats(data, fields, models) -> Table:
    """One row per layer (within-layer pairs of each kind) and writer -> reader layer pair: mean ρ
    over the isotropic value d/D, SD over the random-subspace SD, the mean over pairs of the
    pair minimum angle, and (across layers) the layer distance and the mean and median of the
    weighted measure over head pairs."""
    rows = []
    pk, cross = data.get("pk", {}), data.get("pk_cross", {})
    for scope, src, cols_key in (("within", pk, ("model", "layer", "kind")),
                                 ("cross", cross, ("model", "layer", "layer_r", "kind"))):
        if not src:
            continue
        groups = defaultdict(list)
        for i, key in enumerate(zip(*(src[c] for c in cols_key))):
            groups[tuple(str(k) if isinstance(k, str) else int(k) for k in key)].append(i)
        for key, idx in sorted(groups.items()):
            m = key[0]
            if m not in models:
                continue
            idx = np.asarray(idx)
            f = fields[m]
            iso, iso_sd = isotropic_rho(f["d_head"], f["d_model"]), isotropic_sd(f["d_head"], f["d_model"])
            rho = np.asarray(src["rho"][idx], float)
            rho = rho[np.isfinite(rho)]
            ang = np.asarray(src["min_angle_deg"][idx], float)
            row = {"model": m, "scope": scope, "layer": key[1],
                   "layer_r": None if scope == "within" else key[2], "kind": key[-1],
                   "distance": None if scope == "within" else key[2] - key[1],
                   "n_pairs": int(rho.size), "mean": float(rho.mean()), "sd": float(rho.std(ddof=0)),
                   "mean_over_iso": float(rho.mean()) / iso, "sd_over_random": float(rho.std(ddof=0)) / iso_sd,
                   "mean_min_angle": float(np.nanmean(ang)), "mean_weighted": None, "median_weighted": None}
            if scope == "cross":
                w = np.asarray(src["weighted"][idx], float)
                row.update(mean_weighted=float(np.nanmean(w)), median_weighted=float(np.nanmedian(w)))
            rows.append(row)
    cols = [Column("model", "Model"), Column("scope", "Scope"), Column("kind", "Kind"), Column("layer", "Layer"),
            Column("layer_r", "Reader layer"), Column("distance", "Distance"), Column("n_pairs", "Pairs"),
            Column("mean", "Mean ρ", _F4), Column("sd", "SD", _F4), Column("mean_over_iso", "Mean / (d/D)", "{:.3f}"),
            Column("sd_over_random", "SD / random SD", _F2), Column("mean_min_angle", "Mean pair min angle (°)", _F2),
            Column("mean_weighted", "Mean weighted", "{:.3f}"), Column("median_weighted", "Median weighted", "{:.3f}")]
    return Table("pk_layer_stats", "Per layer and writer→reader layer pair: mean ρ / (d/D), SD / random-subspace SD, "
                 "mean pair minimum angle, and the weighted measure over head pairs.", cols, rows)


def table_cross_distance(data, fields, models, types) -> Table:
    """One row per model, reading kind and layer distance Δ = reader − writer: layer pairs, the
    mean over those pairs of their mean ρ (and over d/D), and how many pairs' mean lies below /
    above every null sample."""
    oc = observed_cross(data.get("pk_cross", {}), fields)
    cmp = {(c["model"], c["kind"], c["layer"], c["layer_r"]): c
           for c in conditions(data, fields, types) if c["scope"] == "cross"}
    groups = defaultdict(list)
    for (m, lw, lr, k), st in oc.items():
        if m in models:
            groups[(m, k, lr - lw)].append((st["mean"], cmp.get((m, k, lw, lr), {})))
    rows = []
    for (m, k, dist), items in sorted(groups.items()):
        f = fields[m]
        means = np.array([x[0] for x in items], float)
        below = [c.get("mean_below_all") for _, c in items if c.get("mean_below_all") is not None]
        above = [c.get("mean_above_all") for _, c in items if c.get("mean_above_all") is not None]
        rows.append({"model": m, "kind": k, "distance": dist, "layer_pairs": len(items),
                     "mean_rho": float(means.mean()), "mean_over_iso": float(means.mean()) / isotropic_rho(f["d_head"], f["d_model"]),
                     "with_nulls": len(below), "mean_below_all": int(sum(below)), "mean_above_all": int(sum(above)),
                     "below_frac": f"{int(sum(below))}/{len(below)}", "above_frac": f"{int(sum(above))}/{len(above)}"})
    cols = [Column("model", "Model"), Column("kind", "Kind"), Column("distance", "Distance"),
            Column("layer_pairs", "Layer pairs"), Column("mean_rho", "Mean ρ", _F4),
            Column("mean_over_iso", "Mean / (d/D)", "{:.3f}"), Column("with_nulls", "Pairs with null samples"),
            Column("mean_below_all", "Mean below all"), Column("mean_above_all", "Mean above all"),
            Column("below_frac", "Below all / with nulls"), Column("above_frac", "Above all / with nulls")]
    return Table("pk_cross_distance", "Writer→reader overlap grouped by layer distance.", cols, rows)


def table_self_layers(data, models) -> Table:
    """One row per model, layer and self-overlap test: the observed mean ρ, the permutation mean
    and its p."""
    s = data.get("pk_self", {})
    rows = []
    if s:
        for i in range(len(s["model"])):
            if str(s["model"][i]) not in models:
                continue
            rows.append({"model": str(s["model"][i]), "layer": int(s["layer"][i]), "test": str(s["test"][i]),
                         "observed": float(s["observed"][i]), "null_mean": float(s["null_mean"][i]),
                         "p": float(s["p"][i]), "n_null": int(s["n_null"][i]), "exact": bool(s["exact"][i])})
    rows.sort(key=lambda r: (r["model"], r["test"], r["layer"]))
    cols = [Column("model", "Model"), Column("test", "Test"), Column("layer", "Layer"),
            Column("observed", "Observed", _F4), Column("null_mean", "Permutation mean", _F4),
            Column("p", "p", "{:.4f}"), Column("n_null", "Permutations"), Column("exact", "Exhaustive")]
    return Table("pk_self_layers", "Self-head overlap per layer against label permutations.", cols, rows)
