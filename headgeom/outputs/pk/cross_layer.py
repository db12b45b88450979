"""The PK paper's cross-layer outputs (writer O of layer l against the Q/K/V readers of later
layers): Table 2 (the lower bound), Table 9 (largest overlaps), Figure 9 (heatmaps against the
nulls), and Appendices F and G per layer and layer pair (within-layer rows beside the cross-layer
ones) and by layer distance."""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import numpy as np

from headgeom.core.groupby import group_rows, row_groups
from headgeom.core.stats import rank_within_groups
from headgeom.methods.overlap import isotropic_rho, isotropic_sd
from headgeom.methods.pk_conditions import conditions, observed_cross
from headgeom.outputs.formats import Column, Table, pyplot
from headgeom.outputs.pk.common import (CROSS_WITH_NULLS, FOUR_PLACES, NULL_TYPES_PARAM, READING_KINDS, TWO_PLACES,
                                        figure, table)


@table("pk_table2_lower_bound", families=("pk_cross",))
def pk_table2_lower_bound(data, fields, models) -> Table:
    """**PK paper, Table 2.** Lower bound max_i ρ(R, U_i) ≥ λ_min(S)/H with reading spaces fixed: range of
    λ_min(S) over writer layers, layer pairs, the observed minimum over readers of the maximum overlap
    (Q/K/V), layer pairs where it falls below the isotropic value, and numerical violations of the bound
    (expected 0)."""
    oc = observed_cross(data.get("pk_cross", {}), fields)
    rows = []
    for m in models:
        f = fields[m]
        iso = isotropic_rho(f["d_head"], f["d_model"])
        keys = [k for k in oc if k[0] == m]
        if not keys:
            continue
        lam = {k[1]: oc[k]["lambda_min_S"] for k in keys}
        row = {"model": m, "lambda_min": min(lam.values()), "lambda_max": max(lam.values()),
               "layer_pairs": len({(k[1], k[2]) for k in keys})}
        violations = 0
        for kind in READING_KINDS:
            ks = [k for k in keys if k[3] == kind]
            if not ks:
                continue
            vals = [oc[k]["min_reader_max_rho"] for k in ks]
            row[f"min_{kind}"] = min(vals)
            row[f"below_iso_{kind}"] = int(sum(v < iso for v in vals))
            violations += sum(oc[k]["min_reader_max_rho"] < oc[k]["lambda_min_S"] / oc[k]["n_writers"] * (1 - 1e-9) for k in ks)
        row["bound_violations"] = int(violations)
        rows.append(row)
    return Table(columns=[Column("model", "Model"), Column("lambda_min", "λ_min(S) min", "{:.2e}"), Column("lambda_max", "λ_min(S) max", "{:.2e}"),
                          Column("layer_pairs", "Layer pairs"),
                          Column("min_Q", "min max ρ Q", "{:.3f}"), Column("min_K", "K", "{:.3f}"), Column("min_V", "V", "{:.3f}"),
                          Column("below_iso_Q", "Below d/D Q"), Column("below_iso_K", "K"), Column("below_iso_V", "V"),
                          Column("bound_violations", "Bound violations")], rows=rows,
                          notes="Bound violations counts layer pairs and kinds where the proposition's bound fails numerically (expected 0).")


@table("pk_table9_weighted", families=("pk_cross",))
def pk_table9_weighted(data, fields, models, top: int = 3) -> Table:
    """**PK paper, Table 9.** Largest ρ and largest spectral-weighted measure D‖RB‖²/(‖R‖²‖B‖²) per writer →
    reader layer pair (top three by each), with the mean weighted measure."""
    oc = observed_cross(data.get("pk_cross", {}), fields)
    rows = []
    for m in models:
        ks = [k for k in oc if k[0] == m]
        picked = sorted(ks, key=lambda k: -oc[k]["max"])[:top] + sorted(ks, key=lambda k: -oc[k]["max_weighted"])[:top]
        seen = set()
        for k in picked:
            if k in seen:
                continue
            seen.add(k)
            rows.append({"model": m, "pair": f"{k[1]} → {k[2]}, {k[3]}", "max_rho": oc[k]["max"],
                         "max_weighted": oc[k]["max_weighted"], "mean_weighted": oc[k]["mean_weighted"]})
    return Table(columns=[Column("model", "Model"), Column("pair", "Layer pair, reading"), Column("max_rho", "Max ρ", "{:.3f}"),
                          Column("max_weighted", "Max weighted", "{:.2f}"), Column("mean_weighted", "Mean weighted", "{:.2f}")], rows=rows)


LOW_FRACTION = 0.1  # pk_appendix_f_layer_stats.min_angle_low: a layer among the lowest 10 % of its model's angles
ISO_BAND = 0.01  # pk_appendix_f_cross_distance.in_band_onward: the band about d/D (App. F's "d/D ± 0.01")


@figure("pk_fig9_cross_heatmaps", families=CROSS_WITH_NULLS, params=NULL_TYPES_PARAM)
def pk_fig9_cross_heatmaps(data, fields, models, null_types):
    """**PK paper, Figure 9.** Writer layer × reader layer: log10 r and whether the mean ρ lies below (-1) or
    above (+1) every null sample, per reading kind."""
    return draw_fig9(conditions(data, fields, null_types), fields, models)


def draw_fig9(conds, fields, models):
    """Per model two rows of heatmaps (writer layer × reader layer, one column per reading kind):
    log10 r on a diverging scale centred at r = 1, and whether the mean ρ lies below / above every
    null sample (a three-colour legend)."""
    from matplotlib.colors import ListedColormap, TwoSlopeNorm
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()
    kinds = READING_KINDS
    cats = ListedColormap(["#3b6fb6", "#dddddd", "#c0392b"])
    fig, axes = plt.subplots(2 * len(models), 3, figsize=(10, 6.4 * len(models)), squeeze=False, layout="constrained")
    for i, m in enumerate(models):
        L = fields[m]["n_layers"]
        logs = []
        mats = []
        for kind in kinds:
            R = np.full((L, L), np.nan)
            S = np.full((L, L), np.nan)
            for c in conds:
                if c["model"] == m and c["scope"] == "cross" and c["kind"] == kind:
                    R[c["layer"], c["layer_r"]] = c["r"]
                    S[c["layer"], c["layer_r"]] = -1 if c["mean_below_all"] else (1 if c["mean_above_all"] else 0)
            with np.errstate(divide="ignore", invalid="ignore"):
                lr = np.log10(R)
            logs.append(lr)
            mats.append(S)
        fin = np.concatenate([x[np.isfinite(x)] for x in logs]) if logs else np.array([])
        span = max(float(np.abs(fin).max()) if fin.size else 1.0, 1e-3)
        norm = TwoSlopeNorm(vcenter=0.0, vmin=-span, vmax=span)
        for j, kind in enumerate(kinds):
            top, bot = axes[2 * i][j], axes[2 * i + 1][j]
            im = top.imshow(logs[j], origin="lower", cmap="RdBu_r", norm=norm)
            bot.imshow(mats[j], origin="lower", cmap=cats, vmin=-1.5, vmax=1.5, interpolation="nearest")
            top.set_title(f"writer O → reader {kind}", fontsize=8)
            bot.set_title(f"writer O → reader {kind}", fontsize=8)
            for a in (top, bot):
                a.set_xlabel("reader layer", fontsize=7)
                a.tick_params(labelsize=6)
                a.xaxis.set_major_locator(MaxNLocator(integer=True))
                a.yaxis.set_major_locator(MaxNLocator(integer=True))
            if j == 0:
                top.set_ylabel(f"{m}\nwriter layer", fontsize=8)
                bot.set_ylabel(f"{m}\nwriter layer", fontsize=8)
        cb = fig.colorbar(im, ax=list(axes[2 * i]), fraction=0.025, pad=0.02)
        cb.set_label("log10 r (r = SD / max null SD; 0: r = 1)", fontsize=7)
        cb.ax.tick_params(labelsize=6)
        axes[2 * i + 1][2].legend(
            handles=[Patch(color=cats(0), label="mean below every null sample"),
                     Patch(color=cats(1), label="neither"),
                     Patch(color=cats(2), label="mean above every null sample")],
            fontsize=6, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    fig.suptitle("Writer → reader layer pairs: dispersion ratio r (rows 1, 3, …) and mean ρ against the nulls "
                 "(rows 2, 4, …)", fontsize=9)
    return fig, {}


@table("pk_appendix_f_layer_stats", families=("pk_within", "pk_cross"))
def pk_appendix_f_layer_stats(data, fields, models) -> Table:
    """**PK paper, §5.2, Appendices F and G (per layer and layer pair).** One row per layer (within-layer pairs
    of each kind) and per writer → reader layer pair (per reading kind): pairs, mean and SD of ρ, mean ρ
    over the isotropic value d/D (whether below it, and by how many random-subspace SDs), SD over the
    random-subspace SD and its rank among the model's rows of that scope and kind (1: the largest),
    the mean and median over pairs of the pair minimum angle, the smallest pair minimum angle with its rank
    (1: the smallest) and whether it is among the lowest 10 % of the model's rows of that scope and kind
    (rounded up), within layers how many layers follow it, the largest ρ over its head pairs, and across
    layers the distance reader − writer and the mean, median and largest over head pairs of the weighted
    measure D‖RB‖²/(‖R‖²‖B‖²) (Table 9's max ρ and max weighted for every layer pair, not only its top ones)."""
    rows = []
    pk, cross = data.get("pk_within", {}), data.get("pk_cross", {})
    for scope, src, cols_key in (("within", pk, ("model", "layer", "kind")),
                                 ("cross", cross, ("model", "layer", "layer_r", "kind"))):
        if not src:
            continue
        for key, idx in sorted(row_groups(src, cols_key).items(), key=lambda kv: kv[0]):
            m = key[0]
            if m not in models:
                continue
            f = fields[m]
            iso, iso_sd = isotropic_rho(f["d_head"], f["d_model"]), isotropic_sd(f["d_head"], f["d_model"])
            rho = np.asarray(src["rho"][idx], float)
            rho = rho[np.isfinite(rho)]
            ang = np.asarray(src["min_angle_deg"][idx], float)
            row = {"model": m, "scope": scope, "layer": key[1],
                   "layer_r": None if scope == "within" else key[2], "kind": key[-1],
                   "distance": None if scope == "within" else key[2] - key[1],
                   "n_pairs": int(rho.size), "mean": float(rho.mean()), "sd": float(rho.std(ddof=0)),
                   "mean_over_iso": float(rho.mean()) / iso, "below_iso": bool(rho.mean() < iso),
                   "sds_below_iso": (iso - float(rho.mean())) / iso_sd, "sd_over_random": float(rho.std(ddof=0)) / iso_sd,
                   "mean_min_angle": float(np.nanmean(ang)), "median_min_angle": float(np.nanmedian(ang)),
                   "min_angle": float(np.nanmin(ang)) if np.isfinite(ang).any() else float("nan"),
                   "max_rho": float(rho.max()) if rho.size else float("nan"),
                   "mean_weighted": None, "median_weighted": None, "max_weighted": None}
            if scope == "cross":
                w = np.asarray(src["weighted"][idx], float)
                row.update(mean_weighted=float(np.nanmean(w)), median_weighted=float(np.nanmedian(w)),
                           max_weighted=float(np.nanmax(w)))
            rows.append(row)
    rank_within_groups(rows, "sd", "sd_rank", ("model", "scope", "kind"))
    rank_within_groups(rows, "min_angle", "min_angle_rank", ("model", "scope", "kind"), smallest_first=True)
    last, ranked = defaultdict(int), Counter()  # each model's last layer; ranked rows per group
    for r in rows:
        if r["scope"] == "within":
            last[r["model"]] = max(last[r["model"]], r["layer"])
        ranked[(r["model"], r["scope"], r["kind"])] += r["min_angle_rank"] is not None
    for r in rows:
        n = ranked[(r["model"], r["scope"], r["kind"])]
        r["min_angle_low"] = None if r["min_angle_rank"] is None else r["min_angle_rank"] <= math.ceil(LOW_FRACTION * n)
        r["from_end"] = last[r["model"]] - r["layer"] if r["scope"] == "within" else None
    cols = [Column("model", "Model"), Column("scope", "Scope"), Column("kind", "Kind"), Column("layer", "Layer"),
            Column("layer_r", "Reader layer"), Column("distance", "Distance"), Column("n_pairs", "Pairs"),
            Column("mean", "Mean ρ", FOUR_PLACES), Column("sd", "SD", FOUR_PLACES), Column("mean_over_iso", "Mean / (d/D)", "{:.3f}"),
            Column("below_iso", "Mean < d/D"), Column("sds_below_iso", "(d/D − mean) / random SD", "{:.1f}"),
            Column("sd_over_random", "SD / random SD", TWO_PLACES), Column("sd_rank", "SD rank"),
            Column("mean_min_angle", "Mean pair min angle (°)", TWO_PLACES),
            Column("median_min_angle", "Median pair min angle (°)", TWO_PLACES),
            Column("min_angle", "Min angle (°)", TWO_PLACES), Column("min_angle_rank", "Min angle rank"),
            Column("min_angle_low", f"Min angle in the lowest {LOW_FRACTION:.0%}"),
            Column("from_end", "Layers after it"),
            Column("max_rho", "Max ρ", FOUR_PLACES),
            Column("mean_weighted", "Mean weighted", "{:.3f}"), Column("median_weighted", "Median weighted", "{:.3f}"),
            Column("max_weighted", "Max weighted", "{:.3f}")]
    return Table(columns=cols, rows=rows)


@table("pk_appendix_f_cross_distance", families=CROSS_WITH_NULLS, params=NULL_TYPES_PARAM)
def pk_appendix_f_cross_distance(data, fields, models, null_types) -> Table:
    """**PK paper, Appendix F (ρ by layer distance).** Per model, reading kind and distance Δ = reader − writer
    layer: layer pairs, the mean over them of their mean ρ (over d/D, whether below it, its distance from it), layer pairs with null
    samples, and those whose mean lies below / above every null sample, also as k/n, and whether every
    kind's mean lies within ±0.01 of d/D at this and every larger distance (null types: {{
    snakemake.params.null_types|join(', ') }})."""
    types = null_types
    oc = observed_cross(data.get("pk_cross", {}), fields)
    cmp = {(c["model"], c["kind"], c["layer"], c["layer_r"]): c
           for c in conditions(data, fields, types) if c["scope"] == "cross"}
    # (model, kind, distance) -> [(mean ρ, null comparison) per layer pair at that distance]
    pairs = [((m, k, lr - lw), (st["mean"], cmp.get((m, k, lw, lr), {}))) for (m, lw, lr, k), st in oc.items() if m in models]
    by_distance = {key: [item for _, item in members] for key, members in group_rows(pairs, lambda p: p[0]).items()}
    rows = []
    for (m, k, dist), items in sorted(by_distance.items(), key=lambda kv: kv[0]):
        f = fields[m]
        means = np.array([x[0] for x in items], float)
        below = [c.get("mean_below_all") for _, c in items if c.get("mean_below_all") is not None]
        above = [c.get("mean_above_all") for _, c in items if c.get("mean_above_all") is not None]
        rows.append({"model": m, "kind": k, "distance": dist, "layer_pairs": len(items),
                     "mean_rho": float(means.mean()), "mean_over_iso": float(means.mean()) / isotropic_rho(f["d_head"], f["d_model"]),
                     "below_iso": bool(means.mean() < isotropic_rho(f["d_head"], f["d_model"])),
                     "abs_dev_iso": abs(float(means.mean()) - isotropic_rho(f["d_head"], f["d_model"])),
                     "with_nulls": len(below), "mean_below_all": int(sum(below)), "mean_above_all": int(sum(above)),
                     "below_frac": f"{int(sum(below))}/{len(below)}", "above_frac": f"{int(sum(above))}/{len(above)}"})
    # in_band_onward: at this distance and every larger one, every kind lies within ISO_BAND of d/D
    worst_from = defaultdict(float)  # (model, distance) -> largest |mean - d/D| from that distance on
    for r in rows:
        for g in range(1, r["distance"] + 1):
            worst_from[(r["model"], g)] = max(worst_from[(r["model"], g)], r["abs_dev_iso"])
    for r in rows:
        r["in_band_onward"] = bool(worst_from[(r["model"], r["distance"])] < ISO_BAND)
    cols = [Column("model", "Model"), Column("kind", "Kind"), Column("distance", "Distance"),
            Column("layer_pairs", "Layer pairs"), Column("mean_rho", "Mean ρ", FOUR_PLACES),
            Column("mean_over_iso", "Mean / (d/D)", "{:.3f}"), Column("below_iso", "Mean < d/D"),
            Column("abs_dev_iso", "|Mean − d/D|", FOUR_PLACES), Column("with_nulls", "Pairs with null samples"),
            Column("mean_below_all", "Mean below all"), Column("mean_above_all", "Mean above all"),
            Column("below_frac", "Below all / with nulls"), Column("above_frac", "Above all / with nulls"),
            Column("in_band_onward", "All kinds within ±0.01 of d/D from here on")]
    return Table(columns=cols, rows=rows)
