"""The PK paper's within-layer outputs: Table 5 (writing spaces), Table 1 (minimum angles, within and
across layers), Table 3 (models and isotropic values), Table 7 (reading spaces against the nulls),
the §5.1 ranks and direct sums, the §5.3 spectrum of W_O, Figure 6 (depth profile) and one layer's
ρ CCDF."""

from __future__ import annotations

import numpy as np

from headgeom.core.groupby import group_rows
from headgeom.methods.overlap import isotropic_rho, isotropic_sd
from headgeom.methods.pk_conditions import conditions, observed_within
from headgeom.core.stats import finite_quantile, finite_stat
from headgeom.outputs.formats import Column, Table, pyplot, step_ccdf
from headgeom.outputs.pk.common import (COMPARISONS, NULL_TYPES_PARAM, READING_KINDS, WITHIN_WITH_NULLS,
                                        comparison_label, figure, integer_layers, range_text, samples_text, table)


@table("pk_table5_writing", families=("pk_within",), params={"small_angle_deg": "tables/small_angle_deg"},
       headlines=(("mean_rho_median", "writing spaces: median over layers of mean pair ρ"),
                  ("iso", "d/D (mean ρ of isotropic subspaces)")))
def pk_table5_writing(pk_within: dict, models: list[str], fields: dict[str, dict], small_angle_deg: float = 10.0) -> Table:
    """**PK paper, Table 5.** Writing spaces within one layer: per model D, d, heads, layers, isotropic value
    d/D, the per-layer mean ρ of writing-space pairs (layer median, min, max), its dispersion SD over
    pairs (median, min, max), the random-subspace SD, and the layers holding a pair whose minimum
    principal angle is under {{ snakemake.params.small_angle_deg }}° (``tables.small_angle_deg``)."""
    cols = pk_within
    rows = []
    for m in models:
        f = fields[m]
        sel = (cols["model"] == m) & (cols["kind"] == "O")
        layers = np.unique(cols["layer"][sel])
        means, sds, small = [], [], 0
        for l in layers:
            s = sel & (cols["layer"] == l)
            rho = np.asarray(cols["rho"][s], dtype=float)
            means.append(rho.mean())
            sds.append(rho.std(ddof=0))
            small += int(np.any(np.asarray(cols["min_angle_deg"][s], dtype=float) < small_angle_deg))
        D, d = f["d_model"], f["d_head"]
        rows.append({
            "model": m, "D": D, "d": d, "heads": f["n_heads"], "layers": f["n_layers"],
            "iso": isotropic_rho(d, D),
            "mean_rho_median": finite_stat(np.median, means), "mean_rho_min": finite_stat(np.min, means),
            "mean_rho_max": finite_stat(np.max, means),
            "sd_median": finite_stat(np.median, sds), "sd_min": finite_stat(np.min, sds), "sd_max": finite_stat(np.max, sds),
            "random_sd": isotropic_sd(d, D),
            "layers_small_angle": small,
        })
    return Table(
        columns=[
            Column("model", "Model"), Column("D", "D"), Column("d", "d"), Column("heads", "Heads"), Column("layers", "Layers"),
            Column("iso", "Isotropic d/D", "{:.4f}"),
            Column("mean_rho_median", "Mean ρ (median)", "{:.3f}"), Column("mean_rho_min", "min", "{:.3f}"),
            Column("mean_rho_max", "max", "{:.3f}"),
            Column("sd_median", "SD (median)", "{:.3f}"), Column("sd_min", "min", "{:.3f}"), Column("sd_max", "max", "{:.3f}"),
            Column("random_sd", "Random-subspace SD", "{:.4f}"),
            Column("layers_small_angle", f"Layers with a pair < {small_angle_deg:g}°"),
        ],
        rows=rows,
    )



@table("pk_table1_min_angles", families=("pk_within", "pk_cross"))
def pk_table1_min_angles(data, fields, models) -> Table:
    """**PK paper, Table 1.** Minimum principal angle over head-subspace pairs, within a layer (O-O, Q-Q, K-K,
    V-V) and across layers (writer O of layer l against every Q/K/V reader of a later layer): pairs,
    minimum angle (and its sine and cosine), median pair angle and pairs under 1°."""
    rows = []
    pk, cross = data.get("pk_within", {}), data.get("pk_cross", {})
    for m in models:
        for scope, kind in COMPARISONS:
            src = pk if scope == "within" else cross
            if not src:
                continue
            sel = (src["model"] == m) & (src["kind"] == kind)
            ang = np.asarray(src["min_angle_deg"][sel], float)
            if ang.size == 0:
                continue
            lo = float(np.nanmin(ang))
            rows.append({"model": m, "comparison": comparison_label(scope, kind), "pairs": int(sel.sum()),
                         "min_angle": lo, "median_angle": float(np.nanmedian(ang)),
                         "under_1deg": int(np.sum(ang < 1.0)),
                         "sin_min_angle": float(np.sin(np.deg2rad(lo))), "cos_min_angle": float(np.cos(np.deg2rad(lo)))})
    return Table(columns=[Column("model", "Model"), Column("comparison", "Comparison"), Column("pairs", "Pairs"),
                          Column("min_angle", "Min angle (°)", "{:.2f}"), Column("median_angle", "Median pair angle (°)", "{:.1f}"),
                          Column("under_1deg", "Pairs < 1°"), Column("sin_min_angle", "sin min angle", "{:.4f}"),
                          Column("cos_min_angle", "cos min angle", "{:.4f}")], rows=rows)


@table("pk_table3_models")
def pk_table3_models(fields, models) -> Table:
    """**PK paper, Table 3.** Models and isotropic values: D, d, query / key-value heads, layers, writing-space
    pairs per layer, the sum of the query heads' widths H d, d/D and the random-subspace SD (from the
    fetched manifests)."""
    rows = []
    for m in models:
        f = fields[m]
        H = f["n_heads"]
        rows.append({"model": m, "D": f["d_model"], "d": f["d_head"], "heads": f"{H} / {f['n_kv_heads']}",
                     "layers": f["n_layers"], "writer_pairs": H * (H - 1) // 2, "width": H * f["d_head"],
                     "iso": isotropic_rho(f["d_head"], f["d_model"]), "random_sd": isotropic_sd(f["d_head"], f["d_model"])})
    return Table(columns=[Column("model", "Model"), Column("D", "D"), Column("d", "d"), Column("heads", "Heads (q / kv)"),
                          Column("layers", "Layers"), Column("writer_pairs", "Writer pairs per layer"), Column("width", "H d"),
                          Column("iso", "Isotropic d/D", "{:.4f}"), Column("random_sd", "Random SD", "{:.4f}")], rows=rows)


@table("pk_table7_reading_within", families=WITHIN_WITH_NULLS, params=NULL_TYPES_PARAM)
def pk_table7_reading_within(data, fields, models, null_types) -> Table:
    """**PK paper, Table 7.** Overlap between same-kind reading spaces within a layer: pairs per layer, layer
    range of mean ρ, layers whose mean is below all null samples, range of the SD, layers whose SD is
    above all null samples, and the minimum angle over all pairs."""
    conds = conditions(data, fields, null_types)
    ow = observed_within(data.get("pk_within", {}), fields)
    rows = []
    for m in models:
        for kind in READING_KINDS:
            st = {l: s for (mm, l, k), s in ow.items() if mm == m and k == kind}
            if not st:
                continue
            cs = [c for c in conds if c["model"] == m and c["scope"] == "within" and c["kind"] == kind]
            rows.append({"model": m, "kind": kind, "pairs": next(iter(st.values()))["n_pairs"],
                         "mean_range": range_text([s["mean"] for s in st.values()]),
                         "mean_below_all": f"{sum(bool(c['mean_below_all']) for c in cs)} / {len(cs)}" if cs else "–",
                         "sd_range": range_text([s["sd"] for s in st.values()]),
                         "sd_above_all": f"{sum(bool(c['exceeds_all']) for c in cs)} / {len(cs)}" if cs else "–",
                         "samples": samples_text(cs),
                         "min_angle": float(np.nanmin([s["min_angle_deg"] for s in st.values()]))})
    return Table(columns=[Column("model", "Model"), Column("kind", "Reading"), Column("pairs", "Pairs per layer"),
                          Column("mean_range", "Mean ρ (layer range)"), Column("mean_below_all", "Layers mean below all nulls"),
                          Column("sd_range", "SD (range)"), Column("sd_above_all", "Layers SD above all nulls"),
                          Column("samples", "Samples per null"), Column("min_angle", "Min angle (°)", "{:.2f}")], rows=rows)


@table("pk_sec5_1_ranks", families=("pk_within",))
def pk_sec5_1_ranks(provs: dict, models) -> Table:
    """**PK paper, §5.1 setup (ranks and direct sums).** Numerical ranks of the head spaces at relative
    tolerance ``rank_rtol`` (smallest and largest head rank, rank of the layer's sum), the direct-sum
    defect Σ_i rank − rank of the sum against the defect forced by dimension, max(0, H d − D), layers
    above the forced defect, and what was folded into the reading spaces."""
    # ranks and defects are in the pk_within shards' provenance: (provenance, kind, layer facts) per layer
    facts = [(p["provenance"], kind, f) for p in provs["pk_within"] for kind, f in p["provenance"].get("layer_facts", {}).items()]
    by_space = group_rows(facts, lambda item: (item[0]["model"], item[1]))
    rows = []
    for m in models:
        for kind in ("O", "Q", "K", "V"):
            layers = by_space.get((m, kind))
            if not layers:
                continue
            ranks = [r for _, _, f in layers for r in f["ranks"]]
            defect = [f["direct_sum_defect"] for _, _, f in layers]
            forced = [f["expected_defect"] for _, _, f in layers]
            folded = {prov.get("folded", "") if kind != "O" else "–" for prov, _, _ in layers}
            rows.append({"model": m, "kind": kind, "rank_min": min(ranks), "rank_max": max(ranks),
                         "layer_rank": range_text([f["layer_rank"] for _, _, f in layers], "{:.0f}"),
                         "defect_max": max(defect), "expected": max(forced),
                         "layers_excess": int(sum(d - e > 0 for d, e in zip(defect, forced))),
                         "folded": "; ".join(sorted(folded))})
    return Table(columns=[Column("model", "Model"), Column("kind", "Space"), Column("rank_min", "Head rank min"), Column("rank_max", "max"),
                          Column("layer_rank", "Rank of the sum (layers)"), Column("defect_max", "Max defect"),
                          Column("expected", "Forced defect"), Column("layers_excess", "Layers above forced"),
                          Column("folded", "Folded into reading spaces")], rows=rows)


@table("pk_sec5_3_wo_spectrum", families=("pk_within",))
def pk_sec5_3_wo_spectrum(provs: dict, models) -> Table:
    """**PK paper, §5.3 (singular values of W_O per layer).** The singular values of each layer's
    output projection W_O^l = [W_O^1 … W_O^H] (D x H d), from the pk_within shards' layer facts: how many,
    the three largest, the median (the bulk), the 10th and 90th percentiles, and the largest over the
    median."""
    rows = []
    for p in provs["pk_within"]:
        prov = p["provenance"]
        sv = (prov.get("layer_facts", {}).get("O") or {}).get("singular_values")
        if prov["model"] not in models or sv is None:
            continue
        sv = np.sort(np.asarray(sv, float))[::-1]
        top = [float(sv[k]) if sv.size > k else None for k in range(3)]
        med = float(np.median(sv)) if sv.size else float("nan")
        rows.append({"model": prov["model"], "layer": int(prov["layer"]), "n": int(sv.size),
                     "s1": top[0], "s2": top[1], "s3": top[2], "median": med,
                     "p10": finite_quantile(sv, 0.10), "p90": finite_quantile(sv, 0.90),
                     "s1_over_median": top[0] / med if top[0] is not None and med > 0 else None})
    rows.sort(key=lambda r: (models.index(r["model"]), r["layer"]))
    return Table(columns=[Column("model", "Model"), Column("layer", "Layer"), Column("n", "Singular values"),
                          Column("s1", "s1", "{:.3f}"), Column("s2", "s2", "{:.3f}"), Column("s3", "s3", "{:.3f}"),
                          Column("median", "Median (bulk)", "{:.3f}"), Column("p10", "p10", "{:.3f}"),
                          Column("p90", "p90", "{:.3f}"), Column("s1_over_median", "s1 / median", "{:.2f}")], rows=rows)


@figure("pk_fig6_depth", families=("pk_within",))
def pk_fig6_depth(data, fields, models):
    """**PK paper, Figure 6.** Depth profile of the mean (top) and dispersion (bottom) of writing-space ρ;
    dotted: isotropic value and random-subspace SD."""
    plt = pyplot()
    ow = observed_within(data.get("pk_within", {}), fields)
    fig, axes = plt.subplots(2, len(models), figsize=(4 * len(models), 5), squeeze=False)
    for j, m in enumerate(models):
        f = fields[m]
        ls = sorted(l for (mm, l, k) in ow if mm == m and k == "O")
        axes[0][j].plot(ls, [ow[(m, l, "O")]["mean"] for l in ls], "o-", ms=3)
        axes[0][j].axhline(isotropic_rho(f["d_head"], f["d_model"]), ls=":", color="gray")
        axes[0][j].set_title(m, fontsize=9)
        axes[1][j].plot(ls, [ow[(m, l, "O")]["sd"] for l in ls], "o-", ms=3, color="C1")
        axes[1][j].axhline(isotropic_sd(f["d_head"], f["d_model"]), ls=":", color="gray")
        axes[1][j].set_yscale("log")
        axes[1][j].set_xlabel("layer")
    axes[0][0].set_ylabel("mean ρ (writing)")
    axes[1][0].set_ylabel("SD of ρ")
    integer_layers(fig)
    fig.tight_layout()
    return fig, {}


def pick_layer(spec, n_layers: int, where: str = "figures.pk_rho_layer") -> int:
    """'middle' -> n_layers // 2; an int selects that layer (negative counts from the end, -1 the
    last). An index outside the model is a ConfigError naming ``where``, never clamped or wrapped."""
    from headgeom.core.errors import ConfigError

    if spec == "middle":
        return n_layers // 2
    layer = int(spec)
    if not -n_layers <= layer < n_layers:
        raise ConfigError(f"config: {where}: layer {layer} is outside the model "
                          f"(layers 0..{n_layers - 1}, or -{n_layers}..-1 from the end)")
    return layer % n_layers


@figure("pk_fig_rho_ccdf_layer", families=("pk_within",), params={"layer": "figures/pk_rho_layer", "kind": "figures/pk_rho_kind"})
def pk_fig_rho_ccdf_layer(pk_within: dict, fields: dict[str, dict], models: list[str], layer="middle", kind: str = "O"):
    """**PK paper.** CCDF of ρ over the {{ snakemake.params.kind }}-{{ snakemake.params.kind }} pairs of one
    layer per model (``figures.pk_rho_layer`` = {{ snakemake.params.layer }}); dotted at d/D."""
    cols, picks = pk_within, {m: pick_layer(layer, fields[m]["n_layers"]) for m in models}
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for i, (m, layer) in enumerate(picks.items()):
        sel = (cols["model"] == m) & (cols["layer"] == layer) & (cols["kind"] == kind)
        c = f"C{i}"
        step_ccdf(ax, cols["rho"][sel], color=c, label=f"{m} layer {layer}")
        f = fields[m]
        ax.axvline(f["d_head"] / f["d_model"], color=c, ls=":", lw=1)
    ax.set_xlabel(f"ρ ({kind}-{kind} pairs)")
    ax.set_ylabel("fraction of pairs with ρ ≥ x")
    ax.set_title("ρ CCDF of one layer; dotted: isotropic d/D")
    ax.legend(fontsize=7)
    return fig, {"layers": picks}
