"""Paper 1's strong closure tail: Table 2, the threshold sweep and the closure CCDF (statistics in
headgeom.methods.paper1.tail)."""

from __future__ import annotations

import numpy as np

from headgeom.methods.paper1.tail import latent_aurocs, strong_tail, sweep_intervals
from headgeom.outputs.formats import Table, pyplot, step_ccdf
from headgeom.outputs.paper1.common import (STRONG_THRESHOLD_PARAM, column, count_of, draws, figure,
                                            interval_columns, model_rows, percent, table, thresholds, values)
from headgeom.outputs.registry import HEADS


@table("p1_table2_strong_tail", families=(HEADS,), params=STRONG_THRESHOLD_PARAM | {"sweep": "paper1/sweep"},
       headlines=(("strong", "strong heads (closure P above the threshold)"), ("strong_pct", "strong heads, % of heads"),
                  ("gT_med", "return gain g_T, median over strong heads"),
                  ("wrong_v_median", "median P with the wrong V (control)")))
def p1_table2_strong_tail(paper1_heads: dict, models: list[str], strong_threshold: float, sweep) -> Table:
    """**Paper 1, Table 2.** Strong closure tail (P ≥ t) per model with the cyclic wrong-V control and
    return gain g_T (t = {{ snakemake.params.strong_threshold }}; sweep ends {{
    snakemake.params.sweep|first }} and {{ snakemake.params.sweep|last }})."""
    heads = paper1_heads
    sweep = thresholds(sweep)
    t_lo, t_hi = min(sweep), max(sweep)
    rows = []
    for m in models:
        s = model_rows(heads, m)
        P, Pw, alpha, g = (values(heads, k, s) for k in ("P", "P_wrong_v", "alpha", "g_T"))
        st = strong_tail(P, Pw, alpha, g, strong_threshold)
        defined, strong = st["defined"], st["strong_mask"]
        n_def, n_s = st["n_defined"], st["strong"]
        rows.append({
            "model": m, "layers": int(np.unique(values(heads, "layer", s)).size), "heads": int(s.sum()),
            "undefined": int(s.sum()) - n_def,  # NaN P (non-finite or zero T): out of every percentage
            "strong_pct": percent(n_s, n_def), "strong": n_s,
            "wrong_v_median": st["wrong_v_median"], "wrong_v_max": st["wrong_v_max"],
            "wrong_v_at_lowest": int(np.sum(np.isfinite(Pw) & (Pw >= t_lo))) if np.isfinite(Pw).any() else None,
            "tail_lo_pct": percent(np.sum(defined & (P >= t_lo)), n_def),
            "tail_hi_pct": percent(np.sum(defined & (P >= t_hi)), n_def),
            "neg_alpha": st["neg_alpha_share"],
            "gT_med": st["gT_median_strong"], "gT_min": st["gT_min_strong"],
            "gT_above_all_median": count_of(int(np.sum(g[strong] > st["gT_median_all"])), n_s),
            "gT_below_001": int(np.sum(g[strong] < 0.01)),
        })
    return Table(
        columns=[
            column("model", "Model"), column("layers", "Layers"), column("heads", "Heads"),
            column("undefined", "Undefined"), column("strong_pct", "% P≥t", "{:.2f}"), column("strong", "Count"),
            column("wrong_v_median", "Wrong-V median", "{:.2e}"), column("wrong_v_max", "Wrong-V max", "{:.3g}"),
            column("wrong_v_at_lowest", f"Wrong-V ≥ {t_lo:g}"),
            column("tail_lo_pct", f"% P≥{t_lo:g}", "{:.2f}"), column("tail_hi_pct", f"% P≥{t_hi:g}", "{:.2f}"),
            column("neg_alpha", "Neg. α share (strong)", "{:.2f}"),
            column("gT_med", "g_T median (strong)", "{:.3g}"), column("gT_min", "g_T min (strong)", "{:.3g}"),
            column("gT_above_all_median", "Strong g_T > all-head median"),
            column("gT_below_001", "Strong g_T < 0.01"),
        ],
        rows=rows,
        notes="t = tables.strong_threshold. Wrong-V pairs O_h with the next KV group's V (MHA: V_{h+1}); "
              "it is undefined (–) with one KV group. g_T = ||T²||/||T||.",
    )


@table("p1_threshold_sweep", families=(HEADS,), params={"sweep": "paper1/sweep", "bootstrap": "paper1/bootstrap"})
def p1_threshold_sweep(paper1_heads: dict, models: list[str], sweep, bootstrap: int = 0) -> Table:
    """**Paper 1, threshold sweep.** At each threshold t of ``paper1.sweep``: tail size, controls
    reaching t, the AUROC of latent closure (strong vs ordinary at t) and of I_D among heads with
    latent closure ≥ t (preserved vs reduced at t), with model/layer-clustered bootstrap 95%
    intervals ({{ snakemake.params.bootstrap }} replicates, ``paper1.bootstrap``)."""
    heads, n_boot = paper1_heads, int(bootstrap or 0)
    rows = []
    selections = [(m, model_rows(heads, m)) for m in models]
    if len(models) > 1:
        selections.append(("pooled", np.isin(np.asarray(heads.get("model", [])), models)))
    ts = thresholds(sweep)
    for m, s in selections:
        P, Pw, PL, ID = (values(heads, k, s) for k in ("P", "P_wrong_v", "P_latent", "I_D"))
        scr = draws(values(heads, "P_scramble", s, None))
        haar = draws(values(heads, "P_haar", s, None))
        n_def = int(np.isfinite(P).sum())
        ci = sweep_intervals(heads, s, m, P, PL, ID, ts, n_boot)
        for t in ts:
            au_lat, au_id, n_lat, n_pres, n_red = latent_aurocs(P, PL, ID, t)
            lat_lo, lat_hi, id_lo, id_hi = ci[t]
            rows.append({
                "model": m, "t": t, "strong": int(np.sum(np.isfinite(P) & (P >= t))),
                "strong_pct": percent(np.sum(np.isfinite(P) & (P >= t)), n_def),
                "wrong_v": int(np.sum(np.isfinite(Pw) & (Pw >= t))) if np.isfinite(Pw).any() else None,
                "scramble": int(np.sum(np.isfinite(scr) & (scr >= t))), "haar": int(np.sum(np.isfinite(haar) & (haar >= t))),
                "auroc_latent": au_lat, "latent_n": n_lat, "preserved": n_pres, "reduced": n_red, "auroc_ID": au_id,
                "lat_lo": lat_lo, "lat_hi": lat_hi, "id_lo": id_lo, "id_hi": id_hi,
            })
    return Table(
        columns=[
            column("model", "Model"), column("t", "t", "{:.3f}"), column("strong", "P≥t"),
            column("strong_pct", "%", "{:.2f}"), column("wrong_v", "Wrong-V ≥ t"),
            column("scramble", "Scramble draws ≥ t"), column("haar", "Haar draws ≥ t"),
            column("auroc_latent", "AUROC P_I", "{:.3f}"), column("latent_n", "P_I≥t"),
            column("preserved", "Preserved"), column("reduced", "Reduced"),
            column("auroc_ID", "AUROC I_D given P_I", "{:.3f}"),
            *interval_columns("lat_lo", "lat_hi", "AUROC P_I"),
            *interval_columns("id_lo", "id_hi", "AUROC I_D"),
        ],
        rows=rows,
        notes="AUROC = P(score of positive > negative) + ½ P(tie); – when a class is empty. 95% intervals: "
              "model/layer-clustered percentile bootstrap (resampling models, then complete layers within them; "
              "paper1.bootstrap replicates, every threshold from the same replicates; – with 0 replicates).",
    )


@figure("p1_fig_closure_ccdf", families=(HEADS,), params=STRONG_THRESHOLD_PARAM | {"sweep": "paper1/sweep"})
def p1_fig_closure_ccdf(paper1_heads: dict, models: list[str], strong_threshold: float, sweep):
    """**Paper 1, closure CCDF.** Closure CCDF per model with the wrong-V control and the threshold sweep (t =
    {{ snakemake.params.strong_threshold }})."""
    heads = paper1_heads
    plt = pyplot()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    ts = thresholds(sweep)
    for i, m in enumerate(models):
        s = model_rows(heads, m)
        c = f"C{i}"
        P, Pw = values(heads, "P", s), values(heads, "P_wrong_v", s)
        step_ccdf(ax, P, color=c, label=f"{m} (trained)")
        step_ccdf(ax, Pw, color=c, ls="--", alpha=0.8, label=f"{m} (wrong-V)")
        n = max(int(np.isfinite(P).sum()), 1)
        ax2.plot(ts, [100 * np.sum(P >= t) / n for t in ts], "o-", color=c, ms=3, label=f"{m} (trained)")
        if np.isfinite(Pw).any():
            ax2.plot(ts, [100 * np.sum(Pw >= t) / n for t in ts], "x--", color=c, ms=3, label=f"{m} (wrong-V)")
    ax.axvline(strong_threshold, color="k", lw=0.8, ls=":")
    ax.set(xscale="log", yscale="log", xlabel="closure P", ylabel="fraction of heads with P ≥ x",
           title="Closure CCDF, trained vs wrong-V")
    ax2.axvline(strong_threshold, color="k", lw=0.8, ls=":")
    ax2.set(xlabel="threshold t", ylabel="% of heads with P ≥ t", title="Threshold sweep")
    ax.legend(fontsize=6)
    ax2.legend(fontsize=6)
    fig.tight_layout()
    return fig
