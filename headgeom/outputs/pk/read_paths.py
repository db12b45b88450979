"""The PK paper's read paths on real text (§5.4, the activation stage's ``activation_read_paths``):
the §5.4 table, Figure 4 (projected energy share against ρ) and Figure 5 (Spearman per layer pair)."""

from __future__ import annotations

import numpy as np

from headgeom.core.stats import finite_median, percentile_band, spearman
from headgeom.methods.read_paths import layer_pair_spearman, model_kind_rows, positive_share_ratio, read_path_summary
from headgeom.outputs.formats import Column, Table, pyplot
from headgeom.outputs.pk.common import ACTIVATION_MODELS, READ_PATHS, READING_KINDS, figure, table


def read_paths_rows(rp: dict, models) -> list[dict]:
    """The §5.4 table's rows: per model and reading kind, the read-path columns summarised."""
    rows = []
    for m, kind, s in model_kind_rows(rp, models):
        if not s.any():
            continue
        flags = sorted({str(f) for f in rp["flags"][s] if f}) if "flags" in rp else []
        unmeasured = bool(flags) and all(rp["flags"][s])  # no reader has a pre-attention norm
        rows.append({"model": m, "kind": kind, "pairs": int(s.sum()), **read_path_summary(rp, s),
                     "flags": " ".join(flags)})
        if unmeasured:  # the normalization split is not measured (headgeom.methods.read_paths): nothing derived from it
            rows[-1].update({k: np.nan for k in NORM_SPLIT})
            rows[-1]["cross_positive"] = None
    return rows


#: table columns derived from the linear / normalization split of the read-path response
NORM_SPLIT = ("ratio_lin_tot_med", "ratio_lin_tot_p05", "ratio_lin_tot_p95", "rel_rms_med", "norm_over_lin_total",
              "norm_over_lin_med", "tot_over_lin_total")


@table("pk_sec5_4_read_paths", families=(READ_PATHS,), **ACTIVATION_MODELS)
def pk_sec5_4_read_paths(activation_read_paths: dict, models) -> Table:
    """**PK paper, §5.4 read paths on real text (activation stage).** Per model and reading kind (Q/K/V), over
    every writer head of layer l and reader head of a later layer: linear against normalization term of
    the first-order response (ratios, relative RMS error, cross-term signs), projected energy share
    tr(P_V C)/tr C of actual writes against ρ (Spearman, Pearson, share/ρ quantiles, per layer pair),
    linear-term energy against ρ, and composition scores against ρ. Models without a pre-attention norm
    (post-LN BERT) have the normalization columns NaN and a flag (not measured)."""
    rp = activation_read_paths
    rows = read_paths_rows(rp, models)
    f3, f2 = "{:.3f}", "{:.2f}"
    return Table(
        columns=[Column("model", "Model"), Column("kind", "Kind"), Column("pairs", "Pairs"),
         Column("ratio_lin_tot_med", "lin/tot med", f3), Column("ratio_lin_tot_p05", "p05", f2),
         Column("ratio_lin_tot_p95", "p95", f2), Column("rel_rms_med", "rel. RMS med", f3),
         Column("norm_over_lin_total", "norm/lin (sum)", f3), Column("norm_over_lin_med", "norm/lin (pair med)", f3), Column("tot_over_lin_total", "tot/lin (sum)", f3),
         Column("cross_positive", "cross > 0"), Column("share_rho_spearman", "Spearman share-rho", f2),
         Column("share_rho_pearson", "Pearson", f2), Column("share_rho_ratio_med", "share/rho med", f2),
         Column("share_rho_ratio_p05", "p05", f2), Column("share_rho_ratio_p95", "p95", f2),
         Column("lin_rho_spearman", "Spearman lin-rho", f2), Column("layer_pair_spearman_med", "layer-pair med", f2),
         Column("layer_pairs_negative", "layer pairs < 0"), Column("composition_rho_spearman", "Spearman comp-rho", f2),
         Column("composition_rho_pearson", "Pearson comp-rho", f2), Column("flags", "Flags")],
        rows=rows,
        notes="Energies are token means of squared norms; rel. RMS = sqrt(E||n||^2 / E||t||^2). "
              "Writes are taken where the model adds them to the residual, through a post-attention norm "
              "where the model has one (activation.read_paths.write_point: residual, the default; pre_norm: "
              "before that norm). Flag post_ln_read_path (post-LN models, e.g. BERT) / no_pre_norm_read_path "
              "(no norm before the reader's projections): the write reaches the reader through norms this "
              "first-order split does not model (post-LN: the LayerNorm after each residual add), so the "
              "linear / normalization columns (lin/tot, rel. RMS, norm/lin, tot/lin, cross > 0) are NaN, "
              "not measured; share, rho, linear energy and composition stay measured.",
    )


@figure("pk_fig4_share_vs_rho", families=(READ_PATHS,), **ACTIVATION_MODELS)
def pk_fig4_share_vs_rho(activation_read_paths: dict, models):
    """**PK paper, Figure 4.** Measured projected energy share of actual writes against ρ (hexbin, log counts;
    dashed: isotropic writes, share = ρ) per reading kind, and the distribution of share/ρ (median and
    5-95 percentile band)."""
    rp = activation_read_paths
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    plt = pyplot()
    n = max(len(models), 1)
    fig, axes = plt.subplots(2 * n, 3, figsize=(10, 5.2 * n), squeeze=False)
    index = {m: i for i, m in enumerate(models)}
    for m, kind, s in model_kind_rows(rp, models):
        i, k = index[m], READING_KINDS.index(kind)
        ax, bx = axes[2 * i, k], axes[2 * i + 1, k]
        rho, share = rp["rho"][s], rp["share"][s]
        ok = np.isfinite(rho) & np.isfinite(share)
        if ok.sum():
            ax.hexbin(rho[ok], share[ok], gridsize=30, bins="log", mincnt=1, cmap="viridis")
            hi = float(max(rho[ok].max(), share[ok].max()))
            ax.plot([0, hi], [0, hi], "k--", lw=0.8)
            ratio = positive_share_ratio(share, rho)
            if ratio.size:
                bins = np.logspace(np.log10(ratio.min()), np.log10(ratio.max()) + 1e-9, 40)
                bx.hist(ratio, bins=bins, color="C0")
                bx.set_xscale("log")
                # plain tick labels: log minor labels ("4×10⁻¹6×10⁻¹") ran into each other
                bx.xaxis.set_major_locator(FixedLocator([0.1, 0.2, 0.5, 1, 2, 5, 10]))
                bx.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
                bx.xaxis.set_minor_formatter(NullFormatter())
                p5, p50, p95 = percentile_band(ratio, (5, 50, 95))
                bx.axvspan(p5, p95, color="C1", alpha=0.2)
                bx.axvline(p50, color="C1")
                bx.axvline(1.0, color="k", ls="--", lw=0.8)
        ax.set_title(f"{m}: {kind} ({int(s.sum())} pairs)", fontsize=9)
        ax.set_xlabel("ρ")
        ax.set_ylabel("tr(P_V C)/tr C")
        bx.set_xlabel("share / ρ")
    fig.suptitle("Figure 4: measured projected energy share vs ρ (hexbin, log counts; dashed: isotropic writes)")
    fig.tight_layout()
    return fig


#: most points a scatter panel draws (beyond it, an even stride through the points)
SCATTER_MAX = 200_000


@figure("pk_fig5_spearman_layer_pairs", families=(READ_PATHS,), **ACTIVATION_MODELS)
def pk_fig5_spearman_layer_pairs(activation_read_paths: dict, models):
    """**PK paper, Figure 5.** Spearman correlation of share with ρ per writer → reader layer pair, per reading
    kind; V linear-term energy against ρ (at most 200,000 points drawn, an even stride beyond)."""
    rp = activation_read_paths
    plt = pyplot()
    n = max(len(models), 1)
    fig, axes = plt.subplots(n, 2, figsize=(9, 3.4 * n), squeeze=False)
    for i, m in enumerate(models):
        ax, bx = axes[i]
        masks = {kind: s for _, kind, s in model_kind_rows(rp, [m])}
        for k, kind in enumerate(READING_KINDS):
            s = masks[kind]
            share, rho = rp["share"][s], rp["rho"][s]
            vals = layer_pair_spearman(share, rho, rp["writer_layer"][s], rp["reader_layer"][s])
            vals = vals[np.isfinite(vals)]
            if vals.size:
                ax.scatter(np.full(vals.size, k) + np.linspace(-0.25, 0.25, vals.size), vals, s=6, alpha=0.6)
                ax.hlines(finite_median(vals), k - 0.35, k + 0.35, color="k")
        ax.axhline(0, color="grey", lw=0.6)
        ax.set_xticks(range(3), READING_KINDS)
        ax.set_ylabel("Spearman(share, ρ) per layer pair")
        ax.set_title(m, fontsize=9)
        s = masks["V"]
        if s.any():
            # every pair up to SCATTER_MAX points, else an even stride through them (the title's
            # Spearman is over all of them)
            shown = np.flatnonzero(s)[::max(1, -(-int(s.sum()) // SCATTER_MAX))]
            bx.scatter(rp["rho"][shown], rp["e_lin"][shown], s=3, alpha=0.4, rasterized=True)
            bx.set_yscale("log")
            bx.set_title(f"V: Spearman(linear energy, ρ) = {spearman(rp['e_lin'][s], rp['rho'][s]):.2f}", fontsize=9)
        bx.set_xlabel("ρ")
        bx.set_ylabel("E||linear term||²")
    fig.suptitle("Figure 5: per-layer-pair Spearman of share with ρ; V linear-term energy vs ρ")
    fig.tight_layout()
    return fig
