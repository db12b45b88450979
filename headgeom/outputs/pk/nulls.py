"""The PK paper's comparisons with the null models: Table 4 (summary), Table 6 (minimum angles
against column-keeping nulls), Table 8 (across layers), every condition behind Figures 3 and 9, the
null samples per condition (§5.3, Appendix F), Figure 2 (ρ CCDF against the nulls and random
subspaces) with its cited counts, Figure 3 (r per condition), Figure 7 (quantiles) and Figure 8
(reading-space dispersion). The null types are the configured ``pk.nulls.types``: every null's
samples, or, where the paper compares with one kind of null, those of the configured types that are
of that kind (``NullModel.keeps_columns``: Table 6 and Figure 8; ``keeps_spectrum``: Table 8)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from headgeom.core.stats import ccdf_on_grid, median_of, percentile_band
from headgeom.methods.nulls import NULL_MODELS
from headgeom.methods.overlap import isotropic_rho, isotropic_sd
from headgeom.methods.pk_conditions import (CROSS_KEY, WITHIN_KEY, angle_against_samples, conditions, fig2_layer,
                                            null_groups, observed_cross, observed_within, random_layer_rho,
                                            random_reference)
from headgeom.outputs.formats import Column, Table, pyplot, step_ccdf
from headgeom.outputs.pk.common import (ALL_PK_FAMILIES, COMPARISONS, CROSS_WITH_NULLS, FOUR_PLACES, NULL_TYPES_PARAM,
                                        READING_KINDS, TWO_PLACES, WITHIN_WITH_NULLS, comparison_label, figure,
                                        finish_layer_panels, samples_text, table)


def _null_verdict(row: dict) -> tuple[str, str]:
    """The run summary's line for one comparison: how many of its conditions exceed all null samples."""
    return (f"null verdict, {row['comparison']}",
            f"{row['exceeds_all']} of {row['conditions']} conditions above all {row['samples']} samples")


@table("pk_table4_null_summary", families=ALL_PK_FAMILIES, params=NULL_TYPES_PARAM, headline_rows=_null_verdict)
def pk_table4_null_summary(data, fields, models, null_types) -> Table:
    """**PK paper, Table 4.** Dispersion of ρ against both null models (null types: {{
    snakemake.params.null_types|join(', ') }}; samples per null from ``pk.nulls``): conditions (layers
    or layer pairs), conditions whose SD exceeds every null sample, median r = SD / max null SD, and the
    median ratio of SD to each null's mean SD."""
    conds, types = conditions(data, fields, null_types), null_types
    rows = []
    for m in models:
        for scope, kind in COMPARISONS:
            cs = [c for c in conds if c["model"] == m and c["scope"] == scope and c["kind"] == kind]
            if not cs:
                continue
            ns = sorted({n for c in cs for n in c["n_samples"].values()})
            rows.append({"model": m, "comparison": comparison_label(scope, kind), "conditions": len(cs),
                         "samples": "/".join(str(n) for n in ns),
                         "exceeds_all": int(sum(bool(c["exceeds_all"]) for c in cs)),
                         "median_r": median_of(cs, "r"),
                         **{f"median_ratio_{t}": median_of(cs, f"ratio_mean_sd_{t}") for t in types}})
    return Table(columns=[Column("model", "Model"), Column("comparison", "Comparison"), Column("conditions", "Conditions"),
                          Column("samples", "Samples per null"), Column("exceeds_all", "Exceeds all"),
                          Column("median_r", "Median r", "{:.2f}"),
                          *(Column(f"median_ratio_{t}", f"Median SD / {NULL_MODELS[t].label} mean", "{:.1f}") for t in types)],
                          rows=rows)


@table("pk_table6_min_angle_vs_nulls", families=WITHIN_WITH_NULLS, params=NULL_TYPES_PARAM)
def pk_table6_min_angle_vs_nulls(data, fields, models, null_types) -> Table:
    """**PK paper, Table 6.** Layers whose observed minimum writing-space angle is not below every
    sample of a null that keeps the columns (column reassignment; of the null types {{
    snakemake.params.null_types|join(', ') }}): observed minimum angle and the minimum over that null's
    samples."""
    nulls = [t for t in null_types if NULL_MODELS[t].keeps_columns]
    conds = conditions(data, fields, null_types)
    rows = []
    for t in nulls:
        for c in conds:
            if c["scope"] == "within" and c["kind"] == "O" and c["model"] in models:
                null_min = c.get(f"null_min_angle_{t}", float("nan"))
                if np.isfinite(null_min) and not (c["obs_min_angle"] < null_min):
                    rows.append({"model": c["model"], "layer": c["layer"], "null": t, "obs_min_angle": c["obs_min_angle"],
                                 "null_min": null_min, "samples": (c.get("n_samples") or {}).get(t, "–")})
    label = " / ".join(NULL_MODELS[t].label for t in nulls) or "column-keeping null"
    null_col = [Column("null", "Null")] if len(nulls) > 1 else []
    return Table(columns=[Column("model", "Model"), Column("layer", "Layer"), *null_col,
                          Column("obs_min_angle", "Observed min angle (°)", "{:.3f}"),
                          Column("null_min", f"Min over {label} samples (°)", "{:.3f}"),
                          Column("samples", f"{label.capitalize()} samples")], rows=rows)


@table("pk_table8_cross_nulls", families=CROSS_WITH_NULLS, params=NULL_TYPES_PARAM)
def pk_table8_cross_nulls(data, fields, models, null_types) -> Table:
    """**PK paper, Table 8.** Writer-reader overlap across layers against the null models (null types:
    {{ snakemake.params.null_types|join(', ') }}), per reading kind: layer pairs, layer pairs whose SD
    exceeds all null samples, median SD / mean SD of each spectrum-keeping null (rotation), and layer
    pairs whose mean is below / above all null samples."""
    spectral = [t for t in null_types if NULL_MODELS[t].keeps_spectrum]
    conds = conditions(data, fields, null_types)
    rows = []
    for m in models:
        for kind in READING_KINDS:
            cs = [c for c in conds if c["model"] == m and c["scope"] == "cross" and c["kind"] == kind]
            if not cs:
                continue
            rows.append({"model": m, "kind": kind, "layer_pairs": len(cs),
                         "exceeds_all": int(sum(bool(c["exceeds_all"]) for c in cs)),
                         **{f"median_ratio_{t}": median_of(cs, f"ratio_mean_sd_{t}") for t in spectral},
                         "mean_below_all": int(sum(bool(c["mean_below_all"]) for c in cs)),
                         "mean_above_all": int(sum(bool(c["mean_above_all"]) for c in cs)),
                         "samples": samples_text(cs)})
    return Table(columns=[Column("model", "Model"), Column("kind", "Reading"), Column("layer_pairs", "Layer pairs"),
                          Column("exceeds_all", "SD exceeds all nulls"),
                          *(Column(f"median_ratio_{t}", f"Median SD / {NULL_MODELS[t].label} mean", "{:.1f}") for t in spectral),
                          Column("mean_below_all", "Mean below all"), Column("mean_above_all", "Mean above all"),
                          Column("samples", "Samples per null")], rows=rows)


@table("pk_fig3_fig9_conditions", families=ALL_PK_FAMILIES, params=NULL_TYPES_PARAM)
def pk_fig3_fig9_conditions(data, fields, models, null_types) -> Table:
    """**PK paper, every condition (Figures 3 and 9 data).** One row per layer (within-layer pairs of each
    kind) and per writer → reader layer pair (across layers, per reading kind): pairs, mean, SD, median,
    95th percentile and maximum of ρ, minimum angle, shares above 2 d/D and below d/(2D), r = SD /
    largest null SD, the empirical p of the SD against each null ((k+1)/(n+1)), and whether the mean
    lies below / above every null sample (null types: {{ snakemake.params.null_types|join(', ') }})."""
    conds, types = conditions(data, fields, null_types), null_types
    ow = observed_within(data.get("pk_within", {}), fields)
    oc = observed_cross(data.get("pk_cross", {}), fields)
    cmp = {(c["model"], c["scope"], c["kind"], c["layer"], c["layer_r"]): c for c in conds}
    rows = []
    for src, scope in ((ow, "within"), (oc, "cross")):
        for key, st in sorted(src.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
            if key[0] not in models:
                continue
            m, l = key[0], key[1]
            lr, kind = (None, key[2]) if scope == "within" else (key[2], key[3])
            c = cmp.get((m, scope, kind, l, lr), {})
            rows.append({"model": m, "scope": scope, "kind": kind, "layer": l, "layer_r": lr,
                         **{k: st[k] for k in ("n_pairs", "mean", "sd", "median", "p95", "max", "min_angle_deg",
                                                "share_above_2iso", "share_below_half_iso")},
                         "r": c.get("r"), "n_samples": samples_text([c]) if c else "–",
                         **{f"p_sd_{t}": c.get(f"p_sd_{t}") for t in types},
                         "mean_below_all": c.get("mean_below_all"), "mean_above_all": c.get("mean_above_all")})
    cols = [Column("model", "Model"), Column("scope", "Scope"), Column("kind", "Kind"), Column("layer", "Layer"),
            Column("layer_r", "Reader layer"), Column("n_pairs", "Pairs"), Column("mean", "Mean ρ", "{:.4f}"),
            Column("sd", "SD", "{:.4f}"), Column("median", "Median", "{:.4f}"), Column("p95", "p95", "{:.4f}"),
            Column("max", "Max", "{:.4f}"), Column("min_angle_deg", "Min angle (°)", "{:.2f}"),
            Column("share_above_2iso", "Share > 2 d/D", "{:.3f}"), Column("share_below_half_iso", "Share < d/(2D)", "{:.3f}"),
            Column("r", "r", "{:.2f}"), Column("n_samples", "n per null"),
            *(Column(f"p_sd_{t}", f"p ({t})", "{:.3f}") for t in types),
            Column("mean_below_all", "Mean below all"),
            Column("mean_above_all", "Mean above all")]
    return Table(columns=cols, rows=rows)



@figure("pk_fig2_rho_ccdf_nulls", families=WITHIN_WITH_NULLS, params=NULL_TYPES_PARAM | {"random_samples": "figures/pk_fig2_random_samples"})
def pk_fig2_rho_ccdf_nulls(data, fields, models, null_types, random_samples: int = 30):
    """**PK paper, Figure 2.** Fraction of writing-space pairs with overlap ≥ ρ in the layer at the upper
    median of per-layer dispersion: observed (black staircase) against each null model and random
    subspaces ({{ snakemake.params.random_samples }} samples of the layer's shape;
    ``figures.pk_fig2_random_samples``): the curve of each sample, their median (line) and 5-95
    percentile band; dotted at d/D. Cited counts: table ``pk_fig2_counts``."""
    types, random_samples = null_types, int(random_samples)
    plt = pyplot()
    ow = observed_within(data.get("pk_within", {}), fields)
    nw = null_groups(data.get("pk_null_within", {}), WITHIN_KEY)
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.6), squeeze=False)
    picks = {}
    for ax, m in zip(axes[0], models):
        layer = fig2_layer(ow, m)
        picks[m] = layer
        rho = ow[(m, layer, "O")]["rho"]
        f = fields[m]
        bands = [(null, nw.get((m, layer, "O", null), {}).get("rho", []), f"C{i}") for i, null in enumerate(types)]
        if random_samples:
            rand = [random_layer_rho(m, layer, k, f["n_heads"], f["d_model"], f["d_head"]) for k in range(random_samples)]
            bands.append(("random subspaces", rand, "C7"))
        top = max([rho.max()] + [np.max(s) for _, ss, _ in bands for s in ss] + [1e-9])
        grid = np.linspace(0, top * 1.02, 600)
        for label, samples, color in bands:
            if not len(samples):
                continue
            lo, med, hi = percentile_band(ccdf_on_grid(samples, grid), (5, 50, 95), axis=0)
            ax.fill_between(grid, lo, hi, color=color, alpha=0.25, lw=0)
            ax.plot(grid, med, color=color, lw=1.2, label=f"{label} (median, 5–95%; n = {len(samples)})")
        step_ccdf(ax, rho, color="k", lw=1.4, label="observed")
        ax.axvline(f["d_head"] / f["d_model"], ls=":", color="gray")
        ax.set_yscale("log")
        ax.set_ylim(0.5 / max(rho.size, 1), 1.5)
        ax.set_title(f"{m}, layer {layer} ({rho.size} pairs)", fontsize=9)
        ax.set_xlabel("ρ (writing-space pairs)")
        ax.legend(fontsize=6, loc="lower left")
    axes[0][0].set_ylabel("fraction of pairs with overlap ≥ ρ")
    fig.tight_layout()
    return fig, {"layers": picks, "random_samples": int(random_samples)}


@table("pk_fig2_counts", families=WITHIN_WITH_NULLS, params=NULL_TYPES_PARAM | {"reference_draws": "figures/pk_random_reference_draws"})
def pk_fig2_counts(data, fields, models, null_types, reference_draws: int = 100) -> Table:
    """**PK paper, Figure 2 and §5.3 counts.** Per model, the Figure 2 layer (upper median of per-layer
    dispersion): pairs, median, 95th percentile and maximum of ρ, pairs below every value and above
    every value of each null's samples; over the layers with null samples, those whose median lies below
    every null sample's median and whose 95th percentile lies above every null sample's; and the sampled
    random-subspace reference, mean ± SD of ρ over {{ snakemake.params.reference_draws }} random pairs
    (``figures.pk_random_reference_draws``), beside d/D and the analytic SD."""
    types, reference_draws = null_types, int(reference_draws)
    ow = observed_within(data.get("pk_within", {}), fields)
    nw = null_groups(data.get("pk_null_within", {}), WITHIN_KEY)
    rows = []
    for m in models:
        if not any(k[0] == m and k[2] == "O" for k in ow):
            continue
        f = fields[m]
        layer = fig2_layer(ow, m)
        st = ow[(m, layer, "O")]
        rho = st["rho"]
        row = {"model": m, "layer": layer, "pairs": int(rho.size), "median": st["median"], "p95": st["p95"],
               "max": st["max"]}
        for t in types:
            samples = nw.get((m, layer, "O", t), {}).get("rho", [])
            vals = np.concatenate([np.asarray(s, float) for s in samples]) if len(samples) else np.array([])
            row[f"n_{t}"] = len(samples)
            row[f"below_all_{t}"] = int(np.sum(rho < vals.min())) if vals.size else None
            row[f"above_all_{t}"] = int(np.sum(rho > vals.max())) if vals.size else None
        med_below = p95_above = n_lay = 0
        for (mm, l, k), s in ow.items():
            if mm != m or k != "O":
                continue
            meds = np.concatenate([np.asarray(nw.get((m, l, "O", t), {}).get("median", []), float) for t in types])
            p95s = np.concatenate([np.asarray(nw.get((m, l, "O", t), {}).get("p95", []), float) for t in types])
            if meds.size == 0:
                continue
            n_lay += 1
            med_below += int(s["median"] < meds.min())
            p95_above += int(s["p95"] > p95s.max())
        row["layers_nulls"] = n_lay
        row["layers_median_below"] = med_below if n_lay else None
        row["layers_p95_above"] = p95_above if n_lay else None
        ref = random_reference(m, f["d_model"], f["d_head"], reference_draws) if reference_draws else np.array([])
        row.update(ref_draws=int(reference_draws), ref_mean=float(ref.mean()) if ref.size else float("nan"),
                   ref_sd=float(ref.std(ddof=1)) if ref.size > 1 else float("nan"),
                   iso=isotropic_rho(f["d_head"], f["d_model"]), iso_sd=isotropic_sd(f["d_head"], f["d_model"]))
        rows.append(row)
    cols = [Column("model", "Model"), Column("layer", "Figure 2 layer"), Column("pairs", "Pairs"),
            Column("median", "Median ρ", "{:.3f}"), Column("p95", "p95", "{:.3f}"), Column("max", "Max", "{:.3f}")]
    for t in types:
        lab = NULL_MODELS[t].label
        cols += [Column(f"n_{t}", f"{lab} samples"), Column(f"below_all_{t}", f"Pairs below all {lab} values"),
                 Column(f"above_all_{t}", f"Pairs above all {lab} values")]
    cols += [Column("layers_nulls", "Layers with null samples"),
             Column("layers_median_below", "Layers: median below every null sample's"),
             Column("layers_p95_above", "Layers: p95 above every null sample's"),
             Column("ref_draws", "Random draws"), Column("ref_mean", "Random ρ mean", "{:.4f}"),
             Column("ref_sd", "Random ρ SD", "{:.5f}"), Column("iso", "d/D", "{:.4f}"),
             Column("iso_sd", "Analytic SD", "{:.5f}")]
    return Table(columns=cols, rows=rows,
                 notes="Below / above all: observed pairs under the smallest / over the largest ρ of that null's "
                       "samples pooled. Layer counts pool both nulls' samples. Random: ρ of independent pairs of "
                       "uniformly random d-dimensional subspaces of R^D (mean ± SD, ddof 1).")


def n_key(c: dict) -> str:
    """A condition's null sample counts, e.g. 'n = 30' or 'n = 3/30' (r depends on n)."""
    ns = sorted({int(v) for v in c["n_samples"].values() if v})
    return "n = " + "/".join(str(n) for n in ns) if ns else "n = 0"


MAX_LABELLED = 3  # Figure 3 labels the points below r = 1 of a column when it has at most this many


@figure("pk_fig3_r", families=ALL_PK_FAMILIES, params=NULL_TYPES_PARAM)
def pk_fig3_r(data, fields, models, null_types):
    """**PK paper, Figure 3.** r = observed SD / largest null SD for every within-layer and cross-layer
    comparison (log scale); bars at the median, numbers count r > 1; dashed at r = 1."""
    return draw_fig3(conditions(data, fields, null_types), models)


def draw_fig3(conds, models):
    """r per condition, one column per (model, comparison). Conditions whose null sample count
    differs from the most common one get their own panel (r = SD / max null SD depends on n; PK
    Figure 3 shows Qwen3-235B layer 46, n = 3, apart); points below r = 1 are triangles labelled
    with their condition and r."""
    plt = pyplot()
    ok = [c for c in conds if c["model"] in models and np.isfinite(c["r"]) and c["r"] > 0]
    counts = Counter(n_key(c) for c in ok)
    groups = [k for k, _ in counts.most_common()] or ["n = 0"]
    ncols = {g: sum(1 for m in models for sc, kd in COMPARISONS
                    if any(c["model"] == m and c["scope"] == sc and c["kind"] == kd and n_key(c) == g for c in ok))
             for g in groups}
    widths = [max(ncols[g], 1) for g in groups]
    fig, axes = plt.subplots(1, len(groups), figsize=(max(6.0, 0.55 * sum(widths) + 1.5 * len(groups)), 4.2),
                             squeeze=False, gridspec_kw={"width_ratios": widths})
    below = []
    for ax, g in zip(axes[0], groups):
        labels, x = [], 0
        for m in models:
            for scope, kind in COMPARISONS:
                cs = [c for c in ok if c["model"] == m and c["scope"] == scope and c["kind"] == kind and n_key(c) == g]
                if not cs:
                    continue
                r = np.array([c["r"] for c in cs], float)
                jitter = (np.random.default_rng(x).random(r.size) - 0.5) * 0.4
                hi = r >= 1
                ax.scatter((x + jitter)[hi], r[hi], s=6, alpha=0.6, color=f"C{x % 10}")
                few = int(np.sum(~hi)) <= MAX_LABELLED
                for c, xx, rr in zip(np.array(cs, dtype=object)[~hi], (x + jitter)[~hi], r[~hi]):
                    ax.scatter([xx], [rr], marker="v", s=36, color="C3", edgecolor="k", lw=0.5, zorder=3)
                    where = f"layer {c['layer']}" if c["scope"] == "within" else f"{c['layer']}→{c['layer_r']}"
                    below.append((m, scope, kind, where, rr))
                    if few:
                        ax.annotate(f"{where}: r = {rr:.3f}", (xx, rr), xytext=(4, -2), textcoords="offset points",
                                    fontsize=6, color="C3")
                if not hi.all() and not few:
                    ax.text(x, r.min() / 1.35, f"{int(np.sum(~hi))} < 1", ha="center", va="top", fontsize=6, color="C3")
                ax.hlines(median_of(cs, "r"), x - 0.3, x + 0.3, color="k")
                ax.text(x, r.max() * 1.15, str(int(np.sum(r > 1))), ha="center", fontsize=6)
                tag = ("W" + ("" if kind == "O" else kind)) if scope == "within" else f"W→{kind}"
                labels.append(f"{m}\n{tag}")
                x += 1
        ax.axhline(1, ls="--", color="gray")
        ax.set_yscale("log")
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, fontsize=6, rotation=45, ha="right", rotation_mode="anchor")
        ax.set_xlim(-0.7, max(len(labels), 1) - 0.3)
        ax.set_title(f"{g} samples per null" + (" (shown apart)" if g != groups[0] else ""), fontsize=8)
    axes[0][0].set_ylabel("r = SD / max null SD")
    fig.suptitle("Dispersion against both null models (numbers: conditions with r > 1; triangles: r < 1)", fontsize=9)
    fig.tight_layout()
    return fig, {"sample_groups": groups,
                 "below_one": [{"model": m, "scope": sc, "kind": k, "where": w, "r": float(r)} for m, sc, k, w, r in below]}


@figure("pk_fig7_quantiles", families=WITHIN_WITH_NULLS, params=NULL_TYPES_PARAM)
def pk_fig7_quantiles(data, fields, models, null_types):
    """**PK paper, Figure 7.** Per-layer median and 95th percentile of writing-space ρ against the same
    quantiles' 5-95 percentile range over each null's samples."""
    types = null_types
    plt = pyplot()
    ow = observed_within(data.get("pk_within", {}), fields)
    nw = null_groups(data.get("pk_null_within", {}), WITHIN_KEY)
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.4), squeeze=False)
    for ax, m in zip(axes[0], models):
        ls = sorted(l for (mm, l, k) in ow if mm == m and k == "O")
        ax.plot(ls, [ow[(m, l, "O")]["median"] for l in ls], "ko", ms=3, label="median")
        ax.plot(ls, [ow[(m, l, "O")]["p95"] for l in ls], "k^", ms=3, label="p95")
        for i, null in enumerate(types):
            for q in ("median", "p95"):
                bands = [percentile_band(nw.get((m, l, "O", null), {}).get(q, []), (5, 95)) for l in ls]
                lo, hi = np.reshape(bands, (len(ls), 2)).T
                ax.vlines(np.asarray(ls) + (0.15 if i else -0.15), lo, hi, color=f"C{i}", lw=2, alpha=0.6,
                          label=f"{null} 5–95%" if q == "median" else None)
        f = fields[m]
        ax.axhline(isotropic_rho(f["d_head"], f["d_model"]), ls=":", color="gray")
        ax.set_title(m, fontsize=9)
        ax.set_xlabel("layer")
    return finish_layer_panels(fig, axes[0][0], "ρ quantile (writing pairs)")


@figure("pk_fig8_reading_sd", families=WITHIN_WITH_NULLS, params=NULL_TYPES_PARAM)
def pk_fig8_reading_sd(data, fields, models, null_types):
    """**PK paper, Figure 8.** Dispersion of Q and K reading-space overlap per layer against the
    largest sample of each null that keeps the columns (column reassignment; of the null types {{
    snakemake.params.null_types|join(', ') }})."""
    plt = pyplot()
    ow = observed_within(data.get("pk_within", {}), fields)
    nw = null_groups(data.get("pk_null_within", {}), WITHIN_KEY)
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.4), squeeze=False)
    for ax, m in zip(axes[0], models):
        for i, kind in enumerate(("Q", "K")):
            ls = sorted(l for (mm, l, k) in ow if mm == m and k == kind)
            if not ls:
                continue
            ax.plot(ls, [ow[(m, l, kind)]["sd"] for l in ls], "o-", ms=3, color=f"C{i}", label=f"{kind} observed")
            for t in (t for t in null_types if NULL_MODELS[t].keeps_columns):
                mx = [max(nw.get((m, l, kind, t), {}).get("sd", [np.nan])) for l in ls]
                ax.plot(ls, mx, "x--", ms=3, color=f"C{i}", label=f"{kind} max {NULL_MODELS[t].label}")
        ax.set_yscale("log")
        ax.set_title(m, fontsize=9)
        ax.set_xlabel("layer")
    return finish_layer_panels(fig, axes[0][0], "SD of ρ (reading pairs)")


@table("pk_sec5_3_null_samples", families=ALL_PK_FAMILIES, params=NULL_TYPES_PARAM)
def pk_sec5_3_null_samples(data, fields, models, null_types) -> Table:
    """**PK paper, §5.3 and Appendix F (the null samples).** One row per condition (a layer's within-layer
    pairs of one kind, or a writer → reader layer pair of one reading kind) and null model (null types:
    {{ snakemake.params.null_types|join(', ') }}): samples, the observed SD beside the smallest, mean
    and largest sample SD (whether it exceeds every sample) and its ratio to the mean sample SD, the
    observed mean ρ beside the samples' means, and the observed minimum angle beside the samples'
    minimum angles (whether it lies below / above every sample)."""
    types = null_types
    rows = []
    for scope, fam, null_key, obs in (
            ("within", "pk_null_within", WITHIN_KEY, observed_within(data.get("pk_within", {}), fields)),
            ("cross", "pk_null_cross", CROSS_KEY, observed_cross(data.get("pk_cross", {}), fields))):
        ng = null_groups(data.get(fam, {}), null_key)
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
                    **angle_against_samples(st["min_angle_deg"], ang),
                })
    cols = [Column("model", "Model"), Column("scope", "Scope"), Column("kind", "Kind"), Column("layer", "Layer"),
            Column("layer_r", "Reader layer"), Column("null", "Null"), Column("n_samples", "Samples"),
            Column("obs_sd", "SD", FOUR_PLACES), Column("sd_min", "Null SD min", FOUR_PLACES), Column("sd_mean", "Null SD mean", FOUR_PLACES),
            Column("sd_max", "Null SD max", FOUR_PLACES), Column("sd_above_all", "SD above all"),
            Column("sd_over_null_mean_sd", "SD / null mean SD", TWO_PLACES),
            Column("obs_mean", "Mean ρ", FOUR_PLACES), Column("mean_min", "Null mean min", FOUR_PLACES),
            Column("mean_mean", "Null mean mean", FOUR_PLACES), Column("mean_max", "Null mean max", FOUR_PLACES),
            Column("obs_min_angle", "Min angle (°)", TWO_PLACES), Column("min_angle_min", "Null min angle min (°)", TWO_PLACES),
            Column("min_angle_max", "Null min angle max (°)", TWO_PLACES), Column("angle_below_all", "Angle below all"),
            Column("angle_above_all", "Angle above all")]
    return Table(columns=cols, rows=rows)
