"""Paper 1's orientation tests: trained closure against signed-permutation scrambles and Haar draws
(per model and per layer), the factorial D x K, the O/V rank audit and the scramble figure
(statistics in headgeom.methods.paper1.orientation)."""

from __future__ import annotations

import numpy as np

from headgeom.core.stats import finite_max, finite_mean, finite_median, finite_min
from headgeom.methods.paper1.common import layer_rows
from headgeom.methods.paper1.orientation import (factorial_endpoints, layers_favoring_trained, rank_tolerance,
                                                 scramble_comparison)
from headgeom.outputs.formats import POOLED_MODELS, Table, pyplot
from headgeom.outputs.paper1.common import (NAN, STRONG_THRESHOLD_PARAM, column, count_of, draws, figure, model_rows,
                                            percent, pool_members, pooled_models, row_selections, table, values)
from headgeom.outputs.registry import HEADS


@table("p1_orientation_scramble", families=(HEADS,), params=STRONG_THRESHOLD_PARAM | {"pools": "paper1/pools"})
def p1_orientation_scramble(paper1_heads: dict, models: list[str], strong_threshold: float,
                            pools: dict | None = None) -> Table:
    """**Paper 1, orientation scramble.** Trained closure against the median of each head's
    signed-permutation scrambles K' = P_L K P_R and the Haar audit of K (singular values, D and spans
    fixed); the scramble draws evaluated (heads × draws)."""
    heads = paper1_heads
    rows = []
    for m, s, members in row_selections(heads, models, pools):
        P, R, RH, sv = (values(heads, k, s) for k in ("P", "R_scramble", "R_haar", "sv_relerr"))
        scr = draws(values(heads, "P_scramble", s, None))
        haar = draws(values(heads, "P_haar", s, None))
        strong = np.isfinite(P) & (P >= strong_threshold)
        st = scramble_comparison(P, R, RH, strong)
        n_lay, lay_pos, lay_pos_h = layers_favoring_trained(values(heads, "model", s, None), values(heads, "layer", s, np.int64),
                                                            P, R, RH, strong)
        rows.append({
            "model": m, "heads": st["n"], "P_median": finite_median(P[np.isfinite(R)]), "scr_median": finite_median(scr),
            "beat": count_of(st["beat"], st["n"]), "beat_pct": percent(st["beat"], st["n"]),
            "diff": st["diff"], "layers_pos": count_of(lay_pos, n_lay),
            "beat_ex": count_of(st["beat_ex"], st["n_ex"]),
            "beat_ex_pct": percent(st["beat_ex"], st["n_ex"]), "diff_ex": st["diff_ex"],
            "draws": int(np.isfinite(scr).sum()),
            "scr_max": finite_max(scr), "scr_085": int(np.sum(np.isfinite(scr) & (scr >= 0.85))),
            "haar_median": finite_median(haar), "beat_h_pct": percent(st["beat_h"], st["n_h"]),
            "diff_h": st["diff_h"], "layers_pos_h": count_of(lay_pos_h, n_lay), "sv_max": finite_max(sv),
            POOLED_MODELS: pooled_models(members),
        })
    return Table(
        columns=[
            column("model", "Model"), column("heads", "Heads"), column("P_median", "Median P", "{:.3g}"),
            column("scr_median", "Median scramble", "{:.2e}"), column("beat", "P > R"), column("beat_pct", "%", "{:.2f}"),
            column("diff", "Median P−R", "{:.3g}"), column("layers_pos", "Layers median P−R > 0"),
            column("beat_ex", "P > R (non-strong)"), column("beat_ex_pct", "% (non-strong)", "{:.2f}"),
            column("diff_ex", "Median P−R (non-strong)", "{:.3g}"),
            column("draws", "Scramble draws"), column("scr_max", "Max scramble", "{:.3g}"),
            column("scr_085", "Scrambles ≥ 0.85"),
            column("haar_median", "Median Haar", "{:.2e}"), column("beat_h_pct", "% P > Haar median", "{:.2f}"),
            column("diff_h", "Median P−R_Haar", "{:.3g}"), column("layers_pos_h", "Layers Haar diff > 0"),
            column("sv_max", "Max sv rel. err", "{:.1e}"), column(POOLED_MODELS, "Pooled models"),
        ],
        rows=rows,
        notes="R = median of the head's signed-permutation draws (R_Haar: of its Haar draws). Singular values of K "
              "are preserved in every draw (asserted; max relative error shown). Pooled: every head of the active "
              "models (medians over all heads / draws; layers counted per model); pooled <name>: those of the "
              "active models of paper1.pools' <name>.",
    )


@table("p1_orientation_layers", families=(HEADS,), params=STRONG_THRESHOLD_PARAM)
def p1_orientation_layers(paper1_heads: dict, models: list[str], strong_threshold: float) -> Table:
    """**Paper 1, per layer.** Per layer: the share of heads whose trained closure beats their scramble
    (and Haar) median, the median paired differences, and the factorial D×K endpoint with its wrong-V
    control."""
    heads = paper1_heads
    rows = []
    for m in models:
        s = model_rows(heads, m)
        P, R, RH, I, Ic = (values(heads, k, s) for k in ("P", "R_scramble", "R_haar", "I_factorial", "I_factorial_ctrl"))
        strong = np.isfinite(P) & (P >= strong_threshold)
        for L, sl in layer_rows(values(heads, "layer", s, np.int64)):
            st = scramble_comparison(P[sl], R[sl], RH[sl], strong[sl])
            fi, fc = finite_mean(I[sl]), finite_mean(Ic[sl])
            rows.append({
                "model": m, "layer": int(L), "heads": int(sl.size), "strong": int(strong[sl].sum()),
                "beat_share": st["beat"] / st["n"] if st["n"] else NAN, "diff": st["diff"],
                "beat_ex_share": st["beat_ex"] / st["n_ex"] if st["n_ex"] else NAN, "diff_ex": st["diff_ex"],
                "beat_h_share": st["beat_h"] / st["n_h"] if st["n_h"] else NAN, "diff_h": st["diff_h"],
                "I": fi, "I_ctrl": fc, "I_diff": fi - fc,
            })
    return Table(
        columns=[
            column("model", "Model"), column("layer", "Layer"), column("heads", "Heads"), column("strong", "Strong"),
            column("beat_share", "Share P > R", "{:.3f}"), column("diff", "Median P−R", "{:.3g}"),
            column("beat_ex_share", "Share P > R (non-strong)", "{:.3f}"),
            column("diff_ex", "Median P−R (non-strong)", "{:.3g}"),
            column("beat_h_share", "Share P > R_Haar", "{:.3f}"), column("diff_h", "Median P−R_Haar", "{:.3g}"),
            column("I", "Factorial I", "{:.4f}"), column("I_ctrl", "Control I", "{:.4f}"),
            column("I_diff", "Real − control", "{:.4f}"),
        ],
        rows=rows,
    )


@table("p1_factorial", families=(HEADS,))
def p1_factorial(paper1_heads: dict, models: list[str]) -> Table:
    """**Paper 1, factorial D×K.** Layer mean of the head interaction I_h over exhaustive donor reassignment,
    and real minus the wrong-V control (K, D recomputed after wrong-V pairing)."""
    heads = paper1_heads
    rows = []
    for m in models:
        s = model_rows(heads, m)
        ends, ctrl = factorial_endpoints(values(heads, "I_factorial", s), values(heads, "I_factorial_ctrl", s),
                                         values(heads, "layer", s, np.int64))
        ok, okc = np.isfinite(ends), np.isfinite(ends) & np.isfinite(ctrl)
        rows.append({
            "model": m, "layers": int(ok.sum()), "mean_I": finite_mean(ends), "median_I": finite_median(ends),
            "pos": count_of(int(np.sum(ends[ok] > 0)), int(ok.sum())),
            "pos_pct": 100.0 * np.mean(ends[ok] > 0) if ok.any() else NAN,
            "mean_ctrl": finite_mean(ctrl), "diff": finite_mean((ends - ctrl)[okc]) if okc.any() else NAN,
            "pos_diff": count_of(int(np.sum((ends - ctrl)[okc] > 0)), int(okc.sum())),
            "pos_diff_pct": 100.0 * np.mean((ends - ctrl)[okc] > 0) if okc.any() else NAN,
        })
    return Table(
        columns=[
            column("model", "Model"), column("layers", "Layers"), column("mean_I", "Mean endpoint", "{:.4f}"),
            column("median_I", "Median endpoint", "{:.4f}"), column("pos", "Layers I > 0"),
            column("pos_pct", "%", "{:.1f}"), column("mean_ctrl", "Mean control", "{:.4f}"),
            column("diff", "Mean real − control", "{:.4f}"),
            column("pos_diff", "Layers real − control > 0"), column("pos_diff_pct", "% ", "{:.1f}"),
        ],
        rows=rows,
        notes="I_h = S[h,h] − mean_{j≠h} S[h,j] − mean_{i≠h} S[i,h] + mean_{i,j≠h} S[i,j], S[i,j] = P_{D_j}(K_i). "
              "GQA donors: the same query slot in the other KV groups; MHA: all heads. One KV group: undefined (–).",
    )


@table("p1_orientation_rank_audit", families=(HEADS,),
       params={"tolerance": "paper1/rank_tolerance", "rank_rtol": "rank_rtol", "pools": "paper1/pools"})
def p1_orientation_rank_audit(paper1_heads: dict, fields: dict, models: list[str], tolerance: str = "rank_rtol",
                              rank_rtol: float = 1e-6, pools: dict | None = None) -> Table:
    """**Paper 1, rank audit.** Every participating O/V factor (each head's O and its paired V): how many have
    full numerical column rank at the tolerance ``paper1.rank_tolerance`` = {{
    snakemake.params.tolerance }} (rank_rtol: s_min/s_max > ``rank_rtol``; eps: > max(m, n)·ε₆₄), and
    the smallest observed s_min/s_max (paper: 2.63e-4)."""
    heads = paper1_heads
    rows = []
    for m in models:
        s = model_rows(heads, m)
        if not s.any():
            continue
        f = fields[m]
        tol = rank_tolerance(tolerance, f["d_model"], f["d_head"], rank_rtol)
        rO, rV = values(heads, "sv_ratio_O", s), values(heads, "sv_ratio_V", s)
        r = np.concatenate([rO, rV])
        full = int(np.sum(np.isfinite(r) & (r > tol)))
        rows.append({"model": m, "heads": int(s.sum()), "factors": int(r.size), "full": count_of(full, int(r.size)),
                     "n_full": full, "tol": tol, "min_O": finite_min(rO), "min_V": finite_min(rV),
                     "min_ratio": finite_min(r)})
    per_model = {r["model"]: r for r in rows}
    for label, members in pool_members(list(per_model), pools):
        part = [per_model[m] for m in members]
        n = sum(x["factors"] for x in part)
        rows.append({"model": label, "heads": sum(x["heads"] for x in part), "factors": n,
                     "full": count_of(sum(x["n_full"] for x in part), n), "tol": None,
                     **{k: finite_min(np.array([x[k] for x in part])) for k in ("min_O", "min_V", "min_ratio")},
                     POOLED_MODELS: pooled_models(members)})
    for r in rows:
        r.pop("n_full", None)
    return Table(
        columns=[
            column("model", "Model"), column("heads", "Heads"), column("factors", "O/V factors"),
            column("full", "Full column rank"), column("tol", "Tolerance (relative)", "{:.2e}"),
            column("min_O", "Min s_min/s_max (O)", "{:.3e}"), column("min_V", "Min s_min/s_max (V)", "{:.3e}"),
            column("min_ratio", "Min s_min/s_max", "{:.3e}"), column(POOLED_MODELS, "Pooled models"),
        ],
        rows=rows,
        notes="Factors: every head's O_h and the value factor it is paired with (one per head, so shared GQA "
              "values count once per head). Singular values from the SVD of each factor in float64. Tolerance: "
              "paper1.rank_tolerance (rank_rtol: the pipeline's rank; eps: max(d_model, d_head)·ε₆₄, the paper's).",
    )


@figure("p1_fig_orientation_scramble", families=(HEADS,), params=STRONG_THRESHOLD_PARAM)
def p1_fig_orientation_scramble(paper1_heads: dict, models: list[str], strong_threshold: float):
    """**Paper 1, orientation scramble.** Trained closure against the median of each head's orientation
    scrambles (t = {{ snakemake.params.strong_threshold }})."""
    heads = paper1_heads
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    lo = 1.0
    for i, m in enumerate(models):
        s = model_rows(heads, m)
        P, R = values(heads, "P", s), values(heads, "R_scramble", s)
        ok = np.isfinite(P) & np.isfinite(R) & (P > 0) & (R > 0)
        if ok.any():
            lo = min(lo, P[ok].min(), R[ok].min())
        ax.scatter(R[ok], P[ok], s=6, color=f"C{i}", alpha=0.6, label=m)
    lo = max(lo / 2, 1e-12)
    ax.plot([lo, 1], [lo, 1], "k-", lw=0.7)
    ax.axhline(strong_threshold, color="k", ls=":", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="scrambled closure (median of signed-permutation draws)",
           ylabel="trained closure P", title="Trained vs scrambled closure per head")
    ax.legend(fontsize=7)
    return fig
